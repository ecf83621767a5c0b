//! Which models a server uses: the `[llm]` table (endpoints, model roles,
//! timeouts, retries), completed by the environment, built into [`Models`].
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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::anthropic::AnthropicModel;
use super::fallback::FallbackModel;
use super::offline::OfflineModel;
use super::openai::{
    EndpointError, EndpointSettings, OpenAiEndpoint, RESERVED_FIELDS, RetryPolicy, Timeouts,
};
use super::profile::{Api, Family, ModelRules, Price, Structured};
use super::{ChatModel, Models};
use crate::units::Dur;

/// The endpoint that `OPENAI_*` variables and roles without `endpoint` use.
pub const DEFAULT_ENDPOINT: &str = "default";
/// The role that, when configured, serves every role not listed.
pub const DEFAULT_ROLE: &str = "default";
/// The model for roles that name none, unless `model` or `STATEGRAPH_MODEL` says otherwise.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The base URL of an endpoint that names none.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The base URL of an Anthropic endpoint that names none.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The `[llm]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Model for roles without their own (default [`DEFAULT_MODEL`]).
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
    /// own (see [`RoleConfig::max_tokens`]).
    pub max_tokens: Option<u32>,
    /// Prices by model name (`[llm.prices."gpt-5.1"]`), US dollars per
    /// million tokens; a model without one costs 0 in usage.
    pub prices: BTreeMap<String, Price>,
    /// A model script ([`super::script`]): every role answers from its
    /// rules, no endpoint is called (`STATEGRAPH_MODEL_SCRIPT`,
    /// `--model-script`).
    pub script: Option<std::path::PathBuf>,
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
    /// An Azure endpoint without its URL.
    #[error(
        "[llm.endpoints.{endpoint}] is `api = \"azure\"` and needs `base_url` \
         (e.g. https://NAME.openai.azure.com, with `api_version`)"
    )]
    AzureUrl {
        /// The endpoint.
        endpoint: String,
    },
    /// The model script cannot be read.
    #[error("[llm] script: {0}")]
    Script(String),
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
                },
            );
        }
        Ok(out)
    }

    /// Builds the models, reading `api_key_env` variables from the process
    /// environment. Call [`LlmConfig::with_env`] first to apply `OPENAI_*`
    /// and `STATEGRAPH_MODEL`.
    ///
    /// # Errors
    /// See [`LlmConfigError`].
    pub fn build_models(&self) -> Result<Models, LlmConfigError> {
        self.build_models_with(process_env)
    }

    /// As [`LlmConfig::build_models`], reading variables through `env`.
    ///
    /// Every configured role gets its model (wrapped in a [`FallbackModel`]
    /// when it has a `fallback`); the role `default`, or else the default
    /// endpoint with the default model, serves the rest. With no endpoint
    /// configured, every role gets the [`OfflineModel`].
    ///
    /// # Errors
    /// See [`LlmConfigError`].
    pub fn build_models_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Models, LlmConfigError> {
        if let Some(path) = &self.script {
            let model = super::script::ScriptModel::load(path).map_err(LlmConfigError::Script)?;
            return Ok(Models::single(Arc::new(model)));
        }
        if self.uses_offline_model() {
            if let Some((role, endpoint)) = self
                .roles
                .iter()
                .find_map(|(r, c)| Some((r, c.endpoint.as_ref()?)))
            {
                return Err(LlmConfigError::UnknownEndpoint {
                    role: role.clone(),
                    endpoint: endpoint.clone(),
                    known: "none".into(),
                });
            }
            return Ok(Models::single(Arc::new(OfflineModel {
                token_delay: self.offline.token_delay.map(|d| d.0),
                answer_tokens: self.offline.answer_tokens,
            })));
        }
        let mut endpoints = BTreeMap::new();
        for (name, settings) in self.endpoint_settings(env)? {
            let endpoint =
                OpenAiEndpoint::new(settings).map_err(|source| LlmConfigError::Endpoint {
                    endpoint: name.clone(),
                    source,
                })?;
            endpoints.insert(name, endpoint);
        }
        let mut builder = Builder {
            config: self,
            endpoints,
            built: BTreeMap::new(),
        };
        for role in self.roles.keys() {
            builder.role(role, &mut Vec::new())?;
        }
        let default = match builder.built.remove(DEFAULT_ROLE) {
            Some(model) => model,
            None => builder.plain(DEFAULT_ROLE, &RoleConfig::default())?,
        };
        Ok(builder
            .built
            .into_iter()
            .fold(Models::single(default), |models, (role, model)| {
                models.with_role(role, model)
            }))
    }
}

/// Builds role models once each, following fallbacks.
struct Builder<'a> {
    config: &'a LlmConfig,
    endpoints: BTreeMap<String, OpenAiEndpoint>,
    built: BTreeMap<String, Arc<dyn ChatModel>>,
}

impl Builder<'_> {
    fn role(
        &mut self,
        name: &str,
        chain: &mut Vec<String>,
    ) -> Result<Arc<dyn ChatModel>, LlmConfigError> {
        if let Some(model) = self.built.get(name) {
            return Ok(Arc::clone(model));
        }
        if chain.iter().any(|r| r == name) {
            chain.push(name.to_owned());
            return Err(LlmConfigError::FallbackCycle {
                chain: chain.join(" -> "),
            });
        }
        let config = self.config;
        let role = config.roles.get(name).cloned().unwrap_or_default();
        let primary = self.plain(name, &role)?;
        let model = match &role.fallback {
            None => primary,
            Some(fallback) => {
                if !config.roles.contains_key(fallback) {
                    return Err(LlmConfigError::UnknownFallback {
                        role: name.to_owned(),
                        fallback: fallback.clone(),
                        known: names(config.roles.keys()),
                    });
                }
                chain.push(name.to_owned());
                let fallback = self.role(fallback, chain)?;
                chain.pop();
                Arc::new(FallbackModel::new(primary, fallback))
            }
        };
        self.built.insert(name.to_owned(), Arc::clone(&model));
        Ok(model)
    }

    /// The role's own model, without its fallback.
    fn plain(&self, name: &str, role: &RoleConfig) -> Result<Arc<dyn ChatModel>, LlmConfigError> {
        let known = || names(self.endpoints.keys());
        let endpoint_name = match &role.endpoint {
            Some(e) => e.as_str(),
            None if self.endpoints.contains_key(DEFAULT_ENDPOINT) => DEFAULT_ENDPOINT,
            None if self.endpoints.len() == 1 => self
                .endpoints
                .keys()
                .next()
                .map_or(DEFAULT_ENDPOINT, String::as_str),
            None => {
                return Err(LlmConfigError::NoDefaultEndpoint {
                    role: name.to_owned(),
                    known: known(),
                });
            }
        };
        let endpoint =
            self.endpoints
                .get(endpoint_name)
                .ok_or_else(|| LlmConfigError::UnknownEndpoint {
                    role: name.to_owned(),
                    endpoint: endpoint_name.to_owned(),
                    known: known(),
                })?;
        if let Some(field) = role
            .extra
            .keys()
            .find(|k| RESERVED_FIELDS.contains(&k.as_str()))
        {
            return Err(LlmConfigError::ReservedExtra {
                role: name.to_owned(),
                field: field.clone(),
                owned: RESERVED_FIELDS
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let model = role
            .model
            .as_deref()
            .or(self.config.model.as_deref())
            .unwrap_or(DEFAULT_MODEL);
        let cap = role.max_tokens.or(self.config.max_tokens);
        let mut rules = ModelRules::new(name, model, role.family);
        rules.reasoning_effort = role.reasoning_effort.clone();
        if let Some(budget) = role.reasoning_budget {
            rules.reasoning_budget = budget;
        }
        if let Some(structured) = self
            .config
            .endpoints
            .get(endpoint_name)
            .and_then(|e| e.structured)
        {
            rules.structured = structured;
        }
        let price = self.config.prices.get(model).copied();
        if endpoint.api() == Api::Anthropic {
            return Ok(Arc::new(
                AnthropicModel::new(endpoint.clone(), model)
                    .with_price(price)
                    .with_extra(role.extra.clone())
                    .with_max_tokens(cap)
                    .with_thinking(role.thinking_budget)
                    .with_rules(rules),
            ));
        }
        Ok(Arc::new(
            endpoint
                .model(model)
                .with_price(price)
                .with_extra(role.extra.clone())
                .with_max_tokens(cap)
                .with_rules(rules),
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
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
        let only_url = LlmConfig::default()
            .with_env_from(env(&[("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")]));
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
        let config =
            parse("[endpoints.default]\nbase_url = \"http://proxy/v1\"").with_env_from(&vars);
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
        let e = build_err(
            "[endpoints.a]\n[roles.a1]\nfallback = \"b1\"\n[roles.b1]\nfallback = \"a1\"",
        );
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
}
