//! Every shipped graph and every example, run by the real binary (`run
//! GRAPH MESSAGE --json --no-store`) against every provider profile's
//! emulator: OpenAI classic (gpt-4o-mini), OpenAI reasoning (gpt-5.1),
//! Azure (a deployment whose name hides its reasoning family, so the
//! config names it) and Anthropic (with extended thinking on). Each run
//! must finish with zero rejected requests, no failed model call and no
//! structured node taking its fallback.
//!
//! The graphs run with tools to call: the Data360 MCP fixture
//! (`tests/fixtures/data360`, partition `data`) for the chat graph's data
//! agents, and the emulator's own small web (a SearXNG-style `/search` and
//! pages to fetch) for the research graph's `web_search` and `http_fetch`.
//! The emulated model calls the data tools whenever they are offered (two
//! in parallel, with real arguments over the minimal instance of their
//! strict or declared parameters), so the tool loop's requests — tool
//! calls, tool results, strict tool schemas — are checked too, and the
//! research graph reads the pages it finds. No SQL source or business MCP
//! server is configured: the analyst and the assistant answer without
//! tools. What is checked is every model request the graphs make, a
//! structured answer each node accepts, and that the tools really ran.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use serde_json::json;

use super::emulator::Emulator;
use crate::support::root;

/// The test venv's Python, with the MCP SDK (tests/run.sh makes it).
fn python() -> PathBuf {
    std::env::var_os("STATEGRAPH_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/stategraph-tests/venv/bin/python")
        })
}

/// The tools every profile's runs get: the Data360 fixture's data tools,
/// and web search and fetch on the emulator's web.
fn tools(emu: &Emulator) -> String {
    let quoted = |p: &Path| serde_json::to_string(&p.to_string_lossy()).unwrap();
    let python = python();
    assert!(
        python.exists(),
        "the test venv's Python is missing ({}): run tests/run.sh once",
        python.display()
    );
    let server = root().join("tests/fixtures/data360/server.py");
    format!(
        "[tools.search]\nurl = \"{}\"\n[tools.http]\nallow = [\"127.0.0.1\"]\n\
         [tools.mcp]\nstartup_wait = \"120s\"\n[tools.mcp.servers.data360]\ncommand = [{}, {}, \"--tools\", \"data\"]\npartition = \"data\"\n",
        emu.url("web"),
        quoted(&python),
        quoted(&server)
    )
}

/// What the emulated model calls whenever a request offers it: a search
/// and a data fetch (Kenya's GDP growth in 2022), in parallel.
fn data_calls() -> Vec<(String, Value)> {
    vec![
        (
            "data360_search_indicators".into(),
            json!({"query": "GDP growth", "limit": 5, "offset": 0}),
        ),
        (
            "data360_get_data".into(),
            json!({"database_id": "WB_WDI", "indicator_id": "WB_WDI_NY_GDP_MKTP_KD_ZG",
                "country_code": "KEN", "start_year": 2022, "end_year": 2022, "limit": 50, "offset": 0}),
        ),
    ]
}

/// The `[llm]` table of a profile.
fn profile(emu: &Emulator, name: &str) -> String {
    let endpoint = match name {
        "openai-classic" => format!(
            "base_url = \"{}\"\napi_key = \"sk-test\"",
            emu.url("openai")
        ),
        "openai-reasoning" => format!(
            "base_url = \"{}\"\napi_key = \"sk-test\"",
            emu.url("openai")
        ),
        "azure" => format!(
            "api = \"azure\"\nbase_url = \"{}\"\napi_key = \"az\"\napi_version = \"2025-04-01-preview\"",
            emu.url("azure")
        ),
        _ => format!(
            "api = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"sk-ant\"",
            emu.url("anthropic")
        ),
    };
    let role = match name {
        "openai-classic" => "model = \"gpt-4o-mini\"",
        "openai-reasoning" => "model = \"gpt-5.1\"",
        "azure" => "model = \"reasoning-prod\"\nfamily = \"reasoning\"",
        _ => "model = \"claude-sonnet-4-5\"\nthinking_budget = 1024",
    };
    format!(
        "[llm.endpoints.default]\n{endpoint}\n[llm.retry]\nattempts = 1\n[llm.roles.default]\n{role}\n{}",
        tools(emu)
    )
}

const PROFILES: [&str; 4] = ["openai-classic", "openai-reasoning", "azure", "anthropic"];

/// What runs: (binary, its graph and prompt directories, graph, message).
fn targets() -> Vec<(PathBuf, Option<PathBuf>, &'static str, &'static str)> {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_stategraph"));
    let mut out = vec![
        (
            bin.clone(),
            None,
            "chat",
            "What was the GDP growth of Kenya in 2022?",
        ),
        (
            bin.clone(),
            None,
            "research",
            "How efficient are heat pumps?",
        ),
        (bin.clone(), None, "analyst", "Which region sold the most?"),
        (
            bin.clone(),
            None,
            "assistant",
            "Show me the open invoices of ACME",
        ),
    ];
    for (example, graph, message) in [
        (
            "custom_kind",
            "feedback",
            "The upload is broken and support was slow",
        ),
        ("approval", "approval", "delete record 42"),
    ] {
        out.push((
            crate::support::process::example(example),
            Some(root().join("examples").join(example)),
            graph,
            message,
        ));
    }
    out
}

fn run(
    bin: &Path,
    dirs: Option<&Path>,
    config: &Path,
    graph: &str,
    message: &str,
) -> (bool, Vec<Value>, String) {
    let mut cmd = Command::new(bin);
    cmd.arg("--config").arg(config);
    if let Some(d) = dirs {
        cmd.arg("--graphs")
            .arg(d.join("graphs"))
            .arg("--prompts")
            .arg(d.join("prompts"));
    } else {
        cmd.arg("--graphs")
            .arg(root().join("graphs"))
            .arg("--prompts")
            .arg(root().join("prompts"));
    }
    let out = cmd
        .args(["run", graph, message, "--json", "--no-store"])
        .current_dir(config.parent().unwrap())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("STATEGRAPH_MODEL")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (
        out.status.success(),
        events,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn every_shipped_graph_and_example_runs_against_every_profile() {
    let dir = tempfile::tempdir().unwrap();
    let targets = tokio::task::spawn_blocking(targets).await.unwrap();
    let mut report = Vec::new();
    for name in PROFILES {
        let emu = Emulator::start().await;
        emu.prefer_tools(data_calls());
        let config = dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, profile(&emu, name)).unwrap();
        for (bin, dirs, graph, message) in &targets {
            let before = emu.received().len();
            let (bin, dirs, config2, graph2, message2) =
                (bin.clone(), dirs.clone(), config.clone(), *graph, *message);
            let (ok, events, stderr) = tokio::task::spawn_blocking(move || {
                run(&bin, dirs.as_deref(), &config2, graph2, message2)
            })
            .await
            .unwrap();
            let calls = emu.received().len() - before;
            let kind = |e: &Value| e["event"]["type"].as_str().unwrap_or_default().to_owned();
            let failed: Vec<&Value> = events.iter().filter(|e| kind(e) == "llm_failed").collect();
            let fallbacks: Vec<&Value> = events
                .iter()
                .filter(|e| kind(e) == "thinking")
                .filter(|e| e.to_string().contains("stayed invalid"))
                .collect();
            let finished = events.iter().filter(|e| kind(e) == "llm_finished").count();
            assert!(ok, "{name}/{graph}: the run did not finish\n{stderr}");
            assert!(
                failed.is_empty(),
                "{name}/{graph}: failed model calls {failed:?}\n{stderr}"
            );
            assert!(
                fallbacks.is_empty(),
                "{name}/{graph}: structured fallbacks {fallbacks:?}"
            );
            assert!(
                calls > 0,
                "{name}/{graph}: no model call reached the emulator\n{stderr}"
            );
            assert_eq!(
                finished, calls,
                "{name}/{graph}: every request answered\n{stderr}"
            );
            let tools = tools_ran(&events);
            check_tools(name, graph, &events, &tools);
            report.push(format!(
                "{name}/{graph}: {calls} model calls, tools ran: {}",
                tools.join(", ")
            ));
        }
        if name != "anthropic" {
            // The fixture's pydantic-made schemas: the search's has a strict
            // form and goes in strict mode (and was accepted above); the data
            // fetch takes a map (`disaggregation_filters`), which strict mode
            // cannot express, so it goes as declared.
            let offered = |tool: &str| -> Vec<Value> {
                emu.received()
                    .iter()
                    .flat_map(|r| r.body["tools"].as_array().cloned().unwrap_or_default())
                    .filter(|t| t["function"]["name"] == tool)
                    .map(|t| t["function"]["strict"].clone())
                    .collect()
            };
            let search = offered("data360_search_indicators");
            assert!(
                !search.is_empty(),
                "{name}: the data tools were never offered"
            );
            assert!(search.iter().all(|s| *s == true), "{name}: {search:?}");
            assert!(offered("data360_get_data").iter().all(Value::is_null));
        }
        let rejected = emu.rejected();
        assert!(
            rejected.is_empty(),
            "{name}: rejected requests {rejected:#?}"
        );
    }
    eprintln!("{}", report.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_reports_every_capability_for_every_profile() {
    let dir = tempfile::tempdir().unwrap();
    for name in PROFILES {
        let emu = Emulator::start().await;
        let config = dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, profile(&emu, name)).unwrap();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_stategraph"))
                .arg("--config")
                .arg(&config)
                .arg("doctor")
                .env_remove("OPENAI_API_KEY")
                .env_remove("OPENAI_BASE_URL")
                .env_remove("STATEGRAPH_MODEL")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for probe in ["answers and streams", "calls tools", "structured output"] {
            assert!(
                text.lines()
                    .any(|l| l.trim_start().starts_with("ok") && l.contains(probe)),
                "{name}: {probe}\n{text}"
            );
        }
        if name == "openai-reasoning" {
            assert!(
                text.contains("`max_tokens` sent as `max_completion_tokens`"),
                "{text}"
            );
            assert!(
                text.contains("left out what a reasoning model refuses: temperature"),
                "{text}"
            );
        }
        assert!(emu.rejected().is_empty(), "{name}: {:?}", emu.rejected());
    }
    // A broken endpoint is reported, with a failing exit code.
    let config = dir.path().join("down.toml");
    std::fs::write(
        &config,
        "[llm.endpoints.default]\nbase_url = \"http://127.0.0.1:9/v1\"\n[llm.retry]\nattempts = 1\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stategraph"))
        .arg("--config")
        .arg(&config)
        .arg("doctor")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("FAIL answers and streams") && text.contains("unreachable"),
        "{text}"
    );
}

/// The tools that ran (a result), in order, once each.
fn tools_ran(events: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events
        .iter()
        .filter(|e| e["event"]["type"] == "tool_result")
    {
        let tool = e["event"]["tool"].as_str().unwrap_or_default().to_owned();
        if !out.contains(&tool) {
            out.push(tool);
        }
    }
    out
}

/// The chat graph's data agent called both data tools and they answered;
/// the research graph searched, fetched the pages it found and read them.
fn check_tools(profile: &str, graph: &str, events: &[Value], ran: &[String]) {
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"]["type"] == "tool_error")
        .collect();
    let node_calls = |node: &str| {
        events
            .iter()
            .filter(|e| e["event"]["type"] == "llm_finished" && e["node"] == node)
            .count()
    };
    match graph {
        "chat" => {
            for tool in ["data360_search_indicators", "data360_get_data"] {
                assert!(
                    ran.iter().any(|t| t == tool),
                    "{profile}/chat: {tool} did not run (ran: {ran:?}; failed: {failed:#?})"
                );
            }
            let data = events
                .iter()
                .find(|e| {
                    e["event"]["type"] == "tool_result" && e["event"]["tool"] == "data360_get_data"
                })
                .map(|e| e["event"]["output"].to_string())
                .unwrap_or_default();
            assert!(
                data.contains("KEN") && data.contains("2022"),
                "{profile}/chat: the data call's arguments reached the tool: {data}"
            );
        }
        "research" => {
            for tool in ["web_search", "http_fetch"] {
                assert!(
                    ran.iter().any(|t| t == tool),
                    "{profile}/research: {tool} did not run (ran: {ran:?}; failed: {failed:#?})"
                );
            }
            assert!(
                node_calls("read") > 0,
                "{profile}/research: no page was read by the model"
            );
        }
        _ => {}
    }
    let data_failures: Vec<&&Value> = failed
        .iter()
        .filter(|e| {
            let tool = e["event"]["tool"].as_str().unwrap_or_default();
            tool.starts_with("data360_") || tool == "web_search" || tool == "http_fetch"
        })
        .collect();
    assert!(
        data_failures.is_empty(),
        "{profile}/{graph}: tools failed {data_failures:#?}"
    );
}
