//! Every environment variable docs/configuration.md documents overrides its key in
//! the config file (issue 31): one row per variable, the file setting one
//! value and the environment another. The list is read from that page, so
//! a variable documented without a row here fails the test.

use super::*;

/// A documented variable: a file that sets its key, the variable's value,
/// and whether the resulting configuration holds that value.
struct Row {
    var: &'static str,
    file: &'static str,
    value: &'static str,
    applied: fn(&Config) -> bool,
}

fn endpoint(c: &Config, name: &str) -> crate::llm::EndpointSettings {
    let settings = c
        .llm
        .endpoint_settings(|_| None)
        .expect("endpoint settings");
    settings[name].clone()
}

const ROWS: &[Row] = &[
    Row {
        var: "STATEGRAPH_BIND",
        file: "[server]\nbind = \"0.0.0.0:9000\"",
        value: "127.0.0.1:7000",
        applied: |c| c.server.bind.port() == 7000,
    },
    Row {
        var: "STATEGRAPH_DEFAULT_GRAPH",
        file: "[server]\ndefault_graph = \"file-graph\"",
        value: "env-graph",
        applied: |c| c.server.default_graph == "env-graph",
    },
    Row {
        var: "STATEGRAPH_GRAPHS",
        file: "[paths]\ngraphs = \"file-graphs\"",
        value: "env-graphs",
        applied: |c| c.paths.graphs == Path::new("env-graphs"),
    },
    Row {
        var: "STATEGRAPH_PROMPTS",
        file: "[paths]\nprompts = \"file-prompts\"",
        value: "env-prompts",
        applied: |c| c.paths.prompts == Path::new("env-prompts"),
    },
    // Both places a file can name the data directory.
    Row {
        var: "STATEGRAPH_DATA_DIR",
        file: "[paths]\ndata = \"file-data\"\n[store]\ndata_dir = \"file-store\"",
        value: "env-data",
        applied: |c| {
            c.paths.data == Path::new("env-data")
                && c.store.data_dir.as_deref() == Some(Path::new("env-data"))
                && c.store.sqlite_path().starts_with("env-data")
        },
    },
    Row {
        var: "STATEGRAPH_API_KEYS",
        file: "[auth.api_keys]\nk1 = \"alice\"",
        value: "k1=bob",
        applied: |c| c.auth.api_keys["k1"] == "bob",
    },
    Row {
        var: "STATEGRAPH_CORS_ORIGINS",
        file: "[server]\ncors_origins = [\"http://file\"]",
        value: "http://env",
        applied: |c| c.server.cors_origins == ["http://env"],
    },
    Row {
        var: "STATEGRAPH_LOG_FORMAT",
        file: "[telemetry]\nlog_format = \"pretty\"",
        value: "json",
        applied: |c| c.telemetry.log_format == LogFormat::Json,
    },
    Row {
        var: "STATEGRAPH_STREAM_DURABILITY",
        file: "[server]\nstream_durability = \"visible\"",
        value: "step",
        applied: |c| c.server.stream_durability == StreamDurability::Step,
    },
    Row {
        var: "STATEGRAPH_CALL_RETENTION",
        file: "[calls]\nretention = \"7d\"",
        value: "12h",
        applied: |c| c.calls.retention.0 == std::time::Duration::from_secs(12 * 3600),
    },
    Row {
        var: "OTEL_EXPORTER_OTLP_ENDPOINT",
        file: "[telemetry]\notlp_endpoint = \"http://file:4318\"",
        value: "http://env:4318",
        applied: |c| c.telemetry.otlp_endpoint.as_deref() == Some("http://env:4318"),
    },
    Row {
        var: "OTEL_EXPORTER_OTLP_PROTOCOL",
        file: "[telemetry]\notlp_protocol = \"http/json\"",
        value: "http/protobuf",
        applied: |c| c.telemetry.otlp_protocol.as_deref() == Some("http/protobuf"),
    },
    Row {
        var: "RUST_LOG",
        file: "[telemetry]\nlog_filter = \"info\"",
        value: "debug",
        applied: |c| c.telemetry.log_filter == "debug",
    },
    Row {
        var: "DATABASE_URL",
        file: "[store]\ndatabase_url = \"postgres://file/db\"",
        value: "postgres://env/db",
        applied: |c| c.store.database_url.as_deref() == Some("postgres://env/db"),
    },
    Row {
        var: "STATEGRAPH_MODEL",
        file: "[llm]\nmodel = \"file-model\"",
        value: "env-model",
        applied: |c| c.llm.model.as_deref() == Some("env-model"),
    },
    // The provider's variables fill in the default endpoint where the file
    // leaves it out (docs/configuration.md: other tools read them too).
    Row {
        var: "OPENAI_BASE_URL",
        file: "[llm.endpoints.default]\napi_key = \"sk-file\"",
        value: "http://env/v1",
        applied: |c| endpoint(c, "default").base_url == "http://env/v1",
    },
    Row {
        var: "OPENAI_API_KEY",
        file: "[llm.endpoints.default]\nbase_url = \"http://file/v1\"",
        value: "sk-env",
        applied: |c| endpoint(c, "default").api_key.as_deref() == Some("sk-env"),
    },
];

/// The variables the `Environment:` paragraph of docs/configuration.md lists.
fn documented() -> Vec<String> {
    let doc = include_str!("../../docs/configuration.md");
    let start = doc
        .find("Environment: `")
        .expect("docs/configuration.md's list of variables");
    let end = start + doc[start..].find(".\n").expect("its end");
    doc[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_documented_variable_overrides_its_file_key() {
    let documented = documented();
    assert!(documented.len() >= 15, "{documented:?}");
    for var in &documented {
        if var == "ANTHROPIC_API_KEY" {
            continue; // its own test below: it has no file key to override
        }
        let row = ROWS
            .iter()
            .find(|r| r.var == var)
            .unwrap_or_else(|| panic!("`{var}` is documented but has no row here"));
        let file = row.file;
        let from_file = Config::from_toml(file)
            .unwrap_or_else(|e| panic!("{var}: {e}"))
            .with_env(|_| None)
            .unwrap();
        assert!(
            !(row.applied)(&from_file),
            "{var}: the file alone already gives the value"
        );
        let c = Config::from_toml(file)
            .unwrap()
            .with_env(|k| (k == row.var).then(|| row.value.to_owned()))
            .unwrap_or_else(|e| panic!("{var}: {e}"));
        assert!(
            (row.applied)(&c),
            "`{var}={}` did not override `{}`",
            row.value,
            row.file
        );
    }
}

#[test]
fn the_anthropic_key_fills_in_an_anthropic_endpoint_without_one() {
    let c = Config::from_toml("[llm.endpoints.claude]\napi = \"anthropic\"").unwrap();
    let key = |env: Option<&str>| {
        c.llm
            .endpoint_settings(|k| {
                (k == "ANTHROPIC_API_KEY").then(|| env.unwrap_or_default().to_owned())
            })
            .unwrap()["claude"]
            .api_key
            .clone()
    };
    assert_eq!(key(Some("sk-ant")).as_deref(), Some("sk-ant"));
    assert_eq!(key(None), None);
}
