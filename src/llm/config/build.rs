//! Building the configured models: an endpoint per `[llm.endpoints]`
//! entry, a model per role (its family rules, prices and extra fields),
//! fallbacks followed and checked for cycles.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    DEFAULT_ENDPOINT, DEFAULT_MODEL, DEFAULT_ROLE, LlmConfig, LlmConfigError, RoleConfig, names,
    process_env,
};
use crate::llm::anthropic::AnthropicModel;
use crate::llm::fallback::FallbackModel;
use crate::llm::offline::OfflineModel;
use crate::llm::openai::{OpenAiEndpoint, RESERVED_FIELDS};
use crate::llm::profile::{Api, ModelRules, Structured};
use crate::llm::{ChatModel, Models};

impl LlmConfig {
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
            let model =
                crate::llm::script::ScriptModel::load(path).map_err(LlmConfigError::Script)?;
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
        let configured = self.config.endpoints.get(endpoint_name);
        if let Some(structured) = configured.and_then(|e| e.structured) {
            rules.structured = structured;
        }
        rules.strict_tools = configured
            .and_then(|e| e.strict_tools)
            .unwrap_or(rules.structured == Structured::JsonSchema);
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
