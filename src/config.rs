//! Server configuration: a TOML file, then the environment, then flags.
//!
//! Every setting has a default, so `stategraph serve` runs with no file at
//! all (SQLite under `./data`, the offline model, the graphs and prompts in
//! the working directory or the copies built into the binary). See
//! docs/configuration.md for the full file; environment variables override the file:
//! `STATEGRAPH_BIND`, `STATEGRAPH_DEFAULT_GRAPH`, `STATEGRAPH_GRAPHS`, `STATEGRAPH_PROMPTS`,
//! `STATEGRAPH_DATA_DIR`, `STATEGRAPH_API_KEYS` (`key=user,key2=user2`),
//! `STATEGRAPH_CORS_ORIGINS` (comma-separated), `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `STATEGRAPH_LOG_FORMAT`, plus `OPENAI_*` / `STATEGRAPH_MODEL` for the
//! model ([`crate::llm::LlmConfig`]) and `DATABASE_URL` for the store.
//!
//! Per-user limits are `[limits]` ([`LimitsConfig`]): `requests_per_minute`,
//! `daily_tokens` and `daily_cost_usd`, all 0 (unlimited) unless set, and
//! overridden by `STATEGRAPH_LIMITS_REQUESTS_PER_MINUTE`,
//! `STATEGRAPH_LIMITS_DAILY_TOKENS` and `STATEGRAPH_LIMITS_DAILY_COST_USD`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::llm::LlmConfig;
pub use crate::units::{Bytes, Dur};

/// Errors reading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its position.
        message: String,
    },
    /// An environment variable has an invalid value.
    #[error("invalid value for {var}: {message}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Why.
        message: String,
    },
}

/// What happens to a run when its client disconnects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    /// The run goes on; the client can resume the stream (default).
    Finish,
    /// The run is cancelled when its last stream closes.
    Cancel,
}

/// Which of a run's events a client may see.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamDurability {
    /// Only stored ones (default): every event is in the log before any
    /// client sees it (written in small groups, at most every
    /// `stream_flush`), so a client resuming after a crash — with its
    /// `Last-Event-ID`, on any instance — continues exactly where it was and
    /// ends with exactly the stored answer.
    #[default]
    Visible,
    /// Events are stored with their step's checkpoint (fewer, larger
    /// writes); a crash loses the step in progress, which runs again, and a
    /// client that saw part of it is sent the whole stream again.
    Step,
}

/// `[server]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Largest request body (413 beyond).
    pub body_limit: Bytes,
    /// Time limit for non-streaming requests.
    pub request_timeout: Dur,
    /// Interval of keep-alive comments on idle streams.
    pub keep_alive: Dur,
    /// Runs outlive their HTTP connection unless this says `cancel`.
    pub on_disconnect: OnDisconnect,
    /// How long a finished run's stream stays resumable.
    pub linger: Dur,
    /// On shutdown, how long in-flight runs may take to finish.
    pub shutdown_grace: Dur,
    /// Origins allowed by CORS (`*` for any); empty sends no CORS headers.
    pub cors_origins: Vec<String>,
    /// How often graph files and prompts are checked for changes (0 = never).
    pub reload_interval: Dur,
    /// Runs allowed at once (429 beyond).
    pub max_concurrent_runs: usize,
    /// When a step's checkpoint is stored: `sync` (before the next step) or
    /// `async` (in the background, at most one step behind).
    pub durability: crate::runtime::Durability,
    /// How long the store may be unreachable before a run fails.
    pub store_outage_limit: Dur,
    /// Lease on a running run; an instance that stops renewing it (crashed)
    /// loses the run to another after this long.
    pub lease: Dur,
    /// How often to look for runs left by dead instances (0 = never).
    pub recover_interval: Dur,
    /// Which events clients may see: stored ones only (`visible`) or any.
    pub stream_durability: StreamDurability,
    /// With `visible`: the longest a streamed event waits to be grouped
    /// with the ones after it into one write (a step's end never waits).
    pub stream_flush: Dur,
    /// A client must send a request's whole head (request line and
    /// headers) within this time, or the connection is closed: a client
    /// that trickles half a header line holds nothing for long.
    pub header_timeout: Dur,
    /// Largest request head (request line and headers) accepted; 431 beyond.
    pub max_header_bytes: Bytes,
    /// For how long after its last activity (a run executing, a stream
    /// opening or dropping away) an idle server keeps handing free memory
    /// back to the OS, every 2 s (`stategraph::memory`); 0 = never.
    pub memory_release: Dur,
    /// The graph `POST /api/chat` runs when the request names none.
    pub default_graph: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            body_limit: Bytes(1024 * 1024),
            request_timeout: Dur(Duration::from_secs(30)),
            keep_alive: Dur(Duration::from_secs(15)),
            on_disconnect: OnDisconnect::Finish,
            linger: Dur(Duration::from_secs(30)),
            shutdown_grace: Dur(Duration::from_secs(30)),
            cors_origins: Vec::new(),
            reload_interval: Dur(Duration::from_secs(2)),
            max_concurrent_runs: 10_000,
            durability: crate::runtime::Durability::Sync,
            store_outage_limit: Dur(Duration::from_secs(30)),
            lease: Dur(Duration::from_secs(15)),
            recover_interval: Dur(Duration::from_secs(5)),
            stream_durability: StreamDurability::Visible,
            stream_flush: Dur(Duration::from_millis(20)),
            header_timeout: Dur(Duration::from_secs(10)),
            max_header_bytes: Bytes(16 * 1024),
            memory_release: Dur(Duration::from_secs(60)),
            default_graph: "chat".into(),
        }
    }
}

/// `[paths]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PathsConfig {
    /// Graph files.
    pub graphs: PathBuf,
    /// Prompt templates.
    pub prompts: PathBuf,
    /// Data directory (the SQLite database).
    pub data: PathBuf,
    /// Graphs and prompts served when `graphs` does not exist: a binary's
    /// own copies (the `stategraph` binary sets its shipped ones), never
    /// read from the file.
    #[serde(skip)]
    pub built_in: Option<&'static crate::graph::Bundle>,
}

impl Default for PathsConfig {
    fn default() -> Self {
        Self {
            graphs: "graphs".into(),
            prompts: "prompts".into(),
            data: "data".into(),
            built_in: None,
        }
    }
}

/// `[auth]`: who is calling.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Bearer API key → user id.
    pub api_keys: BTreeMap<String, String>,
    /// Requests without a key, made directly from a loopback address (not
    /// through a proxy: no `Forwarded`/`X-Forwarded-*`/`X-Real-IP`/`Via`
    /// header), act as this user (empty to require a key everywhere).
    pub local_user: String,
    /// Whether the local user still applies when API keys are configured.
    /// Off by default: a server that hands out keys means every caller to
    /// have one, and a reverse proxy on the same host would otherwise make
    /// every anonymous visitor the local user.
    pub local_with_keys: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            api_keys: BTreeMap::new(),
            local_user: "local".into(),
            local_with_keys: false,
        }
    }
}

impl AuthConfig {
    /// The local user, if anonymous loopback requests get one under this
    /// configuration.
    pub fn local(&self) -> Option<&str> {
        let allowed = self.api_keys.is_empty() || self.local_with_keys;
        (allowed && !self.local_user.is_empty()).then_some(self.local_user.as_str())
    }
}

/// `[limits]`: what one user may ask of the server. 0 means unlimited,
/// the default for each, so a server without this section behaves as if
/// limits did not exist. The user is whoever authentication resolves (an
/// API key's user, or the local user). Health (`/healthz`, `/readyz`) and
/// `/metrics` are never limited.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Requests per minute per user, on every API route (429
    /// `rate_limited` beyond). A token bucket per user in each server
    /// process: up to this many at once, refilled evenly over the minute.
    pub requests_per_minute: u32,
    /// Tokens (prompt + completion) a user's runs may use per UTC day; a
    /// request that would start a run once they are spent is refused (429
    /// `token_quota_exceeded`) until midnight UTC. Counted from the stored
    /// runs, so it holds across restarts and instances sharing a database;
    /// a run in flight counts once it ends (the run that crosses the quota
    /// finishes).
    pub daily_tokens: u64,
    /// US dollars a user's runs may cost per UTC day, at the prices
    /// `[llm.prices.MODEL]` gives their models (calls of models without a
    /// price cost nothing here); a request that would start a run once it is
    /// spent is refused (429 `cost_limit`) until midnight UTC. Counted like
    /// `daily_tokens`, from the cost stored on each run record.
    #[serde(deserialize_with = "cost_cap")]
    pub daily_cost_usd: f64,
}

impl LimitsConfig {
    /// The daily cost cap in billionths of a dollar (what runs record), or
    /// `None` when there is none.
    pub fn daily_cost_nano_usd(&self) -> Option<u64> {
        // Finite and positive (checked when read); rounds to the nano-dollar.
        (self.daily_cost_usd > 0.0).then(|| (self.daily_cost_usd * 1e9).round() as u64)
    }

    /// Applies the `STATEGRAPH_LIMITS_*` variables.
    fn with_env(mut self, env: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        if let Some(v) = env("STATEGRAPH_LIMITS_REQUESTS_PER_MINUTE") {
            self.requests_per_minute = number("STATEGRAPH_LIMITS_REQUESTS_PER_MINUTE", &v)?;
        }
        if let Some(v) = env("STATEGRAPH_LIMITS_DAILY_TOKENS") {
            self.daily_tokens = number("STATEGRAPH_LIMITS_DAILY_TOKENS", &v)?;
        }
        if let Some(v) = env("STATEGRAPH_LIMITS_DAILY_COST_USD") {
            self.daily_cost_usd = number("STATEGRAPH_LIMITS_DAILY_COST_USD", &v)?;
        }
        check_cost_cap(self.daily_cost_usd).map_err(|message| ConfigError::Env {
            var: "STATEGRAPH_LIMITS_DAILY_COST_USD",
            message,
        })?;
        Ok(self)
    }
}

/// A cost cap is a finite number of dollars, 0 (no cap) or more, that fits
/// the nano-dollars runs record.
fn check_cost_cap(c: f64) -> Result<(), String> {
    if c.is_finite() && (0.0..9e9).contains(&c) {
        Ok(())
    } else {
        Err(format!(
            "daily_cost_usd = {c}: give US dollars as a number, 0 (no cap) or more"
        ))
    }
}

/// `daily_cost_usd` as written (an integer too), checked where it is
/// written, so the error names its line.
fn cost_cap<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let c = f64::deserialize(d)?;
    check_cost_cap(c).map_err(serde::de::Error::custom)?;
    Ok(c)
}

/// An environment variable's value as a number.
fn number<T: std::str::FromStr>(var: &'static str, v: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    v.trim().parse().map_err(|e| ConfigError::Env {
        var,
        message: format!("`{v}`: {e}"),
    })
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// `[telemetry]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Log format.
    pub log_format: LogFormat,
    /// Default log filter (`RUST_LOG` overrides).
    pub log_filter: String,
    /// OTLP/HTTP endpoint for spans (e.g. `http://127.0.0.1:4318`); none disables export.
    pub otlp_endpoint: Option<String>,
    /// `http/json` (default) or `http/protobuf` (what every OTLP receiver
    /// takes; Arize Phoenix only this). `OTEL_EXPORTER_OTLP_PROTOCOL` overrides.
    pub otlp_protocol: Option<String>,
    /// Record prompts and completions on model-call spans
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`). Off by default:
    /// they may hold personal data.
    pub capture_content: bool,
    /// Service name in exported spans.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Pretty,
            log_filter: "info".into(),
            otlp_endpoint: None,
            otlp_protocol: None,
            capture_content: false,
            service_name: "stategraph".into(),
        }
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP server.
    pub server: ServerConfig,
    /// Directories.
    pub paths: PathsConfig,
    /// Models.
    pub llm: LlmConfig,
    /// Persistence.
    pub store: crate::store::config::StoreConfig,
    /// Tools.
    pub tools: crate::tools::config::ToolsConfig,
    /// Authentication.
    pub auth: AuthConfig,
    /// Per-user request rate and token quota.
    pub limits: LimitsConfig,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
    /// `stategraph test` and `eval`.
    pub testing: TestingConfig,
    /// Recording model calls: retention and redaction.
    pub calls: CallsConfig,
}

/// `[calls]`: recording model calls (`runs::calls`; docs/studio.md "Model
/// calls").
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallsConfig {
    /// Store each model call's request (default true).
    pub record: bool,
    /// How long call content is kept (0: as long as its run). The upkeep
    /// then marks older records `expired` and deletes content no newer
    /// record shares; `STATEGRAPH_CALL_RETENTION` overrides it.
    pub retention: Dur,
    /// Rules applied to every text of a request before it is stored.
    pub redact: Vec<crate::llm::RedactRule>,
}

impl Default for CallsConfig {
    fn default() -> Self {
        Self {
            record: true,
            retention: Dur(Duration::ZERO),
            redact: Vec::new(),
        }
    }
}

/// `[testing]`: settings of `stategraph test`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TestingConfig {
    /// The `[llm]` role whose model judges `judge:` expectations
    /// (`--judge ROLE` wins). Unset: they are reported as not judged.
    pub judge: Option<String>,
}

impl Config {
    /// Reads `path` (if given; `stategraph.toml` in the working directory
    /// if it exists otherwise), then applies the process environment.
    ///
    /// # Errors
    /// Unreadable or invalid file, invalid environment values.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let default = Path::new("stategraph.toml");
        let path = path.or_else(|| default.exists().then_some(default));
        let config = match path {
            Some(p) => Self::from_file(p)?,
            None => Self::default(),
        };
        config.with_env(|k| std::env::var(k).ok())
    }

    /// Parses a config file.
    ///
    /// # Errors
    /// Unreadable or invalid file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses TOML text.
    ///
    /// # Errors
    /// The message, with line and column.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim().to_owned())
    }

    /// Applies environment overrides (`env` looks variables up).
    ///
    /// # Errors
    /// A variable has an invalid value.
    pub fn with_env(mut self, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        if let Some(v) = env("STATEGRAPH_BIND") {
            self.server.bind = v.parse().map_err(|e| ConfigError::Env {
                var: "STATEGRAPH_BIND",
                message: format!("{e}"),
            })?;
        }
        if let Some(v) = env("STATEGRAPH_DEFAULT_GRAPH") {
            self.server.default_graph = v;
        }
        if let Some(v) = env("STATEGRAPH_GRAPHS") {
            self.paths.graphs = v.into();
        }
        if let Some(v) = env("STATEGRAPH_PROMPTS") {
            self.paths.prompts = v.into();
        }
        // The data directory is written in two places (`[paths] data`, and
        // `[store] data_dir`, which wins over it); the variable overrides
        // both, as every variable overrides its file key.
        if let Some(v) = env("STATEGRAPH_DATA_DIR") {
            self.paths.data = v.into();
            self.store.data_dir = Some(self.paths.data.clone());
        }
        if let Some(v) = env("STATEGRAPH_API_KEYS") {
            for pair in v.split(',').filter(|p| !p.trim().is_empty()) {
                let (key, user) = pair.split_once('=').ok_or(ConfigError::Env {
                    var: "STATEGRAPH_API_KEYS",
                    message: "expected key=user pairs separated by commas".into(),
                })?;
                self.auth
                    .api_keys
                    .insert(key.trim().to_owned(), user.trim().to_owned());
            }
        }
        if let Some(v) = env("STATEGRAPH_CORS_ORIGINS") {
            self.server.cors_origins = v
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
        }
        if let Some(v) = env("OTEL_EXPORTER_OTLP_ENDPOINT") {
            self.telemetry.otlp_endpoint = Some(v);
        }
        if let Some(v) = env("OTEL_EXPORTER_OTLP_PROTOCOL") {
            self.telemetry.otlp_protocol = Some(v);
        }
        if let Some(v) = env("STATEGRAPH_LOG_FORMAT") {
            self.telemetry.log_format = match v.as_str() {
                "json" => LogFormat::Json,
                "pretty" => LogFormat::Pretty,
                other => {
                    return Err(ConfigError::Env {
                        var: "STATEGRAPH_LOG_FORMAT",
                        message: format!("`{other}`: use json or pretty"),
                    });
                }
            };
        }
        // `telemetry::init` reads it too (through `EnvFilter`); here the
        // configuration says what will be in force.
        if let Some(v) = env("RUST_LOG").filter(|v| !v.trim().is_empty()) {
            self.telemetry.log_filter = v;
        }
        if let Some(v) = env("STATEGRAPH_STREAM_DURABILITY") {
            self.server.stream_durability = match v.as_str() {
                "visible" => StreamDurability::Visible,
                "step" => StreamDurability::Step,
                other => {
                    return Err(ConfigError::Env {
                        var: "STATEGRAPH_STREAM_DURABILITY",
                        message: format!("`{other}`: use visible or step"),
                    });
                }
            };
        }
        if let Some(v) = env("STATEGRAPH_CALL_RETENTION") {
            self.calls.retention = Dur(Dur::parse(&v).ok_or_else(|| ConfigError::Env {
                var: "STATEGRAPH_CALL_RETENTION",
                message: format!("`{v}`: use a duration such as 7d, 12h or 0s"),
            })?);
        }
        self.limits = std::mem::take(&mut self.limits).with_env(&env)?;
        self.llm = std::mem::take(&mut self.llm).with_env_from(&env);
        self.store = std::mem::take(&mut self.store).with_env_from(&env);
        if self.store.data_dir.is_none() {
            self.store.data_dir = Some(self.paths.data.clone());
        }
        Ok(self)
    }
}

#[cfg(test)]
mod env_overrides;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_file_and_env_layer_in_that_order() {
        let c = Config::from_toml("[server]\nbind = \"0.0.0.0:9000\"\nbody_limit = \"2MiB\"\nkeep_alive = \"5s\"\n[auth.api_keys]\nk1 = \"alice\"\n").unwrap();
        assert_eq!(c.server.bind.port(), 9000);
        assert_eq!(c.server.body_limit.0, 2 * 1024 * 1024);
        assert_eq!(c.server.keep_alive.0, Duration::from_secs(5));
        let env = |k: &str| match k {
            "STATEGRAPH_BIND" => Some("127.0.0.1:7000".to_owned()),
            "STATEGRAPH_API_KEYS" => Some("k2=bob, k3=carol".to_owned()),
            _ => None,
        };
        let c = c.with_env(env).unwrap();
        assert_eq!(c.server.bind.port(), 7000);
        assert_eq!(c.auth.api_keys.len(), 3);
        assert_eq!(c.auth.api_keys["k3"], "carol");
        assert_eq!(Config::default().server.body_limit.0, 1024 * 1024);
    }

    #[test]
    fn the_documented_example_is_a_valid_config() {
        let doc = include_str!("../docs/configuration.md");
        let start = doc
            .find("```toml\n[server]")
            .expect("docs/configuration.md's example")
            + 8;
        let end = start + doc[start..].find("```").expect("its end");
        let c = Config::from_toml(&doc[start..end])
            .unwrap_or_else(|e| panic!("docs/configuration.md: {e}"));
        assert_eq!(c.tools.mcp.servers.len(), 2);
        assert!(c.tools.sql.is_some() && c.tools.http.is_some() && c.tools.search.is_some());
    }

    #[test]
    fn limits_come_from_the_file_then_the_environment() {
        let c = Config::from_toml("[limits]\ndaily_tokens = 10\ndaily_cost_usd = 5\n").unwrap();
        assert_eq!(c.limits.daily_tokens, 10);
        assert_eq!(c.limits.daily_cost_nano_usd(), Some(5_000_000_000));
        let env = |k: &str| match k {
            "STATEGRAPH_LIMITS_DAILY_COST_USD" => Some("0.25".to_owned()),
            "STATEGRAPH_LIMITS_REQUESTS_PER_MINUTE" => Some("30".to_owned()),
            _ => None,
        };
        let c = c.with_env(env).unwrap();
        assert_eq!(c.limits.daily_cost_nano_usd(), Some(250_000_000));
        assert_eq!(c.limits.requests_per_minute, 30);
        assert_eq!(
            c.limits.daily_tokens, 10,
            "unset variables leave the file's"
        );
        assert_eq!(Config::default().limits.daily_cost_nano_usd(), None);

        let e = Config::from_toml("[limits]\ndaily_cost_usd = -1.5\n").unwrap_err();
        assert!(e.contains("daily_cost_usd") && e.contains("line 2"), "{e}");
        for bad in ["lots", "-2", "inf"] {
            let env = |k: &str| (k == "STATEGRAPH_LIMITS_DAILY_COST_USD").then(|| bad.to_owned());
            let e = Config::default().with_env(env).unwrap_err().to_string();
            assert!(e.contains("STATEGRAPH_LIMITS_DAILY_COST_USD"), "{e}");
        }
    }

    #[test]
    fn bad_files_say_where() {
        let e = Config::from_toml("[server]\nbnd = 1\n").unwrap_err();
        assert!(e.contains("bnd") && e.contains("line 2"), "{e}");
        let e = Config::from_toml("[server]\nbody_limit = \"lots\"\n").unwrap_err();
        assert!(e.contains("not a size"), "{e}");
    }
}
