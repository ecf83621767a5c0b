//! `[tools.mcp]` configuration: which MCP servers to connect to and how their
//! tools are named and treated.
//!
//! The file is parsed into a raw shape first and then checked as a whole
//! (parse, then validate): a server has exactly one transport, partitions are
//! unique, header names are legal — so a wrong config fails at startup with a
//! message that names the server, not later with a confusing connection
//! error.
//!
//! ```toml
//! [tools.mcp]
//! startup_wait = "10s"     # how long startup waits for the servers
//!
//! [tools.mcp.servers.everything]
//! command = ["node", "mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"]
//! prefix = true            # tools become `everything__echo`, …
//! timeout = "20s"
//!
//! [tools.mcp.servers.everything.tools.get-sum]
//! cache_ttl = "5m"
//!
//! [tools.mcp.servers.docs]
//! url = "http://127.0.0.1:8765/mcp"
//! headers = { Authorization = "Bearer …" }
//! partition = "data"
//! refresh = "1m"          # list the tools again this often
//! health_check = "10s"     # ping this often ("0": never)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::tools::{DEFAULT_TOOL_TIMEOUT, ToolPolicy, ToolRegistry};
use crate::units::{Bytes, Dur};

/// Default interval between two listings of a server's tools.
pub(crate) const DEFAULT_REFRESH: Duration = Duration::from_secs(300);

/// Default time a server has to start and answer its first listing.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Default time `serve` and the CLI's commands wait at startup for MCP
/// servers to connect before going on without the ones still starting.
pub(crate) const DEFAULT_STARTUP_WAIT: Duration = Duration::from_secs(10);

/// Default interval between liveness checks (`ping`) of a connected server.
pub(crate) const DEFAULT_HEALTH_CHECK: Duration = Duration::from_secs(30);

/// Default first delay before reconnecting to a server that is down.
pub(crate) const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// Default longest delay between reconnection attempts.
pub(crate) const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Headers the MCP transport sets itself; a config may not override them.
const RESERVED_HEADERS: &[&str] = &["accept", "mcp-session-id", "last-event-id", "content-type"];

/// `[tools.mcp]`: the MCP servers whose tools graphs may use.
#[derive(Clone, Debug)]
pub struct McpConfig {
    /// Servers by name (the name is also the default partition).
    pub servers: BTreeMap<String, McpServerConfig>,
    /// `startup_wait`: how long startup waits for the servers' first
    /// connection before serving (or running) without the ones still
    /// starting; they go on connecting in the background. A server whose
    /// interpreter starts slowly (Python on a busy machine) needs more.
    pub startup_wait: Duration,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            servers: BTreeMap::new(),
            startup_wait: DEFAULT_STARTUP_WAIT,
        }
    }
}

/// How the runtime reaches one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout (stderr goes to the log).
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// Extra environment variables for the process.
        env: BTreeMap<String, String>,
        /// Its working directory (default: the server's).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:8765/mcp`.
        url: String,
        /// Headers sent with every request (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// `stdio` or `http`.
    pub fn kind(&self) -> &'static str {
        match self {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }
}

/// One server, validated.
#[derive(Clone, Debug)]
pub struct McpServerConfig {
    /// How to reach it.
    pub transport: McpTransport,
    /// The tool partition its tools form (graph files name it).
    pub partition: String,
    /// Put before every tool name (`everything__` → `everything__echo`).
    pub prefix: String,
    /// How often its tool list is fetched again (it is also fetched when
    /// the server says it changed, and when a call fails for lack of a
    /// connection).
    pub refresh: Duration,
    /// How often a connected server is pinged to notice a dead connection
    /// between calls (none: never; stdio exits are noticed at once anyway).
    pub health_check: Option<Duration>,
    /// Time limit of one call (and of one listing or ping).
    pub timeout: Duration,
    /// Time the server has to start and list its tools.
    pub connect_timeout: Duration,
    /// First delay before reconnecting; doubles per failure.
    pub backoff: Duration,
    /// Longest delay between reconnection attempts.
    pub max_backoff: Duration,
    /// Per-tool policy overrides, by the tool's name on the server.
    pub tools: BTreeMap<String, McpToolOverride>,
}

impl McpServerConfig {
    /// A stdio server with default settings (partition and prefix still to
    /// be chosen by the caller).
    pub fn stdio(command: Vec<String>, partition: impl Into<String>) -> Self {
        Self::with_transport(
            McpTransport::Stdio {
                command,
                env: BTreeMap::new(),
                cwd: None,
            },
            partition.into(),
        )
    }

    /// A streamable-HTTP server with default settings.
    pub fn http(url: impl Into<String>, partition: impl Into<String>) -> Self {
        Self::with_transport(
            McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            partition.into(),
        )
    }

    fn with_transport(transport: McpTransport, partition: String) -> Self {
        Self {
            transport,
            partition,
            prefix: String::new(),
            refresh: DEFAULT_REFRESH,
            health_check: Some(DEFAULT_HEALTH_CHECK),
            timeout: DEFAULT_TOOL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            backoff: DEFAULT_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            tools: BTreeMap::new(),
        }
    }

    /// The policy calls to `remote_name` follow: the server's timeout, then
    /// the tool's overrides.
    pub fn policy_for(&self, remote_name: &str) -> ToolPolicy {
        let mut policy = ToolPolicy {
            timeout: self.timeout,
            ..ToolPolicy::default()
        };
        if let Some(o) = self.tools.get(remote_name) {
            if let Some(t) = o.timeout {
                policy.timeout = t.0;
            }
            if let Some(t) = o.cache_ttl {
                policy.cache_ttl = Some(t.0).filter(|d| !d.is_zero());
            }
            if let Some(p) = o.pass_through {
                policy.pass_through = p;
            }
            if let Some(b) = o.max_output_bytes {
                policy.max_output_bytes = b.0;
            }
        }
        policy
    }
}

/// `[tools.mcp.servers.NAME.tools.TOOL]`: how calls to one tool are treated
/// (keyed by the tool's name on the server, without the prefix).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolOverride {
    /// Time limit per call (default: the server's `timeout`).
    pub timeout: Option<Dur>,
    /// Cache results this long, keyed by arguments (`0` or absent: never).
    pub cache_ttl: Option<Dur>,
    /// The result goes to the user verbatim instead of through the model.
    pub pass_through: Option<bool>,
    /// Cut results longer than this.
    pub max_output_bytes: Option<Bytes>,
}

/// `prefix = true` (the server name and `__`) or a literal prefix.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum RawPrefix {
    Flag(bool),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    servers: BTreeMap<String, RawServer>,
    startup_wait: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    partition: Option<String>,
    prefix: Option<RawPrefix>,
    refresh: Option<Dur>,
    health_check: Option<Dur>,
    timeout: Option<Dur>,
    connect_timeout: Option<Dur>,
    backoff: Option<Dur>,
    max_backoff: Option<Dur>,
    #[serde(default)]
    tools: BTreeMap<String, McpToolOverride>,
}

impl<'de> Deserialize<'de> for McpConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawConfig::deserialize(d)?;
        McpConfig::from_raw(raw).map_err(serde::de::Error::custom)
    }
}

impl McpConfig {
    /// Makes every server's partition known to `registry` without
    /// connecting (`stategraph check`: graph files naming them validate).
    pub fn declare(&self, registry: &ToolRegistry) {
        for server in self.servers.values() {
            registry.declare_partition(&server.partition);
        }
    }

    fn from_raw(raw: RawConfig) -> Result<Self, String> {
        let mut servers = BTreeMap::new();
        let mut partitions = BTreeSet::new();
        for (name, s) in raw.servers {
            let server = server(&name, s).map_err(|e| format!("mcp server `{name}`: {e}"))?;
            if !partitions.insert(server.partition.clone()) {
                return Err(format!(
                    "mcp server `{name}`: partition `{}` is used by another server; give each server its own partition",
                    server.partition
                ));
            }
            servers.insert(name, server);
        }
        Ok(Self {
            servers,
            startup_wait: raw.startup_wait.map_or(DEFAULT_STARTUP_WAIT, |d| d.0),
        })
    }
}

fn server(name: &str, s: RawServer) -> Result<McpServerConfig, String> {
    if name.trim().is_empty() {
        return Err("the server name is empty".into());
    }
    let transport = match (s.command, s.url) {
        (Some(_), Some(_)) => {
            return Err(
                "give either `command` (stdio) or `url` (streamable HTTP), not both".into(),
            );
        }
        (None, None) => {
            return Err("give `command = [\"program\", \"arg\", …]` (stdio) or `url = \"http://…/mcp\"` (streamable HTTP)".into());
        }
        (Some(command), None) => {
            if command.first().is_none_or(|p| p.trim().is_empty()) {
                return Err("`command` must start with the program to run".into());
            }
            if !s.headers.is_empty() {
                return Err("`headers` apply to `url` servers only".into());
            }
            McpTransport::Stdio {
                command,
                env: s.env,
                cwd: s.cwd,
            }
        }
        (None, Some(url)) => {
            let parsed = reqwest::Url::parse(&url)
                .map_err(|e| format!("`url` {url:?} is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!("`url` {url:?} must be http:// or https://"));
            }
            if !s.env.is_empty() || s.cwd.is_some() {
                return Err("`env` and `cwd` apply to `command` servers only".into());
            }
            for (k, v) in &s.headers {
                let header = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| format!("header name {k:?} is not a valid HTTP header name"))?;
                if RESERVED_HEADERS.contains(&header.as_str()) {
                    return Err(format!(
                        "header `{k}` is set by the MCP transport and cannot be configured"
                    ));
                }
                reqwest::header::HeaderValue::from_str(v)
                    .map_err(|_| format!("header `{k}` has an invalid value"))?;
            }
            McpTransport::Http {
                url,
                headers: s.headers,
            }
        }
    };
    let partition = s.partition.unwrap_or_else(|| name.to_owned());
    if partition.trim().is_empty() {
        return Err("`partition` is empty".into());
    }
    let prefix = match s.prefix {
        None | Some(RawPrefix::Flag(false)) => String::new(),
        Some(RawPrefix::Flag(true)) => format!("{name}__"),
        Some(RawPrefix::Text(t)) => t,
    };
    let mut cfg = McpServerConfig::with_transport(transport, partition);
    cfg.prefix = prefix;
    cfg.tools = s.tools;
    let set = |v: Option<Dur>, d: &mut Duration| {
        if let Some(v) = v {
            *d = v.0;
        }
    };
    set(s.refresh, &mut cfg.refresh);
    if let Some(h) = s.health_check {
        cfg.health_check = Some(h.0).filter(|d| !d.is_zero());
    }
    set(s.timeout, &mut cfg.timeout);
    set(s.connect_timeout, &mut cfg.connect_timeout);
    set(s.backoff, &mut cfg.backoff);
    set(s.max_backoff, &mut cfg.max_backoff);
    for (what, d) in [
        ("refresh", cfg.refresh),
        ("timeout", cfg.timeout),
        ("connect_timeout", cfg.connect_timeout),
        ("backoff", cfg.backoff),
    ] {
        if d.is_zero() {
            return Err(format!("`{what}` must be longer than zero"));
        }
    }
    cfg.max_backoff = cfg.max_backoff.max(cfg.backoff);
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<McpConfig, String> {
        #[derive(Deserialize)]
        struct File {
            mcp: McpConfig,
        }
        toml::from_str::<File>(text)
            .map(|f| f.mcp)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn startup_wait_defaults_and_is_set_by_the_file() {
        let c = parse("[mcp.servers.a]\ncommand = [\"x\"]\n").unwrap();
        assert_eq!(c.startup_wait, DEFAULT_STARTUP_WAIT);
        let c = parse("[mcp]\nstartup_wait = \"45s\"\n").unwrap();
        assert_eq!(c.startup_wait, Duration::from_secs(45));
        assert!(parse("[mcp]\nstartup_wait = \"soon\"\n").is_err());
    }

    #[test]
    fn servers_parse_with_defaults_and_overrides() {
        let c = parse(
            r#"
[mcp.servers.everything]
command = ["npx", "-y", "@modelcontextprotocol/server-everything"]
env = { DEBUG = "1" }
prefix = true
timeout = "20s"
[mcp.servers.everything.tools.get-sum]
cache_ttl = "5m"
pass_through = true
[mcp.servers.docs]
url = "http://127.0.0.1:8765/mcp"
headers = { Authorization = "Bearer x" }
partition = "data"
prefix = "docs_"
refresh = "1m"
"#,
        )
        .unwrap();
        let e = &c.servers["everything"];
        assert_eq!(e.transport.kind(), "stdio");
        assert_eq!(
            (e.partition.as_str(), e.prefix.as_str()),
            ("everything", "everything__")
        );
        assert_eq!(e.refresh, DEFAULT_REFRESH);
        let p = e.policy_for("get-sum");
        assert_eq!(
            (p.timeout, p.cache_ttl, p.pass_through),
            (
                Duration::from_secs(20),
                Some(Duration::from_secs(300)),
                true
            )
        );
        assert_eq!(e.policy_for("echo").cache_ttl, None);
        let d = &c.servers["docs"];
        assert_eq!(
            (d.partition.as_str(), d.prefix.as_str(), d.refresh),
            ("data", "docs_", Duration::from_secs(60))
        );
        assert!(
            matches!(&d.transport, McpTransport::Http { headers, .. } if headers["Authorization"] == "Bearer x")
        );
    }

    #[test]
    fn the_section_sits_under_tools_in_the_config_file() {
        let c: crate::config::Config = toml::from_str(
            "[tools.mcp.servers.time]\ncommand = [\"mcp-server-time\"]\nhealth_check = 0\n",
        )
        .unwrap();
        let time = &c.tools.mcp.servers["time"];
        assert_eq!((time.partition.as_str(), time.health_check), ("time", None));
        let registry = ToolRegistry::new();
        c.tools.mcp.declare(&registry);
        assert!(registry.knows("time"));
    }

    #[test]
    fn wrong_servers_are_rejected_with_the_server_named() {
        let cases = [
            ("[mcp.servers.a]\npartition = \"x\"\n", "give `command"),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nurl = \"http://h/mcp\"\n",
                "not both",
            ),
            (
                "[mcp.servers.a]\ncommand = []\n",
                "must start with the program",
            ),
            (
                "[mcp.servers.a]\nurl = \"ftp://h/mcp\"\n",
                "http:// or https://",
            ),
            (
                "[mcp.servers.a]\nurl = \"http://h/mcp\"\nheaders = { Accept = \"x\" }\n",
                "cannot be configured",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\n[mcp.servers.b]\ncommand = [\"y\"]\npartition = \"a\"\n",
                "partition `a` is used",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\ncomand = 1\n",
                "unknown field",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nrefresh = 0\n",
                "longer than zero",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
