//! The MCP client against real servers: `@modelcontextprotocol/server-everything`
//! and `mcp-server-time` over stdio, and a Python streamable-HTTP server
//! (tests/mcp/http_server.py) on 127.0.0.1. tests/run.sh installs them
//! (npm ci in tests/mcp, a venv from tests/mcp/requirements.txt) and exports
//! their paths; without it the tests fail and say so.
//!
//! Each test starts its own servers (random ports, own child processes), so
//! they run in parallel with everything else, and each is bounded by a
//! time limit.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stategraph::internals::events::EventKind;
use stategraph::internals::graph::prompts::Prompts;
use stategraph::internals::llm::Models;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::nodes::Registries;
use stategraph::internals::runtime::{self, RunOptions, Services};
use stategraph::internals::tools::ToolRegistry;
use stategraph::internals::tools::mcp::{McpConfig, McpManager, ServerState, ServerStatus};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::support::root;

/// Every test's upper bound.
const TEST_LIMIT: Duration = Duration::from_secs(90);

/// How long a server may take to become ready (node/python startup on a
/// loaded machine).
const READY: Duration = Duration::from_secs(30);

/// Paths of the installed test servers.
struct Fixtures {
    /// server-everything's `dist/index.js`.
    everything: PathBuf,
    /// The venv's Python.
    python: PathBuf,
    /// The venv's `mcp-server-time`.
    time: PathBuf,
    /// tests/mcp/http_server.py.
    http_server: PathBuf,
}

fn fixtures() -> Fixtures {
    let everything = std::env::var_os("STATEGRAPH_TEST_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            root().join(
                "tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
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
    let time = python.with_file_name("mcp-server-time");
    let http_server = root().join("tests/mcp/http_server.py");
    for (what, path) in [
        ("server-everything", &everything),
        ("the test venv's python", &python),
        ("mcp-server-time", &time),
    ] {
        assert!(
            path.exists(),
            "MCP test fixture missing: {what} is not at {} — run `bash tests/run.sh` (it runs `npm ci` in tests/mcp and \
             creates the venv from tests/mcp/requirements.txt), or set STATEGRAPH_TEST_MCP_EVERYTHING / STATEGRAPH_TEST_PYTHON",
            path.display()
        );
    }
    Fixtures {
        everything,
        python,
        time,
        http_server,
    }
}

/// A TOML string literal.
fn lit(s: impl AsRef<std::ffi::OsStr>) -> String {
    serde_json::to_string(&s.as_ref().to_string_lossy()).unwrap()
}

fn everything(f: &Fixtures, name: &str, extra: &str) -> String {
    format!(
        "[servers.{name}]\ncommand = [\"node\", {}, \"stdio\"]\n{extra}\n",
        lit(&f.everything)
    )
}

fn time_server(f: &Fixtures, name: &str, extra: &str) -> String {
    format!(
        "[servers.{name}]\ncommand = [{}]\nenv = {{ TZ = \"UTC\" }}\n{extra}\n",
        lit(&f.time)
    )
}

fn http(name: &str, port: u16, extra: &str) -> String {
    format!("[servers.{name}]\nurl = \"http://127.0.0.1:{port}/mcp\"\n{extra}\n")
}

fn config(toml_text: &str) -> McpConfig {
    toml::from_str(toml_text).unwrap_or_else(|e| panic!("bad test config: {e}\n{toml_text}"))
}

/// Runs a test body with the time limit.
async fn within<F: std::future::Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("the test took longer than its time limit");
}

/// Waits until `server`'s status satisfies `pred`.
async fn wait_for(
    m: &McpManager,
    server: &str,
    what: &str,
    limit: Duration,
    pred: impl Fn(&ServerStatus) -> bool,
) -> ServerStatus {
    let start = Instant::now();
    loop {
        let s = m.server(server).expect("server configured");
        if pred(&s) {
            return s;
        }
        assert!(
            start.elapsed() < limit,
            "`{server}` not {what} after {limit:?}: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ready(m: &McpManager, server: &str) -> ServerStatus {
    wait_for(m, server, "ready", READY, |s| s.state == ServerState::Ready).await
}

/// Calls `tool` through the registry as a node allowed all of `partition`.
async fn call(
    reg: &ToolRegistry,
    partition: &str,
    tool: &str,
    args: Value,
) -> Result<Value, stategraph::internals::tools::ToolError> {
    let allowed = reg.expand(&[partition.to_owned()]);
    reg.call(tool, args, &allowed).await.map(|o| o.output)
}

/// tests/mcp/http_server.py, killed on drop.
struct HttpServer {
    child: tokio::process::Child,
    port: u16,
}

impl HttpServer {
    /// Starts it on `port` (0: a free one) and waits until it listens.
    async fn start(f: &Fixtures, port: u16) -> Self {
        let mut child = tokio::process::Command::new(&f.python)
            .arg(&f.http_server)
            .args(["--port", &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the Python MCP test server");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(READY, lines.next_line())
            .await
            .expect("the Python MCP server did not start in time")
            .expect("read its output")
            .expect("it printed its port");
        let port = line
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected output {line:?}"));
        Self { child, port }
    }

    async fn stop(mut self) {
        self.child.kill().await.expect("kill the Python MCP server");
    }
}

#[tokio::test]
async fn mcp_stdio_tools_are_discovered_with_schemas_and_called_through_the_registry() {
    within(async {
        let f = fixtures();
        let reg = Arc::new(ToolRegistry::with_builtins());
        let m = McpManager::start(
            &config(&everything(&f, "everything", "prefix = true\ntimeout = \"7s\"\n[servers.everything.tools.get-sum]\ncache_ttl = \"1m\"")),
            Arc::clone(&reg),
        );
        assert!(reg.knows("everything"), "the partition is declared before the server is up");
        let status = ready(&m, "everything").await;
        assert_eq!((status.transport, status.partition.as_str()), ("stdio", "everything"));
        assert!(status.pid.is_some() && status.last_refresh.is_some(), "{status:?}");
        assert!(status.server_info.as_deref().unwrap_or_default().contains("everything"), "{status:?}");

        let tools = reg.expand(&["everything".to_owned()]);
        assert_eq!(tools.len(), status.tools);
        for t in ["everything__echo", "everything__get-sum", "everything__get-structured-content"] {
            assert!(tools.iter().any(|n| n == t), "{t} missing from {tools:?}");
        }
        let echo = reg.spec("everything__echo").unwrap();
        assert_eq!(echo.partition, "everything");
        assert_eq!(echo.input_schema["properties"]["message"]["type"], "string", "the server's schema: {}", echo.input_schema);
        assert_eq!(echo.policy.timeout, Duration::from_secs(7));
        assert_eq!(reg.policy("everything__get-sum").cache_ttl, Some(Duration::from_secs(60)), "per-tool override");

        let out = call(&reg, "everything", "everything__echo", json!({"message": "hi from stategraph"})).await.unwrap();
        assert_eq!(out, json!("Echo: hi from stategraph"));
        let sum = call(&reg, "everything", "everything__get-sum", json!({"a": 2, "b": 40})).await.unwrap();
        assert!(sum.as_str().unwrap().contains("42"), "{sum}");
        let weather = call(&reg, "everything", "everything__get-structured-content", json!({"location": "Chicago"})).await.unwrap();
        assert!(weather.is_object(), "structuredContent is the output: {weather}");

        // The registry's schema check stops bad arguments before the server sees them.
        let err = call(&reg, "everything", "everything__get-sum", json!({"a": "two", "b": 3})).await.unwrap_err();
        let failure = err.to_failure();
        assert_eq!(failure.kind, "validation_error");
        assert!(failure.details["errors"].is_array() && failure.details.get("server").is_none(), "{failure:?}");

        // Past the registry, an unknown tool is the server's answer, mapped.
        let err = m.call_tool("everything", "no-such-tool", json!({})).await.unwrap_err();
        assert_eq!(err.kind(), "not_found", "{err}");
        assert!(err.to_string().contains("no-such-tool"), "the server's message: {err}");

        let pid = status.pid.unwrap();
        m.shutdown().await;
        assert_eq!(m.server("everything").unwrap().state, ServerState::Down);
        assert!(reg.expand(&["everything".to_owned()]).is_empty());
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "shutdown ends the child process");
    })
    .await;
}

#[tokio::test]
async fn mcp_json_rpc_errors_and_is_error_results_become_structured_errors() {
    within(async {
        let f = fixtures();
        let reg = Arc::new(ToolRegistry::new());
        let m = McpManager::start(&config(&time_server(&f, "time", "")), Arc::clone(&reg));
        ready(&m, "time").await;
        assert_eq!(
            reg.expand(&["time".to_owned()]),
            ["convert_time", "get_current_time"]
        );
        let now = call(
            &reg,
            "time",
            "get_current_time",
            json!({"timezone": "Etc/UTC"}),
        )
        .await
        .unwrap();
        assert!(now.to_string().contains("Etc/UTC"), "{now}");

        // mcp-server-time answers an unknown tool with JSON-RPC -32602.
        let err = m
            .call_tool("time", "no_such_tool", json!({}))
            .await
            .unwrap_err();
        let failure = err.to_failure();
        assert_eq!(failure.kind, "not_found", "{failure:?}");
        assert!(
            failure.message.contains("no_such_tool"),
            "the server's message: {failure:?}"
        );
        assert_eq!(
            (
                failure.details["server"].as_str(),
                failure.details["code"].as_i64()
            ),
            (Some("time"), Some(-32602))
        );

        // Arguments the schema allows but the server rejects.
        let err = call(
            &reg,
            "time",
            "get_current_time",
            json!({"timezone": "Mars/Olympus_Mons"}),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err.kind(), "validation_error" | "execution_error"),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("Mars/Olympus_Mons"),
            "the server's message: {err}"
        );
        m.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn mcp_http_server_results_errors_and_refreshed_tool_lists() {
    within(async {
        let f = fixtures();
        let server = HttpServer::start(&f, 0).await;
        let reg = Arc::new(ToolRegistry::new());
        let m = McpManager::start(
            &config(&http("py", server.port, "refresh = \"200ms\"")),
            Arc::clone(&reg),
        );
        let status = ready(&m, "py").await;
        assert_eq!(status.transport, "http");
        assert_eq!(
            reg.expand(&["py".to_owned()]),
            ["add", "fail", "shout", "toggle_extra"]
        );
        assert_eq!(
            reg.spec("add").unwrap().input_schema["required"],
            json!(["a", "b"])
        );

        assert_eq!(
            call(&reg, "py", "add", json!({"a": 2, "b": 3}))
                .await
                .unwrap(),
            json!({"result": 5})
        );
        assert_eq!(
            call(&reg, "py", "shout", json!({"text": "hi"}))
                .await
                .unwrap(),
            json!("HI")
        );
        let bad = call(&reg, "py", "add", json!({"a": "x", "b": 3}))
            .await
            .unwrap_err();
        assert_eq!(
            bad.kind(),
            "validation_error",
            "caught by the schema: {bad:?}"
        );

        // `isError: true` → a structured failure with the server's message.
        let err = call(&reg, "py", "fail", json!({"message": "disk full"}))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "execution_error", "{err:?}");
        assert!(err.to_string().contains("disk full"), "{err}");

        // The server's tool list changes; the refresh picks it up.
        assert_eq!(
            call(&reg, "py", "toggle_extra", json!({})).await.unwrap(),
            json!("added")
        );
        let start = Instant::now();
        while reg.spec("extra").is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the new tool was not picked up: {:?}",
                reg.names()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            call(&reg, "py", "extra", json!({})).await.unwrap(),
            json!("extra here")
        );
        assert_eq!(
            call(&reg, "py", "toggle_extra", json!({})).await.unwrap(),
            json!("removed")
        );
        let start = Instant::now();
        while reg.spec("extra").is_some() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the removed tool stayed: {:?}",
                reg.names()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(m.server("py").unwrap().tools, 4);
        m.shutdown().await;
        server.stop().await;
    })
    .await;
}

#[tokio::test]
async fn mcp_http_server_that_stops_is_marked_down_and_reconnected_when_back() {
    within(async {
        let f = fixtures();
        let server = HttpServer::start(&f, 0).await;
        let port = server.port;
        let reg = Arc::new(ToolRegistry::new());
        let extra = "refresh = \"1h\"\nhealth_check = \"200ms\"\ntimeout = \"5s\"\nbackoff = \"200ms\"\nmax_backoff = \"1s\"";
        let m = McpManager::start(&config(&http("py", port, extra)), Arc::clone(&reg));
        ready(&m, "py").await;
        assert_eq!(call(&reg, "py", "shout", json!({"text": "a"})).await.unwrap(), json!("A"));

        // Unused, the server's death is noticed by the health check.
        server.stop().await;
        let down = wait_for(&m, "py", "down", Duration::from_secs(10), |s| s.state == ServerState::Down).await;
        assert!(down.last_error.as_deref().unwrap_or_default().contains("ping failed"), "{down:?}");
        assert!(reg.expand(&["py".to_owned()]).is_empty(), "the partition is emptied");
        assert!(reg.knows("py"), "but still known to graph files");
        let started = Instant::now();
        let err = m.call_tool("py", "shout", json!({"text": "c"})).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(err.kind(), "execution_error");
        assert!(err.to_string().contains("MCP server `py` is down"), "{err}");

        let server = HttpServer::start(&f, port).await;
        let again = wait_for(&m, "py", "reconnected", READY, |s| s.state == ServerState::Ready && s.connects == 2).await;
        assert_eq!(again.tools, 4);
        assert_eq!(call(&reg, "py", "shout", json!({"text": "back"})).await.unwrap(), json!("BACK"));

        // A call right after the server stops fails fast with a structured
        // error (the connection is refused), and has the manager look now.
        server.stop().await;
        let started = Instant::now();
        let err = call(&reg, "py", "shout", json!({"text": "b"})).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
        assert!(matches!(err.kind(), "execution_error" | "not_found" | "not_allowed"), "{err:?}");
        wait_for(&m, "py", "down", Duration::from_secs(10), |s| s.state == ServerState::Down).await;

        let server = HttpServer::start(&f, port).await;
        wait_for(&m, "py", "reconnected", READY, |s| s.state == ServerState::Ready && s.connects == 3).await;
        assert_eq!(call(&reg, "py", "shout", json!({"text": "again"})).await.unwrap(), json!("AGAIN"));
        m.shutdown().await;
        server.stop().await;
    })
    .await;
}

#[tokio::test]
async fn mcp_stdio_server_that_dies_is_marked_down_and_restarted() {
    within(async {
        let f = fixtures();
        let reg = Arc::new(ToolRegistry::new());
        let m = McpManager::start(
            &config(&everything(&f, "ev", "backoff = \"1s\"")),
            Arc::clone(&reg),
        );
        let first = ready(&m, "ev").await;
        let pid = first.pid.expect("a child process");
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(killed.success());

        let down = wait_for(&m, "ev", "down", Duration::from_secs(10), |s| {
            s.state != ServerState::Ready
        })
        .await;
        assert_eq!(down.state, ServerState::Down, "{down:?}");
        assert!(
            down.last_error
                .as_deref()
                .unwrap_or_default()
                .contains("exited"),
            "{down:?}"
        );
        assert!(reg.expand(&["ev".to_owned()]).is_empty());
        let started = Instant::now();
        let err = m
            .call_tool("ev", "echo", json!({"message": "x"}))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(err.kind(), "execution_error", "{err}");

        let again = wait_for(&m, "ev", "restarted", READY, |s| {
            s.state == ServerState::Ready && s.connects == 2
        })
        .await;
        assert_ne!(again.pid, Some(pid), "a new process");
        assert_eq!(
            call(&reg, "ev", "echo", json!({"message": "again"}))
                .await
                .unwrap(),
            json!("Echo: again")
        );
        m.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn mcp_server_that_cannot_start_is_reported_and_the_others_still_work() {
    within(async {
        let f = fixtures();
        let reg = Arc::new(ToolRegistry::with_builtins());
        let ghost = "[servers.ghost]\ncommand = [\"/nonexistent/stategraph-no-such-mcp-server\"]\nbackoff = \"100ms\"\n";
        let m = McpManager::start(&config(&format!("{ghost}{}", time_server(&f, "time", ""))), Arc::clone(&reg));

        // Graph files naming the partition validate while its server is down.
        let registries = Registries { tools: Arc::clone(&reg), ..crate::support::registries() };
        let graph = "state: chat\nentry: helper\nnodes:\n  - id: helper\n    kind: agent\n    prompt: chat/direct.md\n    tools: [ghost, time]\n    input: query\n    output: answer\nedges: [helper -> END]\n";
        let cat = registries.from_sources(&[("uses_mcp", graph)], Prompts::load(&root().join("prompts")));
        assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);

        let down = wait_for(&m, "ghost", "down", Duration::from_secs(10), |s| s.state == ServerState::Down).await;
        assert!(down.last_error.as_deref().unwrap_or_default().contains("cannot start"), "{down:?}");
        ready(&m, "time").await;
        call(&reg, "time", "get_current_time", json!({"timezone": "Europe/Berlin"})).await.unwrap();
        let err = m.call_tool("ghost", "anything", json!({})).await.unwrap_err();
        assert_eq!(err.kind(), "execution_error");
        assert!(err.to_string().contains("cannot start"), "{err}");

        let referenced: Vec<String> =
            ["ghost", "time", "get_current_time", "calculator", "no_such_tool"].iter().map(|s| s.to_string()).collect();
        let health = m.health(&referenced);
        assert!(!health.ok);
        assert_eq!(health.servers_down, ["ghost"]);
        let missing: Vec<(&str, &str, Option<&str>)> =
            health.missing.iter().map(|x| (x.name.as_str(), x.kind, x.server.as_deref())).collect();
        assert_eq!(missing, [("ghost", "partition", Some("ghost")), ("no_such_tool", "tool", None)]);
        assert!(health.missing[0].reason.contains("down"), "{:?}", health.missing[0]);
        assert_eq!(health.servers.len(), 2);
        assert!(m.health(&["time".to_owned(), "calculator".to_owned()]).ok);
        m.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn mcp_agent_run_calls_an_mcp_tool_end_to_end() {
    within(async {
        let f = fixtures();
        let registries = crate::support::registries();
        let m = McpManager::start(&config(&everything(&f, "everything", "prefix = true")), Arc::clone(&registries.tools));
        let graph = "state: chat\nentry: helper\nnodes:\n  - id: helper\n    kind: agent\n    prompt: chat/direct.md\n    tools: [everything]\n    input: query\n    max_iterations: 3\n    output: answer\nedges: [helper -> END]\n";
        let cat = registries.from_sources(&[("mcp_agent", graph)], Prompts::load(&root().join("prompts")));
        assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
        ready(&m, "everything").await;

        let model = Arc::new(ScriptedModel::new([Turn::tool("everything__echo", json!({"message": "hello mcp"})), Turn::text("done")]));
        let services = Arc::new(Services::new(Models::single(model.clone()), Arc::clone(&registries.tools)));
        let (tx, mut rx) = mpsc::channel(256);
        let collector = tokio::spawn(async move {
            let mut all = Vec::new();
            while let Some(e) = rx.recv().await {
                all.push(e);
            }
            all
        });
        let input = json!({"messages": [{"id": "u1", "role": "user", "content": "say hello"}], "query": "say hello"});
        let graph = Arc::clone(cat.graphs.get("mcp_agent").unwrap());
        let out = runtime::run(graph, services, input, RunOptions { events: Some(tx), ..Default::default() }).await.unwrap();
        let events = collector.await.unwrap();
        assert_eq!(out.state.to_json()["answer"], "done");
        let result = events.iter().find_map(|e| match &e.event {
            EventKind::ToolResult(r) if r.tool == "everything__echo" => Some(r.output.clone()),
            _ => None,
        });
        assert_eq!(result, Some(json!("Echo: hello mcp")), "events: {events:#?}");
        let offered = &model.requests()[0].tools;
        assert!(offered.iter().any(|t| t.name == "everything__echo"), "the MCP tools are offered to the model");
        m.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn mcp_tools_are_listed_by_partition_and_health_compares_them_with_the_graphs() {
    within(async {
        let f = fixtures();
        let dir = tempfile::tempdir().unwrap();
        let graphs = dir.path().join("graphs");
        std::fs::create_dir(&graphs).unwrap();
        std::fs::write(
            graphs.join("clock.yaml"),
            "state: chat\nentry: ask\nnodes:\n  - id: ask\n    kind: agent\n    prompt: chat/direct.md\n    tools: [clock, calculator]\n    input: query\n    output: answer\n  - id: draw\n    kind: agent\n    prompt: chat/direct.md\n    tools: [charts]\n    input: query\n    output: answer\nedges: [ask -> draw, draw -> END]\n",
        )
        .unwrap();
        let mut config = stategraph::internals::config::Config::default();
        config.paths.graphs = graphs;
        config.paths.prompts = root().join("prompts");
        config.store.backend = Some(stategraph::internals::store::config::Backend::Memory);
        config.tools.mcp = self::config(&format!(
            "startup_wait = \"60s\"\n{}{}",
            time_server(&f, "time", "partition = \"clock\"\n[servers.time.tools.get_current_time]\ncache_ttl = \"0s\"\ntimeout = \"3s\""),
            "[servers.plots]\ncommand = [\"/nonexistent/mcp-plots\"]\npartition = \"charts\"\n"
        ));
        config.tools.policy.insert(
            "convert_time".into(),
            toml::from_str("cache_ttl = \"1h\"").unwrap(),
        );
        let state = stategraph::internals::server::build_state(config, crate::support::registries()).await.unwrap();
        assert!(state.graphs.get("clock").is_some(), "a graph naming MCP partitions compiles while servers start");
        let server = crate::support::server::TestServer::serve(state).await;
        let http = reqwest::Client::new();

        let tools: Value = http.get(server.url("/api/tools")).send().await.unwrap().json().await.unwrap();
        let clock = tools["partitions"]["clock"].as_array().expect("the clock partition");
        let names: Vec<&str> = clock.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"get_current_time") && names.contains(&"convert_time"), "{names:?}");
        let now = clock.iter().find(|t| t["name"] == "get_current_time").unwrap();
        assert_eq!(now["inputSchema"]["type"], "object", "{now}");
        assert_eq!(now["policy"]["timeoutMs"], 3000, "server tool override: {now}");
        assert_eq!(now["policy"]["cacheTtlMs"], Value::Null);
        let convert = clock.iter().find(|t| t["name"] == "convert_time").unwrap();
        assert_eq!(convert["policy"]["cacheTtlMs"], 3_600_000, "[tools.policy] applies to a tool that registered later: {convert}");
        assert_eq!(tools["partitions"]["charts"], json!([]), "a server that is down leaves its partition empty");
        assert!(tools["partitions"]["basic"].as_array().unwrap().iter().any(|t| t["name"] == "calculator"));
        let servers = tools["servers"].as_array().unwrap();
        assert_eq!(servers.len(), 2);

        let resp = http.get(server.url("/api/tools/health")).send().await.unwrap();
        assert_eq!(resp.status(), 503, "a required partition's configured server is down");
        let health: Value = resp.json().await.unwrap();
        assert_eq!(health["ok"], false);
        assert_eq!(health["status"], "down");
        let missing = health["missing"].as_array().unwrap();
        assert_eq!(missing.len(), 1, "{health}");
        assert_eq!(missing[0]["name"], "charts");
        assert_eq!(missing[0]["kind"], "partition");
        assert_eq!(missing[0]["server"], "plots");
        assert_eq!(missing[0]["usedBy"], json!(["clock.draw"]));
        assert!(missing[0]["reason"].as_str().unwrap().contains("plots"), "{health}");
        assert_eq!(health["serversDown"], json!(["plots"]));
        let clock_ref = health["referenced"].as_array().unwrap().iter().find(|r| r["name"] == "clock").unwrap();
        assert_eq!(clock_ref["usedBy"], json!(["clock.ask"]));
        assert!(clock_ref["provides"].as_array().unwrap().len() >= 2, "{clock_ref}");

        let mcp = server.state.mcp.clone().unwrap();
        server.shutdown().await;
        assert_eq!(mcp.server("time").unwrap().state, ServerState::Down, "stopping the server closes MCP servers");
    })
    .await;
}

/// Health through the real HTTP server: a down server whose partition a
/// graph lists in `optional_tools`, and a required name nothing configured
/// provides, leave it `degraded` with 200; tools' schemas are compared with
/// what dispatch accepts (a policy naming no tool is reported).
#[tokio::test]
async fn tools_health_is_degraded_not_down_when_only_optional_or_unconfigured_tools_are_missing() {
    within(async {
        let f = fixtures();
        let dir = tempfile::tempdir().unwrap();
        let graphs = dir.path().join("graphs");
        std::fs::create_dir(&graphs).unwrap();
        std::fs::write(
            graphs.join("clock.yaml"),
            "state: chat\nentry: ask\noptional_tools: [charts]\nnodes:\n  - id: ask\n    kind: agent\n    prompt: chat/direct.md\n    tools: [clock, calculator]\n    input: query\n    output: answer\n  - id: draw\n    kind: agent\n    prompt: chat/direct.md\n    tools: [charts]\n    input: query\n    output: answer\nedges: [ask -> draw, draw -> END]\n",
        )
        .unwrap();
        std::fs::write(
            graphs.join("books.yaml"),
            "state: chat\nentry: ask\nexternal_tools: [ledger]\nnodes:\n  - id: ask\n    kind: agent\n    prompt: chat/direct.md\n    tools: [ledger]\n    input: query\n    output: answer\nedges: [ask -> END]\n",
        )
        .unwrap();
        let mut config = stategraph::internals::config::Config::default();
        config.paths.graphs = graphs;
        config.paths.prompts = root().join("prompts");
        config.store.backend = Some(stategraph::internals::store::config::Backend::Memory);
        config.tools.mcp = self::config(&format!(
            "{}{}",
            time_server(&f, "time", "partition = \"clock\""),
            "[servers.plots]\ncommand = [\"/nonexistent/mcp-plots\"]\npartition = \"charts\"\n"
        ));
        config.tools.policy.insert(
            "no_such_tool".into(),
            toml::from_str("cache_ttl = \"1h\"").unwrap(),
        );
        let state = stategraph::internals::server::build_state(config, crate::support::registries()).await.unwrap();
        let server = crate::support::server::TestServer::serve(state).await;
        let http = reqwest::Client::new();
        // The time server comes up; the plots server never does.
        let mut health = Value::Null;
        for _ in 0..300 {
            let resp = http.get(server.url("/api/tools/health")).send().await.unwrap();
            let status = resp.status();
            health = resp.json().await.unwrap();
            if health["missing"].as_array().is_some_and(|m| m.iter().all(|x| x["name"] != "clock")) {
                assert_eq!(status, 200, "{health}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(health["status"], "degraded", "{health}");
        assert_eq!(health["ok"], false);
        let missing = health["missing"].as_array().unwrap();
        let charts = missing.iter().find(|m| m["name"] == "charts").expect("charts missing");
        assert_eq!((charts["optional"].as_bool(), charts["configured"].as_bool()), (Some(true), Some(true)), "{health}");
        let ledger = missing.iter().find(|m| m["name"] == "ledger").expect("ledger missing");
        assert_eq!((ledger["optional"].as_bool(), ledger["configured"].as_bool()), (Some(false), Some(false)), "{health}");
        assert_eq!(ledger["requiredBy"], json!(["books"]));
        assert_eq!(health["serversDown"], json!(["plots"]));
        let dispatch = health["dispatch"].as_array().unwrap();
        assert!(
            dispatch.iter().any(|d| d["tool"] == "no_such_tool" && d["problem"].as_str().unwrap().contains("no source provides")),
            "{health}"
        );
        assert!(!dispatch.iter().any(|d| d["tool"] == "get_current_time"), "the time server's schemas are object schemas: {health}");
        server.shutdown().await;
    })
    .await;
}

/// The shipped chat graph with MCP servers in config: the thinking nodes
/// get the `data` partition, the narrator only `viz`; a `viz` result marked
/// pass-through reaches the answer verbatim; the narrator asking for a
/// `data` tool gets a structured `not_allowed` error and nothing runs.
#[tokio::test]
async fn mcp_chat_graph_research_uses_data_and_the_narrator_viz() {
    within(async {
        let f = fixtures();
        let mcp_config = self::config(&format!(
            "{}{}",
            everything(&f, "everything", "prefix = true\npartition = \"data\""),
            time_server(&f, "time", "partition = \"viz\"\n[servers.time.tools.get_current_time]\npass_through = true")
        ));
        let registries = crate::support::registries();
        let mcp = McpManager::start(&mcp_config, Arc::clone(&registries.tools));
        let prompts = Prompts::load(&root().join("prompts"));
        let chat = std::fs::read_to_string(root().join("graphs/chat.yaml")).unwrap();
        let cat = registries.from_sources(&[("chat", &chat)], prompts);
        assert!(!cat.has_errors(), "{:#?}", cat.diagnostics);
        assert!(mcp.wait_ready(READY).await, "{:?}", mcp.status());

        let narrator_calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&narrator_calls);
        let log = Arc::new(std::sync::Mutex::new(Vec::<stategraph::internals::llm::ChatRequest>::new()));
        let logged = Arc::clone(&log);
        let model = Arc::new(ScriptedModel::from_fn(move |req| {
            logged.lock().unwrap().push(req.clone());
            let system = match req.messages.first() {
                Some(stategraph::internals::llm::ChatMessage::System { content }) => content.clone(),
                _ => String::new(),
            };
            let tool_rounds = req.messages.iter().filter(|m| matches!(m, stategraph::internals::llm::ChatMessage::Tool { .. })).count();
            if system.contains("You classify the user's latest message") {
                Turn::json(json!({"intent": "RESEARCH", "reasoning": "data", "missing_slots": [], "detected_language": "en"}))
            } else if system.contains("research the user's question") {
                if tool_rounds == 0 {
                    Turn::tool("everything__get-sum", json!({"a": 2, "b": 40}))
                } else {
                    Turn::text("the sum is 42")
                }
            } else if system.contains("You write the answer the user will read") {
                match seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                    0 => Turn::tool("everything__echo", json!({"message": "not mine"})),
                    1 => Turn::tool("get_current_time", json!({"timezone": "UTC"})),
                    _ => Turn::text("Here is the time."),
                }
            } else if system.contains("You suggest follow-up questions") {
                Turn::json(json!({"questions": ["a?", "b?"]}))
            } else {
                Turn::text("ok")
            }
        }));
        let services = Services::new(Models::single(model), Arc::clone(&registries.tools));
        let mut config = stategraph::internals::config::Config::default();
        config.server.keep_alive.0 = Duration::from_secs(5);
        let state = stategraph::internals::server::AppState::with_mcp(
            config,
            Arc::new(stategraph::internals::store::memory::MemoryStore::new()),
            &stategraph::internals::engine::Engine::from_parts(
                registries.clone(),
                stategraph::internals::engine::Graphs::from_catalog(cat, registries.clone()),
                services,
            ),
            Some(mcp),
        );
        let server = crate::support::server::TestServer::serve(state).await;
        let http = reqwest::Client::new();
        let resp = crate::support::post_json(&http, &server.url("/api/chat"), &crate::support::chat_body("mcp-chat", "what is 2 + 40, and the time?")).await;
        assert_eq!(resp.status(), 200);
        let sse = resp.text().await.unwrap();
        let (ok, report) = crate::support::aisdk_validate(&sse);
        assert!(ok, "{report}\n{sse}");

        let requests = log.lock().unwrap().clone();
        let offered = |marker: &str| -> Vec<String> {
            let req = requests
                .iter()
                .find(|r| matches!(r.messages.first(), Some(stategraph::internals::llm::ChatMessage::System { content }) if content.contains(marker)))
                .unwrap_or_else(|| panic!("no request with {marker}"));
            req.tools.iter().map(|t| t.name.clone()).collect()
        };
        let research = offered("research the user's question");
        assert!(research.contains(&"everything__get-sum".to_owned()) && research.contains(&"calculator".to_owned()), "{research:?}");
        assert!(!research.iter().any(|t| t == "get_current_time"), "viz is not research's: {research:?}");
        let narrator = offered("You write the answer the user will read");
        assert!(narrator.contains(&"get_current_time".to_owned()), "{narrator:?}");
        assert!(narrator.iter().all(|t| !t.starts_with("everything__") && t != "calculator"), "only viz: {narrator:?}");

        // The forbidden call came back to the model as structured data.
        let narrator_second = requests
            .iter()
            .filter(|r| matches!(r.messages.first(), Some(stategraph::internals::llm::ChatMessage::System { content }) if content.contains("You write the answer the user will read")))
            .nth(1)
            .expect("the narrator was asked again after the refused call");
        let refusal = narrator_second
            .messages
            .iter()
            .find_map(|m| match m {
                stategraph::internals::llm::ChatMessage::Tool { content, .. } => serde_json::from_str::<Value>(content).ok(),
                _ => None,
            })
            .expect("a tool message");
        assert_eq!(refusal["error"], true, "{refusal}");
        assert_eq!(refusal["type"], "not_allowed", "{refusal}");
        assert!(!sse.contains("Echo: not mine"), "the refused tool did not run");

        // The pass-through result is in the answer text verbatim.
        let chunks: Vec<Value> = sse
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        assert!(
            chunks.iter().any(|c| c["type"] == "text-delta" && c["delta"].as_str().is_some_and(|d| d.contains("\"datetime\""))),
            "the time result is answer text, verbatim: {sse}"
        );
        assert!(sse.contains("42"), "{sse}");
        let mcp = server.state.mcp.clone().unwrap();
        server.shutdown().await;
        assert_eq!(mcp.server("everything").unwrap().state, ServerState::Down);
    })
    .await;
}
