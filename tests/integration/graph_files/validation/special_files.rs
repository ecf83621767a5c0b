//! What a graph or prompt directory may hold in place of a file — a FIFO,
//! a symlink to `/dev/zero`, a directory named `x.yaml`, a file over the
//! limit — cannot be committed as a fixture, so each test builds them in a
//! temporary directory. Every loader (`check`, a server start, the
//! reloader) must finish, name each bad entry in a diagnostic and still
//! compile the valid graph beside them.
//!
//! The only timing here is a hang guard: 10 s for work that takes
//! milliseconds, and that never ends if a FIFO is opened for a blocking
//! read or `/dev/zero` is read to its end.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::Value;
use stategraph::internals::engine::Graphs;
use stategraph::internals::graph::Diagnostic;
use stategraph::internals::graph::load::MAX_GRAPH_FILE_BYTES;
use stategraph::internals::graph::prompts::MAX_PROMPT_BYTES;

const HANG_GUARD: Duration = Duration::from_secs(10);

/// Runs `f` on its own thread and returns what it returns; fails if it has
/// not finished within [`HANG_GUARD`].
fn promptly<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("{what} still running after {HANG_GUARD:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A graph with one `llm` node using the prompt `PROMPT`; it declares its
/// state, so it compiles against any registries (the binary's included).
const LLM_GRAPH: &str = "\
state:
  fields:
    query: {type: string}
    answer: {type: string}
entry: answer
nodes:
  - id: answer
    kind: llm
    prompt: PROMPT
    input: query
    output: answer
edges: [answer -> END]
";

fn llm_graph(prompt: &str) -> String {
    LLM_GRAPH.replace("PROMPT", prompt)
}

/// A graph and a prompt directory with one valid graph (`ok`, using
/// `answer.md`) and, in place of files: FIFOs, `/dev/zero` symlinks, a
/// directory named `dir.yaml`, files one byte over the limits, and graphs
/// using each bad prompt.
struct Hostile {
    _tmp: tempfile::TempDir,
    graphs: PathBuf,
    prompts: PathBuf,
}

impl Hostile {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let graphs = tmp.path().join("graphs");
        let prompts = tmp.path().join("prompts");
        std::fs::create_dir_all(&graphs).unwrap();
        std::fs::create_dir_all(&prompts).unwrap();
        std::fs::write(graphs.join("ok.yaml"), llm_graph("answer.md")).unwrap();
        std::fs::write(prompts.join("answer.md"), "Answer: {{ query }}\n").unwrap();
        for (graph, prompt) in [
            ("uses_fifo", "fifo.md"),
            ("uses_zero", "zero.md"),
            ("uses_big", "big.md"),
        ] {
            std::fs::write(graphs.join(format!("{graph}.yaml")), llm_graph(prompt)).unwrap();
        }
        for dir in [&graphs, &prompts] {
            let ext = if *dir == graphs { "yaml" } else { "md" };
            mkfifo(&dir.join(format!("fifo.{ext}")));
            std::os::unix::fs::symlink("/dev/zero", dir.join(format!("zero.{ext}"))).unwrap();
        }
        std::fs::create_dir(graphs.join("dir.yaml")).unwrap();
        std::fs::write(
            graphs.join("big.yaml"),
            vec![b'#'; MAX_GRAPH_FILE_BYTES + 1],
        )
        .unwrap();
        std::fs::write(
            prompts.join("big.md"),
            vec![b'x'; MAX_PROMPT_BYTES as usize + 1],
        )
        .unwrap();
        Self {
            _tmp: tmp,
            graphs,
            prompts,
        }
    }

    /// `(file, code, message fragment)` of every error the loaders must give.
    fn expected(&self) -> BTreeSet<(String, String, &'static str)> {
        let g = |f: &str| self.graphs.join(f).display().to_string();
        let p = |f: &str| self.prompts.join(f).display().to_string();
        [
            (g("dir.yaml"), "not-a-file", "`dir.yaml` is a directory"),
            (g("fifo.yaml"), "not-a-file", "`fifo.yaml` is a FIFO"),
            (g("zero.yaml"), "not-a-file", "`zero.yaml` is a device"),
            (
                g("big.yaml"),
                "file-too-large",
                "1.0 MB; the limit is 1024 KB",
            ),
            (p("fifo.md"), "not-a-file", "is a FIFO"),
            (p("zero.md"), "not-a-file", "is a device"),
            (p("big.md"), "file-too-large", "0.3 MB; the limit is 256 KB"),
        ]
        .into_iter()
        .map(|(f, c, m)| (f, c.to_owned(), m))
        .collect()
    }

    /// Asserts that `diags` are exactly the expected errors.
    fn assert_reported(&self, diags: &[(String, String, String)]) {
        let got: BTreeSet<(String, String)> = diags
            .iter()
            .map(|(f, c, _)| (f.clone(), c.clone()))
            .collect();
        let want: BTreeSet<(String, String)> = self
            .expected()
            .into_iter()
            .map(|(f, c, _)| (f, c))
            .collect();
        assert_eq!(got, want, "{diags:#?}");
        assert_eq!(diags.len(), want.len(), "{diags:#?}");
        for (file, code, fragment) in self.expected() {
            assert!(
                diags
                    .iter()
                    .any(|(f, c, m)| *f == file && *c == code && m.contains(fragment)),
                "no `{fragment}` for {file}: {diags:#?}"
            );
        }
    }
}

fn triples(diags: &[Diagnostic]) -> Vec<(String, String, String)> {
    diags
        .iter()
        .map(|d| (d.file.to_string(), d.code.to_owned(), d.message.clone()))
        .collect()
}

const BAD_GRAPHS: [&str; 7] = [
    "big",
    "dir",
    "fifo",
    "uses_big",
    "uses_fifo",
    "uses_zero",
    "zero",
];

#[test]
fn check_names_every_special_file_and_still_compiles_the_valid_graph() {
    let dirs = Hostile::new();
    // A directory named like a graph file, given by name, holds no graphs.
    let named_dir = dirs.graphs.join("dir.yaml");
    let (graphs, prompts) = (dirs.graphs.clone(), dirs.prompts.clone());
    let (ok, out) = promptly("check", move || {
        let mut out = Vec::new();
        let ok = stategraph::cli::check(
            &[graphs, named_dir],
            &prompts,
            &crate::support::registries(),
            stategraph::cli::CheckFormat::Json,
            &mut out,
        )
        .unwrap();
        (ok, out)
    });
    let report: Value = serde_json::from_slice(&out).unwrap();
    assert!(!ok, "{report:#}");
    assert_eq!(report["valid"], serde_json::json!(["ok"]), "{report:#}");
    assert_eq!(report["files"], 8);
    let mut diags: Vec<(String, String, String)> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap().to_owned();
            assert_eq!(
                (d["line"].as_u64(), d["column"].as_u64()),
                (Some(1), Some(1))
            );
            (s("file"), s("code"), s("message"))
        })
        .collect();
    let named = dirs.graphs.join("dir.yaml").display().to_string();
    let at = diags
        .iter()
        .position(|(f, c, _)| *f == named && c == "no-graph-files")
        .unwrap_or_else(|| panic!("named directory not reported: {diags:#?}"));
    diags.remove(at);
    dirs.assert_reported(&diags);
}

#[test]
fn server_start_and_reload_report_special_files_and_serve_the_rest() {
    let dirs = Hostile::new();
    let (graphs_dir, prompts) = (dirs.graphs.clone(), dirs.prompts.clone());
    let graphs = promptly("server start", move || {
        Graphs::load(&graphs_dir, &prompts, crate::support::registries())
    });
    let cat = graphs.catalog();
    assert_eq!(cat.graphs.keys().collect::<Vec<_>>(), ["ok"]);
    assert_eq!(cat.failed, BAD_GRAPHS.map(String::from).into());
    dirs.assert_reported(&triples(&cat.diagnostics));

    // The reloader polls the directories; a change next to the special
    // files (one more FIFO, an edited graph) reloads without blocking.
    mkfifo(&dirs.graphs.join("fifo2.yml"));
    std::fs::write(
        dirs.graphs.join("ok.yaml"),
        format!("description: edited\n{}", llm_graph("answer.md")),
    )
    .unwrap();
    let graphs = std::sync::Arc::new(graphs);
    let g = std::sync::Arc::clone(&graphs);
    let report = promptly("reload", move || g.reload_if_changed())
        .expect("the directory changed, so it reloads");
    assert_eq!(report.updated, ["ok"]);
    let fifo2 = dirs.graphs.join("fifo2.yml").display().to_string();
    assert!(
        report
            .diagnostics
            .iter()
            .any(|d| *d.file == fifo2 && d.code == "not-a-file"),
        "{:#?}",
        report.diagnostics
    );
    assert!(report.rejected.contains(&"fifo2".to_owned()));
    assert_eq!(graphs.catalog().graphs.keys().collect::<Vec<_>>(), ["ok"]);
    // Nothing changed since: no reload.
    let g = std::sync::Arc::clone(&graphs);
    assert!(promptly("poll", move || g.reload_if_changed()).is_none());
}

#[test]
fn the_check_command_finishes_and_exits_1() {
    let dirs = Hostile::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stategraph"))
        .arg("check")
        .arg(&dirs.graphs)
        .arg("--prompts")
        .arg(&dirs.prompts)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("`stategraph check` still running after {HANG_GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut text).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    for (file, code, fragment) in dirs.expected() {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{file}:1:1: error[{code}]: "))
                    && l.contains(fragment)),
            "{file} [{code}] not printed:\n{text}"
        );
    }
    assert!(
        text.trim_end()
            .ends_with("checked 8 graph file(s): 1 valid, 7 error(s), 0 warning(s)"),
        "{text}"
    );
}
