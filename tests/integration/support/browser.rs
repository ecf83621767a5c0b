//! Browser tests: Node, Chromium and the packages a test script needs, and
//! where screenshots go.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use super::root;

/// What the browser test needs and where it lives.
pub struct Browser {
    pub node: PathBuf,
    pub chromium: PathBuf,
    pub test_dir: PathBuf,
}

/// The browser, Node and the test's packages, or a failure that says how to
/// get them (tests/run.sh installs all three): a missing browser is a
/// failed test, not a skipped one.
pub fn browser() -> Browser {
    let test_dir = root().join("tests/studio");
    assert!(
        test_dir.join("node_modules/playwright-core").is_dir()
            && test_dir.join("node_modules/axe-core").is_dir(),
        "the studio test's packages are not installed: run `npm ci` in {} (tests/run.sh does)",
        test_dir.display()
    );
    browser_in(test_dir)
}

/// Node and Chromium for a browser test whose script and packages are in
/// `test_dir` (the caller checks its packages).
pub fn browser_in(test_dir: PathBuf) -> Browser {
    let node = std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("node"))
                .find(|p| p.is_file())
        })
        .expect("a browser test needs Node.js (`node` on PATH)");
    Browser {
        node,
        chromium: chromium(),
        test_dir,
    }
}

/// `CHROMIUM_PATH`, or Debian's Chromium.
pub fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM_PATH")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/usr/bin/chromium")).filter(|p| p.is_file()))
        .expect(
            "a browser test needs Chromium: `apt-get install -y chromium` (tests/run.sh does), \
             or set CHROMIUM_PATH",
        )
}

impl Browser {
    /// Runs `node SCRIPT` in the test's directory with `env` (and
    /// `CHROMIUM_PATH`), for at most `limit`: whether it succeeded, and its
    /// stdout and stderr (printed too).
    pub async fn run(
        &self,
        script: &str,
        env: &[(&str, &std::ffi::OsStr)],
        limit: Duration,
    ) -> (bool, String) {
        let out = tokio::process::Command::new(&self.node)
            .arg(script)
            .current_dir(&self.test_dir)
            .envs(env.iter().copied())
            .env("CHROMIUM_PATH", &self.chromium)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(limit, out)
            .await
            .unwrap_or_else(|_| panic!("{script} finished within {limit:?}"))
            .unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("{report}");
        (out.status.success(), report)
    }
}

/// Where the browser test's screenshots go: `$CARGO_TARGET_DIR/studio-artifacts`
/// (`target/studio-artifacts` without it).
pub fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    target.join("studio-artifacts")
}
