//! docs/tutorial.md, executed: every file it shows is written, every
//! command it shows is run as written (through `sh`, with this build's
//! `stategraph` first on the PATH), and every output line it shows must
//! appear. The server step binds a free port instead of 8080 and the later
//! commands use that address; `<run-id>` is the id the last `run` printed.
//!
//! Output lines match as substrings of one line; `…` stands for anything
//! (the pieces between must appear in order on one line). A command must
//! succeed unless the output it shows has an `error[` line (or a `FAIL `
//! line: a failing test case).

use std::path::{Path, PathBuf};

use crate::support::{aisdk_validate, root, spawn_serving};

/// One step of the tutorial.
#[derive(Debug)]
enum Step {
    /// A file and its content.
    File(String, String),
    /// A command and the output lines shown for it.
    Command(String, Vec<String>),
}

fn steps(markdown: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```").filter(|i| !i.is_empty()) else {
            continue;
        };
        let block: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        if let Some(path) = info
            .split_whitespace()
            .find_map(|w| w.strip_prefix("file="))
        {
            steps.push(Step::File(path.to_owned(), block.join("\n") + "\n"));
        } else if info == "console" {
            for l in block {
                match l.strip_prefix("$ ") {
                    Some(cmd) => steps.push(Step::Command(cmd.to_owned(), Vec::new())),
                    None if l.trim().is_empty() => {}
                    None => match steps.last_mut() {
                        Some(Step::Command(_, expected)) => expected.push(l.trim().to_owned()),
                        _ => panic!("output before any command: {l}"),
                    },
                }
            }
        }
    }
    steps
}

/// Whether `want` (with `…` for anything) is on one of `lines`.
fn shown(lines: &str, want: &str) -> bool {
    lines.lines().any(|line| {
        let mut rest = line;
        want.split('…')
            .filter(|p| !p.is_empty())
            .all(|piece| match rest.find(piece) {
                Some(i) => {
                    rest = &rest[i + piece.len()..];
                    true
                }
                None => false,
            })
    })
}

struct Session {
    cwd: PathBuf,
    path: String,
    base: Option<String>,
    run_id: Option<String>,
    server: Option<tokio::process::Child>,
}

impl Session {
    async fn command(&mut self, cmd: &str, expected: &[String]) {
        if let Some(dir) = cmd.strip_prefix("mkdir ") {
            std::fs::create_dir_all(self.cwd.join(dir)).unwrap();
            return;
        }
        if let Some(dir) = cmd.strip_prefix("cd ") {
            self.cwd = self.cwd.join(dir);
            return;
        }
        if cmd == "stategraph serve" {
            return self.serve(expected).await;
        }
        let mut line = cmd.to_owned();
        if let Some(base) = &self.base {
            line = line.replace("http://127.0.0.1:8080", base);
        }
        if let Some(id) = &self.run_id {
            line = line.replace("<run-id>", id);
        }
        let out = tokio::process::Command::new("sh")
            .args(["-c", &line])
            .current_dir(&self.cwd)
            .env("PATH", &self.path)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("STATEGRAPH_CONFIG")
            .env_remove("STATEGRAPH_DATA_DIR")
            .env_remove("DATABASE_URL")
            .output()
            .await
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        let all = format!("{stdout}\n{stderr}");
        // A command fails when the output shown says so: a diagnostic, or
        // a failing test case.
        let fails = expected
            .iter()
            .any(|e| e.contains("error[") || e.starts_with("FAIL "));
        assert_eq!(!out.status.success(), fails, "`{cmd}`:\n{all}");
        for want in expected {
            assert!(shown(&all, want), "`{cmd}` did not show `{want}`:\n{all}");
        }
        if let Some(id) = stderr.lines().find_map(|l| {
            let rest = l.strip_prefix("run ")?;
            rest.contains("(stored")
                .then(|| rest.split_whitespace().next().map(str::to_owned))?
        }) {
            self.run_id = Some(id);
        }
        if stdout.starts_with("id: ") || stdout.starts_with("data: ") {
            let (ok, report) = aisdk_validate(&stdout);
            assert!(ok, "`{cmd}` is not a valid UI message stream: {report}");
        }
    }

    async fn serve(&mut self, expected: &[String]) {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "exec stategraph serve"])
            .current_dir(&self.cwd)
            .env("PATH", &self.path)
            .env_remove("STATEGRAPH_DATA_DIR");
        let (child, base) = spawn_serving(cmd).await;
        for want in expected {
            let want = want.replace("http://127.0.0.1:8080", &base);
            assert!(
                shown(&format!("stategraph is serving on {base}"), &want),
                "`serve` did not show `{want}`"
            );
        }
        self.base = Some(base);
        self.server = Some(child);
    }
}

#[tokio::test]
async fn the_tutorial_works_as_written() {
    let markdown = std::fs::read_to_string(root().join("docs/tutorial.md")).unwrap();
    let steps = steps(&markdown);
    let commands = steps
        .iter()
        .filter(|s| matches!(s, Step::Command(..)))
        .count();
    assert!(commands >= 10, "{steps:?}");
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_stategraph"))
        .parent()
        .unwrap();
    let mut session = Session {
        cwd: dir.path().to_owned(),
        path: format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        base: None,
        run_id: None,
        server: None,
    };
    for step in &steps {
        match step {
            Step::File(path, text) => {
                let file = session.cwd.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(file, text).unwrap();
            }
            Step::Command(cmd, expected) => session.command(cmd, expected).await,
        }
    }
    assert!(session.server.is_some() && session.run_id.is_some());
}
