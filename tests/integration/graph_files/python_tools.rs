//! examples/python_tools: two Python functions (an MCP server on the
//! official SDK, over stdio) as the tools of a graph. The committed lock
//! file is what `stategraph tools lock` writes from the live server, and a
//! run calls the real server. Needs the test venv (tests/run.sh;
//! `STATEGRAPH_TEST_PYTHON`), which has the `mcp` SDK.

use std::path::PathBuf;
use std::process::Command;

use crate::support::root;

fn python() -> PathBuf {
    let python = std::env::var_os("STATEGRAPH_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
                });
            cache.join("stategraph-tests/venv/bin/python")
        });
    assert!(
        python.exists(),
        "the MCP test venv is missing ({}): run `bash tests/run.sh` or set STATEGRAPH_TEST_PYTHON",
        python.display()
    );
    python
}

/// The example's configuration with the test venv's Python, its graphs
/// copied into `dir` (so the lock is written there) and its store there.
fn config(dir: &std::path::Path) -> PathBuf {
    let example = root().join("examples/python_tools");
    let graphs = dir.join("graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    std::fs::copy(
        example.join("graphs/orders.yaml"),
        graphs.join("orders.yaml"),
    )
    .unwrap();
    let toml = std::fs::read_to_string(example.join("stategraph.toml"))
        .unwrap()
        .replace(".venv/bin/python", &python().display().to_string())
        .replace(
            "examples/python_tools/graphs",
            &graphs.display().to_string(),
        )
        .replace(
            "target/python-tools-example",
            &dir.join("data").display().to_string(),
        );
    let path = dir.join("stategraph.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn stategraph(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stategraph"))
        .current_dir(root())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn python_functions_are_locked_checked_and_called_as_tools() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let (ok, out) = stategraph(&config, &["tools", "lock", "--timeout", "30s"]);
    assert!(ok, "{out}");
    assert!(out.contains("shop (shop): 2 tool(s)"), "{out}");
    // The committed lock is what the server lists today.
    let written = std::fs::read_to_string(dir.path().join("graphs/tools.lock.json")).unwrap();
    let committed =
        std::fs::read_to_string(root().join("examples/python_tools/graphs/tools.lock.json"))
            .unwrap();
    assert_eq!(
        written, committed,
        "run `stategraph tools lock` for the example and commit it"
    );

    // `check` needs no server: the lock tells it the tools.
    let (ok, out) = stategraph(&config, &["check"]);
    assert!(ok, "{out}");
    assert!(out.contains("1 valid, 0 error(s)"), "{out}");

    // A run calls the Python function over MCP.
    let script = root().join("examples/python_tools/model.yaml");
    let (ok, out) = stategraph(
        &config,
        &[
            "--model-script",
            &script.display().to_string(),
            "run",
            "orders",
            "How much to ship 1.5 kg to France?",
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains(r#"tool shipping_quote → {"country":"FR","price_eur":8.0,"weight_kg":1.5}"#),
        "{out}"
    );
}
