//! Which models a server uses: the `[llm]` table (endpoints, model roles,
//! timeouts, retries), completed by the environment, built into [`Models`](crate::llm::Models).
//!
//! ```toml
//! [llm]
//! model = "gpt-4o-mini"                  # for roles that name none
//! max_tokens = 2048                      # cap per call, for roles without their own
//! [llm.endpoints.default]
//! base_url = "https://api.openai.com/v1"
//! api_key_env = "OPENAI_API_KEY"         # or api_key = "…"
//! [llm.endpoints.backup]
//! base_url = "http://127.0.0.1:11434/v1"
//! http2 = true                           # h2c: calls share connections
//! http2_streams_per_connection = 1000    # then another connection
//! [llm.roles.chat]
//! endpoint = "default"
//! model = "gpt-4o"
//! fallback = "local"                     # a role used when this one fails before answering
//! [llm.roles.local]
//! endpoint = "backup"
//! model = "llama3.2"
//! max_tokens = 256                       # cap per call of this role (slow model)
//! [llm.roles.local.extra]                # more request-body fields for this role
//! cache_prompt = false
//! top_k = 40
//! [llm.timeouts]
//! connect = "10s"
//! first_token = "30s"
//! total = "2m"
//! [llm.retry]
//! attempts = 3
//! backoff = "500ms"
//! max_backoff = "8s"
//! max_retry_after = "60s"
//! ```
//!
//! The environment: `OPENAI_BASE_URL` and `OPENAI_API_KEY` are shared with
//! other tools, so they only fill in what the file leaves open — they create
//! the `default` endpoint when the file configures no endpoint at all
//! (`https://api.openai.com/v1` when only the key is set), and otherwise set
//! the `default` endpoint's URL or key only where the file has none. A key
//! meant for one server is never sent to another the file chose.
//! `STATEGRAPH_MODEL` is this program's own and overrides `model`.
//!
//! A role's `extra` table is sent with each of its calls as additional
//! request-body fields: what one server or model needs and graph files
//! should not know about — stop sequences matching a chat template,
//! llama.cpp's `cache_prompt`, vLLM's `chat_template_kwargs`, a `seed`.
//! They fill in what a request leaves unset (a node that sets
//! `temperature` keeps it, so `temperature` here is the role's default);
//! the fields the client writes itself (`model`, `messages`, `stream`,
//! `stream_options`, `tools`, `response_format`) are rejected.
//!
//! With no endpoint at all, every role gets the built-in offline model, so a
//! fresh checkout runs; [`LlmConfig::uses_offline_model`] tells the caller to
//! say so.

mod build;

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::openai::{EndpointError, EndpointSettings, RetryPolicy, Timeouts};
use super::profile::{Api, Family, Price, Structured};
use crate::units::Dur;

/// The endpoint that `OPENAI_*` variables and roles without `endpoint` use.
pub(crate) const DEFAULT_ENDPOINT: &str = "default";
/// The role that, when configured, serves every role not listed.
pub(crate) const DEFAULT_ROLE: &str = "default";
/// The model for roles that name none, unless `model` or `STATEGRAPH_MODEL` says otherwise.
pub(crate) const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The base URL of an endpoint that names none.
pub(crate) const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The base URL of an Anthropic endpoint that names none.
pub(crate) const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The `[llm]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Model for roles without their own (default `DEFAULT_MODEL`).
    pub model: Option<String>,
    /// Endpoints by name.
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// Model roles (`chat`, `routing`, …) by name. A role called `default`
    /// serves every role not listed.
    pub roles: BTreeMap<String, RoleConfig>,
    /// Time limits for every call.
    pub timeouts: TimeoutsConfig,
    /// Retries for every call.
    pub retry: RetryConfig,
    /// The built-in offline model (used when no endpoint is configured).
    pub offline: OfflineConfig,
    /// Upper bound on `max_tokens` for every call of roles without their
    /// own (see `RoleConfig::max_tokens`).
    pub max_tokens: Option<u32>,
    /// A model script (`llm::script`): every role answers from its
    /// rules, no endpoint is called (`STATEGRAPH_MODEL_SCRIPT`,
    /// `--model-script`).
    pub script: Option<std::path::PathBuf>,
    /// Prices by model name (`[llm.prices."gpt-5.1"]`), US dollars per
    /// million tokens; a model without one costs 0 in usage.
    pub prices: BTreeMap<String, Price>,
}

/// `[llm.offline]`: how the built-in offline model streams.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OfflineConfig {
    /// Delay before each streamed token (e.g. `50ms` = 20 tokens/s).
    pub token_delay: Option<Dur>,
    /// Text answers padded or cut to this many tokens.
    pub answer_tokens: Option<usize>,
}

/// `[llm.endpoints.NAME]`.
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointConfig {
    /// Base URL with the version path (default [`OPENAI_BASE_URL`], or
    /// [`ANTHROPIC_BASE_URL`] for `api = "anthropic"`; Azure needs one).
    pub base_url: Option<String>,
    /// The key itself.
    pub api_key: Option<String>,
    /// The environment variable holding the key (an Anthropic endpoint
    /// with neither reads `ANTHROPIC_API_KEY`).
    pub api_key_env: Option<String>,
    /// The API it speaks: `openai` (default), `azure` or `anthropic`.
    pub api: Api,
    /// Azure's `api-version` (deployment URLs); unset: Azure's v1 path.
    pub api_version: Option<String>,
    /// How structured output is asked for: `json_schema` (default),
    /// `json_object` or `tool` (for compatible servers without
    /// `json_schema`). Anthropic always uses a forced tool.
    pub structured: Option<Structured>,
    /// Whether tools are offered in strict mode (`strict: true`, their
    /// parameters in strict form: OpenAI then guarantees arguments that
    /// match). Default: where structured output is `json_schema` — a
    /// server that takes strict schemas. Anthropic takes tools as declared.
    pub strict_tools: Option<bool>,
    /// HTTP/2 with prior knowledge (h2c) on a plain `http://` URL: calls'
    /// streams share a few connections. Over `https://` the client
    /// offers h2 anyway and the server chooses (ALPN); there, `true`
    /// requires h2. Default `false`: plain-http servers get HTTP/1.1.
    pub http2: bool,
    /// Calls in flight per HTTP/2 connection before another is opened
    /// (default [`DEFAULT_H2_STREAMS_PER_CONNECTION`](crate::llm::DEFAULT_H2_STREAMS_PER_CONNECTION)):
    /// a connection the server ends loses only its own calls. Set it to
    /// the server's limit of concurrent streams when that is lower.
    pub http2_streams_per_connection: Option<std::num::NonZeroU32>,
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("api", &self.api)
            .field("api_version", &self.api_version)
            .field("structured", &self.structured)
            .field("strict_tools", &self.strict_tools)
            .field("http2", &self.http2)
            .field(
                "http2_streams_per_connection",
                &self.http2_streams_per_connection,
            )
            .finish()
    }
}

/// `[llm.roles.NAME]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleConfig {
    /// Endpoint name (default: the `default` endpoint, or the only one).
    pub endpoint: Option<String>,
    /// Model name (default: `[llm] model`).
    pub model: Option<String>,
    /// Another role to use when this one fails before answering.
    pub fallback: Option<String>,
    /// More request-body fields for every call of this role (see the
    /// module docs).
    pub extra: Map<String, Value>,
    /// Upper bound on `max_tokens` for every call of this role: a node
    /// asking for more (or for nothing) gets this. For slow or costly
    /// models; graph files set what each node needs.
    pub max_tokens: Option<u32>,
    /// The model's family (`classic` or `reasoning`), when its name does
    /// not tell (a proxy's or a deployment's name); see [`crate::llm::profile`].
    pub family: Option<Family>,
    /// `reasoning_effort` for every call of this role (a node's own wins):
    /// OpenAI's values (`none`, `minimal`, `low`, `medium`, `high`, …); for
    /// Anthropic it sets the thinking budget.
    pub reasoning_effort: Option<String>,
    /// Tokens for hidden reasoning on top of a node's `max_tokens` (default
    /// 8192): reasoning models count reasoning against the same limit.
    pub reasoning_budget: Option<u32>,
    /// Anthropic: extended thinking with this many tokens (at least 1024),
    /// shown in the thinking panel.
    pub thinking_budget: Option<u32>,
}

/// `[llm.timeouts]`; unset values keep the defaults of [`Timeouts`].
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsConfig {
    /// Connecting.
    pub connect: Option<Dur>,
    /// Until the first answer chunk.
    pub first_token: Option<Dur>,
    /// The whole call.
    pub total: Option<Dur>,
}

/// `[llm.retry]`; unset values keep the defaults of [`RetryPolicy`].
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts per call, the first included.
    pub attempts: Option<u32>,
    /// First retry delay.
    pub backoff: Option<Dur>,
    /// Longest computed delay.
    pub max_backoff: Option<Dur>,
    /// Longest server-requested delay honoured.
    pub max_retry_after: Option<Dur>,
}

/// A configuration that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum LlmConfigError {
    /// A role names an endpoint that does not exist.
    #[error(
        "[llm.roles.{role}] uses endpoint `{endpoint}`, which is not configured (configured endpoints: {known})"
    )]
    UnknownEndpoint {
        /// The role.
        role: String,
        /// The endpoint it names.
        endpoint: String,
        /// The endpoints there are.
        known: String,
    },
    /// A role falls back to a role that does not exist.
    #[error(
        "[llm.roles.{role}] falls back to role `{fallback}`, which is not configured (configured roles: {known})"
    )]
    UnknownFallback {
        /// The role.
        role: String,
        /// The fallback it names.
        fallback: String,
        /// The roles there are.
        known: String,
    },
    /// Fallbacks form a loop.
    #[error(
        "[llm.roles] fallbacks go round in a circle: {chain}; end the chain with a role without `fallback`"
    )]
    FallbackCycle {
        /// The roles in the loop, `a -> b -> a`.
        chain: String,
    },
    /// No endpoint can be chosen for a role that names none.
    #[error(
        "role `{role}` names no endpoint, and of the configured endpoints ({known}) none is called `default`; \
         name one `default` or set `endpoint` in [llm.roles.{role}]"
    )]
    NoDefaultEndpoint {
        /// The role.
        role: String,
        /// The endpoints there are.
        known: String,
    },
    /// `api_key_env` names an unset variable.
    #[error("[llm.endpoints.{endpoint}] reads its API key from ${var}, which is not set")]
    MissingKeyEnv {
        /// The endpoint.
        endpoint: String,
        /// The variable.
        var: String,
    },
    /// Both `api_key` and `api_key_env` are set.
    #[error("[llm.endpoints.{endpoint}] sets both `api_key` and `api_key_env`; keep one")]
    KeyTwice {
        /// The endpoint.
        endpoint: String,
    },
    /// The endpoint cannot be set up.
    #[error("[llm.endpoints.{endpoint}] {source}")]
    Endpoint {
        /// The endpoint.
        endpoint: String,
        /// Why.
        #[source]
        source: EndpointError,
    },
    /// `attempts = 0`.
    #[error("[llm.retry] attempts must be at least 1 (1 means no retries)")]
    NoAttempts,
    /// The model script cannot be read.
    #[error("[llm] script: {0}")]
    Script(String),
    /// An Azure endpoint without its URL.
    #[error(
        "[llm.endpoints.{endpoint}] is `api = \"azure\"` and needs `base_url` \
         (e.g. https://NAME.openai.azure.com, with `api_version`)"
    )]
    AzureUrl {
        /// The endpoint.
        endpoint: String,
    },
    /// An `extra` field the client writes itself.
    #[error(
        "[llm.roles.{role}.extra] sets `{field}`, which the client writes itself; \
         remove it (the fields it owns: {owned})"
    )]
    ReservedExtra {
        /// The role.
        role: String,
        /// The field.
        field: String,
        /// The fields the client owns.
        owned: String,
    },
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn names<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    let list: Vec<String> = keys.map(|k| format!("`{k}`")).collect();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

impl LlmConfig {
    /// Completes the configuration from the process environment (see the
    /// module docs for the rules).
    pub fn with_env(self) -> Self {
        self.with_env_from(process_env)
    }

    /// As [`LlmConfig::with_env`], reading variables through `env`.
    pub fn with_env_from(mut self, env: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| {
            env(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if let Some(model) = var("STATEGRAPH_MODEL") {
            self.model = Some(model);
        }
        if let Some(script) = var("STATEGRAPH_MODEL_SCRIPT") {
            self.script = Some(script.into());
        }
        let (base_url, api_key) = (var("OPENAI_BASE_URL"), var("OPENAI_API_KEY"));
        if base_url.is_none() && api_key.is_none() {
            return self;
        }
        if self.endpoints.is_empty() {
            self.endpoints.insert(
                DEFAULT_ENDPOINT.to_owned(),
                EndpointConfig {
                    base_url,
                    api_key,
                    ..EndpointConfig::default()
                },
            );
        } else if let Some(ep) = self.endpoints.get_mut(DEFAULT_ENDPOINT) {
            if ep.base_url.is_none() {
                ep.base_url = base_url;
            }
            if ep.api_key.is_none() && ep.api_key_env.is_none() {
                ep.api_key = api_key;
            }
        }
        self
    }

    /// Whether no endpoint is configured, so every role gets the built-in
    /// offline model.
    pub fn uses_offline_model(&self) -> bool {
        self.endpoints.is_empty() && self.script.is_none()
    }

    /// The timeouts with defaults filled in.
    pub fn timeouts(&self) -> Timeouts {
        let d = Timeouts::default();
        let t = &self.timeouts;
        Timeouts {
            connect: t.connect.map_or(d.connect, |v| v.0),
            first_token: t.first_token.map_or(d.first_token, |v| v.0),
            total: t.total.map_or(d.total, |v| v.0),
        }
    }

    /// The retry policy with defaults filled in.
    ///
    /// # Errors
    /// `attempts = 0`.
    pub fn retry_policy(&self) -> Result<RetryPolicy, LlmConfigError> {
        let d = RetryPolicy::default();
        let r = &self.retry;
        let attempts = r.attempts.unwrap_or(d.attempts);
        if attempts == 0 {
            return Err(LlmConfigError::NoAttempts);
        }
        Ok(RetryPolicy {
            attempts,
            backoff: r.backoff.map_or(d.backoff, |v| v.0),
            max_backoff: r.max_backoff.map_or(d.max_backoff, |v| v.0),
            max_retry_after: r.max_retry_after.map_or(d.max_retry_after, |v| v.0),
        })
    }

    /// Each endpoint's settings, keys read through `env`.
    ///
    /// # Errors
    /// A key is set twice or names an unset variable, or `attempts = 0`.
    pub fn endpoint_settings(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<BTreeMap<String, EndpointSettings>, LlmConfigError> {
        let (timeouts, retry) = (self.timeouts(), self.retry_policy()?);
        let mut out = BTreeMap::new();
        for (name, ep) in &self.endpoints {
            let api_key = match (&ep.api_key, &ep.api_key_env) {
                (Some(_), Some(_)) => {
                    return Err(LlmConfigError::KeyTwice {
                        endpoint: name.clone(),
                    });
                }
                (Some(key), None) => Some(key.trim().to_owned()),
                (None, Some(var)) => {
                    let key = env(var)
                        .map(|v| v.trim().to_owned())
                        .filter(|v| !v.is_empty());
                    Some(key.ok_or_else(|| LlmConfigError::MissingKeyEnv {
                        endpoint: name.clone(),
                        var: var.clone(),
                    })?)
                }
                (None, None) if ep.api == Api::Anthropic => env("ANTHROPIC_API_KEY")
                    .map(|v| v.trim().to_owned())
                    .filter(|v| !v.is_empty()),
                (None, None) => None,
            };
            let base_url = match (&ep.base_url, ep.api) {
                (Some(url), _) => url.clone(),
                (None, Api::Openai) => OPENAI_BASE_URL.to_owned(),
                (None, Api::Anthropic) => ANTHROPIC_BASE_URL.to_owned(),
                (None, Api::Azure) => {
                    return Err(LlmConfigError::AzureUrl {
                        endpoint: name.clone(),
                    });
                }
            };
            out.insert(
                name.clone(),
                EndpointSettings {
                    base_url,
                    api_key,
                    timeouts,
                    retry: retry.clone(),
                    api: ep.api,
                    api_version: ep.api_version.clone(),
                    http2: ep.http2,
                    http2_streams_per_connection: ep
                        .http2_streams_per_connection
                        .map_or(0, std::num::NonZeroU32::get),
                },
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
