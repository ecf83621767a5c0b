//! The real binary as a child process: `stategraph` commands run in a
//! working directory, servers started from it (with a config file, or with
//! the studio's announcement checked), and the example apps built.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{root, serving};

pub struct Server {
    pub child: tokio::process::Child,
    pub base: String,
    /// Where its stderr (the `info` log) goes.
    pub log: PathBuf,
}

impl Server {
    /// The last `lines` of its log, headed by the file's name: for an
    /// assertion's message, so a failure says what the server did (the log
    /// goes with the test's temporary directory).
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        format!(
            "==> the server's log, last {lines} lines ({}):\n{tail}",
            self.log.display()
        )
    }
}

/// Starts `stategraph serve` with `config` (TOML) in `dir`, serving `graphs`.
pub async fn start(dir: &Path, config: &str, graphs: &Path) -> Server {
    let cfg = dir.join(format!("stategraph-{}.toml", uuid::Uuid::now_v7().simple()));
    std::fs::write(&cfg, config).unwrap();
    let log_path = dir.join(format!("server-{}.log", uuid::Uuid::now_v7().simple()));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stategraph"));
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .args(["--graphs"])
        .arg(graphs)
        .args(["--prompts"])
        .arg(root().join("prompts"))
        .env("RUST_LOG", "info")
        .stderr(log);
    let (child, base, _) = serving(cmd, false).await;
    let base = base.expect("the server announces its address");
    Server {
        child,
        base,
        log: log_path,
    }
}

pub fn config(store: &str) -> String {
    format!(
        "[server]\nlease = \"1s\"\nrecover_interval = \"200ms\"\nlinger = \"30s\"\nkeep_alive = \"1s\"\n\
         [llm.offline]\ntoken_delay = \"15ms\"\nanswer_tokens = 40\n\
         [tools.http]\nallow = [\"127.0.0.1\"]\ntimeout = \"30s\"\n{store}"
    )
}

pub fn copy_shipped_graphs(to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(root().join("graphs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// Starts `stategraph serve` on a free port with these graphs; returns it
/// and the studio URL it printed (checked against its base URL).
pub async fn serve_binary(dir: &Path, graphs: &Path) -> (tokio::process::Child, String) {
    serve_binary_with(dir, graphs, &[]).await
}

/// [`serve_binary`] with global options before `serve` (e.g. `--model-script`).
pub async fn serve_binary_with(
    dir: &Path,
    graphs: &Path,
    global: &[&str],
) -> (tokio::process::Child, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stategraph"));
    cmd.args(global)
        .arg("serve")
        .current_dir(dir)
        .env("STATEGRAPH_GRAPHS", graphs)
        .env("STATEGRAPH_PROMPTS", root().join("prompts"))
        .env("STATEGRAPH_DATA_DIR", dir.join("data"))
        .stderr(Stdio::null());
    let (child, base, studio) = serving(cmd, true).await;
    let base = base.expect("the server announces its address");
    assert_eq!(
        studio.as_deref(),
        Some(format!("{base}/studio").as_str()),
        "serve prints the studio's URL (if another checkout shares CARGO_TARGET_DIR, its build \
         may have replaced {} with its own binary)",
        env!("CARGO_BIN_EXE_stategraph")
    );
    (child, base)
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stategraph")
}

/// `stategraph ARGS` in `dir` (its `graphs/`, `prompts/`, `data/`).
pub fn sg_in(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(bin())
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("STATEGRAPH_CONFIG")
        .env_remove("STATEGRAPH_MODEL_SCRIPT")
        .args(args)
        .output()
        .unwrap()
}

pub fn shown(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// A working directory with the shipped graphs (without their tests) and
/// prompts, and a model script: the router classifies a greeting as
/// DIRECT — unless its prompt says to ask back and the user mentions the
/// weather, then as CLARIFY.
pub fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    copy_dir(&root().join("prompts"), &d.join("prompts"));
    std::fs::create_dir_all(d.join("graphs")).unwrap();
    for e in std::fs::read_dir(root().join("graphs")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, d.join("graphs").join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        d.join("models.yaml"),
        r#"rules:
  - when: { system: "You route questions", contains: "ASK BACK FIRST", user: "weather" }
    reply: { json: { intent: CLARIFY, reasoning: "asked to ask back", missing_slots: [country], detected_language: en } }
  - when: { system: "You route questions", user: "population" }
    reply: { json: { intent: QUICK_ANSWER, reasoning: "a figure", missing_slots: [], detected_language: en } }
  - when: { system: "You route questions" }
    reply: { json: { intent: DIRECT, reasoning: "small talk", missing_slots: [], detected_language: en } }
  - reply: "Hello! Ask me about development data."
"#,
    )
    .unwrap();
    dir
}

/// The run id `stategraph run` prints on stderr.
pub fn run_id(o: &Output) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr);
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("run ")?.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id on stderr: {}", shown(o)))
        .to_owned()
}

/// An example's binary, built now: `--all-targets` builds examples only
/// as tests, and a binary left in a build cache shared between clones may
/// be another checkout's (cargo builds it again here when its sources
/// differ).
pub fn example(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_stategraph"))
        .parent()
        .unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--example", name])
        .current_dir(root());
    if dir.ends_with("release") {
        cmd.arg("--release");
    }
    let status = cmd.status().unwrap();
    assert!(status.success(), "building the example {name} failed");
    dir.join("examples").join(name)
}
