//! The `[llm]` table: parsing, the environment, building the models.

use std::time::Duration;

use super::*;

fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    }
}

fn parse(text: &str) -> LlmConfig {
    toml::from_str(text).unwrap()
}

fn build_err(text: &str) -> String {
    parse(text)
        .build_models_with(env(&[("KEY", "k")]))
        .unwrap_err()
        .to_string()
}

const EXAMPLE: &str = r#"
    [endpoints.default]
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    [endpoints.backup]
    base_url = "http://127.0.0.1:11434/v1/"
    [roles.chat]
    endpoint = "default"
    model = "gpt-4o"
    fallback = "backup"
    [roles.routing]
    model = "gpt-4o-mini"
    [roles.backup]
    endpoint = "backup"
    model = "llama3.2"
    [timeouts]
    connect = "2s"
    first_token = "30s"
    total = "2m"
    [retry]
    attempts = 4
    backoff = "250ms"
"#;

#[test]
fn the_documented_example_builds_roles_with_fallbacks() {
    let config = parse(EXAMPLE).with_env_from(env(&[("OPENAI_API_KEY", "sk-env")]));
    assert_eq!(config.timeouts().total, Duration::from_secs(120));
    let retry = config.retry_policy().unwrap();
    assert_eq!(
        (retry.attempts, retry.backoff, retry.max_backoff),
        (4, Duration::from_millis(250), Duration::from_secs(8))
    );
    let settings = config
        .endpoint_settings(env(&[("OPENAI_API_KEY", "sk-env")]))
        .unwrap();
    assert_eq!(settings["default"].api_key.as_deref(), Some("sk-env"));
    assert_eq!(settings["backup"].api_key, None);
    let models = config
        .build_models_with(env(&[("OPENAI_API_KEY", "sk-env")]))
        .unwrap();
    assert_eq!(
        models.roles().collect::<Vec<_>>(),
        ["backup", "chat", "routing"]
    );
    assert_eq!(models.for_role("chat").name(), "gpt-4o");
    assert!(format!("{:?}", models.for_role("chat")).starts_with("FallbackModel"));
    assert_eq!(models.for_role("routing").name(), "gpt-4o-mini");
    assert_eq!(models.for_role("backup").name(), "llama3.2");
    assert_eq!(models.for_role("summary").name(), DEFAULT_MODEL);
    assert!(!models.any_offline() && !config.uses_offline_model());
}

#[test]
fn unknown_fields_and_bad_durations_are_rejected() {
    let e = toml::from_str::<LlmConfig>("[endpoints.default]\nbase = \"x\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `base`"), "{e}");
    let e = toml::from_str::<LlmConfig>("[timeouts]\ntotal = \"soon\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`soon` is not a duration"), "{e}");
}

#[test]
fn nothing_configured_means_the_offline_model() {
    let config = LlmConfig::default().with_env_from(env(&[("STATEGRAPH_MODEL", "m")]));
    assert!(config.uses_offline_model());
    let models = config.build_models_with(env(&[])).unwrap();
    assert!(models.any_offline());
    let e = build_err("[roles.chat]\nendpoint = \"x\"");
    assert!(e.contains("[llm.roles.chat] uses endpoint `x`"), "{e}");
}

#[test]
fn openai_variables_create_the_default_endpoint() {
    let only_key = LlmConfig::default().with_env_from(env(&[("OPENAI_API_KEY", " sk-1\n")]));
    let s = only_key.endpoint_settings(env(&[])).unwrap();
    assert_eq!(s["default"].base_url, OPENAI_BASE_URL);
    assert_eq!(s["default"].api_key.as_deref(), Some("sk-1"));
    let only_url =
        LlmConfig::default().with_env_from(env(&[("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")]));
    let s = only_url.endpoint_settings(env(&[])).unwrap();
    assert_eq!(
        (
            s["default"].base_url.as_str(),
            s["default"].api_key.as_deref()
        ),
        ("http://127.0.0.1:8080/v1", None)
    );
    let models = only_url
        .with_env_from(env(&[("STATEGRAPH_MODEL", "qwen3")]))
        .build_models_with(env(&[]))
        .unwrap();
    assert_eq!(models.for_role("chat").name(), "qwen3");
    assert!(
        LlmConfig::default()
            .with_env_from(env(&[("OPENAI_API_KEY", "")]))
            .uses_offline_model()
    );
}

#[test]
fn the_file_wins_over_openai_variables() {
    let vars = env(&[
        ("OPENAI_BASE_URL", "http://elsewhere/v1"),
        ("OPENAI_API_KEY", "sk-openai"),
        ("GROQ", "gk"),
    ]);
    let config = parse(
        "[endpoints.default]\nbase_url = \"https://groq.example/v1\"\napi_key_env = \"GROQ\"",
    )
    .with_env_from(&vars);
    let s = config.endpoint_settings(&vars).unwrap();
    assert_eq!(
        (
            s["default"].base_url.as_str(),
            s["default"].api_key.as_deref()
        ),
        ("https://groq.example/v1", Some("gk"))
    );
    // A file with other endpoints gets no `default` from the environment.
    let config =
        parse("[endpoints.local]\nbase_url = \"http://127.0.0.1:1/v1\"").with_env_from(&vars);
    assert_eq!(config.endpoints.keys().collect::<Vec<_>>(), ["local"]);
    // A `default` endpoint without a key takes OPENAI_API_KEY.
    let config = parse("[endpoints.default]\nbase_url = \"http://proxy/v1\"").with_env_from(&vars);
    assert_eq!(
        config.endpoint_settings(&vars).unwrap()["default"]
            .api_key
            .as_deref(),
        Some("sk-openai")
    );
}

#[test]
fn role_extra_fields_are_kept_and_reserved_ones_rejected() {
    let config = parse(
        "[endpoints.default]\n[roles.chat.extra]\nstop = [\"</tool_call>\"]\ncache_prompt = false\ntemperature = 0",
    );
    let extra = &config.roles["chat"].extra;
    assert_eq!(
        Value::Object(extra.clone()),
        serde_json::json!({"stop": ["</tool_call>"], "cache_prompt": false, "temperature": 0})
    );
    let models = config.build_models_with(env(&[])).unwrap();
    let chat = format!("{:?}", models.for_role("chat"));
    assert!(chat.contains("cache_prompt"), "{chat}");
    assert!(!format!("{:?}", models.for_role("other")).contains("cache_prompt"));
    let e = build_err("[endpoints.a]\n[roles.chat.extra]\nstream = false");
    assert!(
        e.starts_with("[llm.roles.chat.extra] sets `stream`, which the client writes itself"),
        "{e}"
    );
}

#[test]
fn profiles_and_family_settings_are_read() {
    let config = parse(
        "[endpoints.default]\napi = \"anthropic\"\n\
         [endpoints.az]\napi = \"azure\"\nbase_url = \"https://x.openai.azure.com\"\napi_version = \"2025-04-01-preview\"\nstructured = \"json_object\"\n\
         [roles.chat]\nmodel = \"claude-sonnet-4-5\"\nthinking_budget = 2048\n\
         [roles.deep]\nendpoint = \"az\"\nmodel = \"prod\"\nfamily = \"reasoning\"\nreasoning_effort = \"low\"\nreasoning_budget = 512",
    );
    let vars = env(&[("ANTHROPIC_API_KEY", "sk-ant")]);
    let s = config.endpoint_settings(&vars).unwrap();
    assert_eq!(
        (
            s["default"].base_url.as_str(),
            s["default"].api_key.as_deref(),
            s["default"].api
        ),
        (ANTHROPIC_BASE_URL, Some("sk-ant"), Api::Anthropic)
    );
    assert_eq!(s["az"].api_version.as_deref(), Some("2025-04-01-preview"));
    let models = config.build_models_with(&vars).unwrap();
    assert!(format!("{:?}", models.for_role("chat")).starts_with("AnthropicModel"));
    let deep = format!("{:?}", models.for_role("deep"));
    for part in [
        "family: Reasoning",
        "family_configured: true",
        "structured: JsonObject",
        "reasoning_budget: 512",
    ] {
        assert!(deep.contains(part), "{part}: {deep}");
    }
    let e = build_err("[endpoints.a]\napi = \"azure\"");
    assert!(e.contains("needs `base_url`"), "{e}");
    let e = toml::from_str::<LlmConfig>("[roles.a]\nfamily = \"fast\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown variant `fast`"), "{e}");
}

#[test]
fn broken_references_are_explained() {
    let e = build_err("[endpoints.a]\n[roles.chat]\nendpoint = \"b\"");
    assert_eq!(
        e,
        "[llm.roles.chat] uses endpoint `b`, which is not configured (configured endpoints: `a`)"
    );
    let e = build_err("[endpoints.a]\n[roles.chat]\nfallback = \"spare\"");
    assert!(
        e.contains(
            "falls back to role `spare`, which is not configured (configured roles: `chat`)"
        ),
        "{e}"
    );
    let e =
        build_err("[endpoints.a]\n[roles.a1]\nfallback = \"b1\"\n[roles.b1]\nfallback = \"a1\"");
    assert!(e.contains("a1 -> b1 -> a1"), "{e}");
    let e = build_err("[endpoints.a]\n[endpoints.b]\n[roles.chat]\nmodel = \"m\"");
    assert!(e.contains("none is called `default`"), "{e}");
    let e = build_err("[endpoints.a]\napi_key_env = \"NOPE\"");
    assert_eq!(
        e,
        "[llm.endpoints.a] reads its API key from $NOPE, which is not set"
    );
    let e = build_err("[endpoints.a]\napi_key = \"x\"\napi_key_env = \"KEY\"");
    assert!(e.contains("keep one"), "{e}");
    let e = build_err("[endpoints.a]\nbase_url = \"nope\"");
    assert!(e.starts_with("[llm.endpoints.a] base URL `nope`"), "{e}");
    let e = build_err("[endpoints.a]\n[retry]\nattempts = 0");
    assert!(e.contains("attempts must be at least 1"), "{e}");
}
