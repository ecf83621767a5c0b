//! Provider profiles and model-family rules: what each API and each model
//! family accepts, so that a request a graph file describes goes out in a
//! form the provider takes on the first call.
//!
//! An endpoint declares its API ([`Api`]): OpenAI's chat completions (the
//! default, also any OpenAI-compatible server), Azure OpenAI (deployment
//! URLs, `api-version`, the `api-key` header) or Anthropic's Messages API.
//! Within OpenAI's API a model belongs to a [`Family`], detected from its
//! name and overridable per role (`family = "reasoning"`), for proxies and
//! deployments whose names say nothing:
//!
//! - **reasoning** (o1, o3, o4, gpt-5 and later, except their `-chat`
//!   variants): the token limit goes as `max_completion_tokens` (they
//!   answer `max_tokens` with 400 `unsupported_parameter`), and sampling
//!   settings they refuse (`temperature`, `top_p`, penalties, `logprobs`,
//!   `stop`) are left out, with one warning per role and model. A node's
//!   `max_tokens` counts the visible answer: the call also gets the role's
//!   `reasoning_budget` for hidden reasoning, which those models bill as
//!   output and count against the same limit.
//! - **classic** (gpt-4o, gpt-4.1, compatible servers): `max_tokens` and
//!   sampling as written; `reasoning_effort` is left out (with the warning).
//!
//! Sources: OpenAI's API reference (`max_tokens` "is not compatible with
//! o-series models", `max_completion_tokens` includes reasoning tokens,
//! `reasoning_effort` values) as generated into the official Python SDK,
//! `openai/types/chat/completion_create_params.py`, and the error the API
//! returns, quoted in the conformance emulator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

/// The API an endpoint speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// OpenAI chat completions, or any compatible server (the default).
    #[default]
    Openai,
    /// Azure OpenAI: `{base}/openai/deployments/{model}/chat/completions?api-version=…`
    /// with the `api-key` header.
    Azure,
    /// Anthropic's Messages API (`{base}/messages`, `x-api-key`).
    Anthropic,
}

impl Api {
    /// Its name in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Openai => "openai",
            Api::Azure => "azure",
            Api::Anthropic => "anthropic",
        }
    }
}

/// A model family within OpenAI's API (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// `max_tokens`, sampling settings as written.
    Classic,
    /// `max_completion_tokens`, no sampling settings, `reasoning_effort`.
    Reasoning,
}

impl Family {
    /// The family a model name suggests: the last path segment (a proxy's
    /// `openai/gpt-5.1` counts as `gpt-5.1`), lower-cased.
    pub fn detect(model: &str) -> Family {
        let name = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let series = |prefix: &str| {
            name.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.', '_']))
        };
        let o_series = ["o1", "o3", "o4"].iter().any(|p| series(p));
        let gpt5_or_later = name
            .strip_prefix("gpt-")
            .and_then(|rest| rest.split(['.', '-']).next())
            .and_then(|major| major.parse::<u32>().ok())
            .is_some_and(|major| major >= 5);
        if (o_series || gpt5_or_later) && !name.contains("-chat") {
            Family::Reasoning
        } else {
            Family::Classic
        }
    }

    /// Its name in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Classic => "classic",
            Family::Reasoning => "reasoning",
        }
    }
}

/// How structured output is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Structured {
    /// `response_format: json_schema` (strict when the schema allows).
    #[default]
    JsonSchema,
    /// `response_format: json_object`, the schema in the instructions (for
    /// servers without `json_schema`).
    JsonObject,
    /// A forced call of a tool whose parameters are the schema; its
    /// arguments are the answer.
    Tool,
}

/// The default `reasoning_budget`: room for hidden reasoning on top of a
/// node's `max_tokens`.
pub(crate) const DEFAULT_REASONING_BUDGET: u32 = 8192;

/// Request fields a reasoning model refuses (OpenAI answers each with
/// 400 `unsupported_parameter` or `unsupported_value`).
pub(crate) const REASONING_REFUSES: &[&str] = &[
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "stop",
];

/// What a role's model is sent, beyond the request: its family's rules and
/// the role's own settings.
#[derive(Debug)]
pub struct ModelRules {
    /// The role (for the warning).
    pub role: Arc<str>,
    /// The family (detected or configured).
    pub family: Family,
    /// Whether the family was configured rather than detected.
    pub family_configured: bool,
    /// How structured output is asked for.
    pub structured: Structured,
    /// Whether tools go in strict mode (`strict: true` and the strict form
    /// of their parameters, when they have one; see [`crate::llm::strict`]).
    pub strict_tools: bool,
    /// The role's `reasoning_effort` (a node's own wins).
    pub reasoning_effort: Option<String>,
    /// Tokens for hidden reasoning on top of a node's `max_tokens`.
    pub reasoning_budget: u32,
    warned: AtomicBool,
}

impl ModelRules {
    /// The rules for `model` serving `role`; `family` overrides detection.
    pub fn new(role: &str, model: &str, family: Option<Family>) -> Self {
        Self {
            role: Arc::from(role),
            family: family.unwrap_or_else(|| Family::detect(model)),
            family_configured: family.is_some(),
            structured: Structured::default(),
            strict_tools: true,
            reasoning_effort: None,
            reasoning_budget: DEFAULT_REASONING_BUDGET,
            warned: AtomicBool::new(false),
        }
    }

    /// Logs what the rules changed in a request, once per role and model
    /// (the first call that changes anything).
    pub fn warn_once(&self, model: &str, changes: &[String]) {
        if changes.is_empty() || self.warned.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::warn!(
            role = %self.role,
            model,
            family = self.family.as_str(),
            "the model's family rules changed its requests: {}",
            changes.join("; ")
        );
    }
}

impl Default for ModelRules {
    fn default() -> Self {
        Self::new("default", "", Some(Family::Classic))
    }
}

impl Clone for ModelRules {
    fn clone(&self) -> Self {
        Self {
            role: Arc::clone(&self.role),
            family: self.family,
            family_configured: self.family_configured,
            structured: self.structured,
            strict_tools: self.strict_tools,
            reasoning_effort: self.reasoning_effort.clone(),
            reasoning_budget: self.reasoning_budget,
            warned: AtomicBool::new(self.warned.load(Ordering::Relaxed)),
        }
    }
}

/// A model's prices in US dollars per million tokens (`[llm.prices.MODEL]`).
/// Examples only, never built in: prices change, and the configuration
/// says what an operator pays.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input (prompt) tokens.
    pub input: f64,
    /// Input tokens served from the prompt cache (default: `input`).
    pub cached_input: Option<f64>,
    /// Input tokens written to the prompt cache (Anthropic; default: `input`).
    pub cache_write: Option<f64>,
    /// Output tokens, reasoning included.
    pub output: f64,
}

impl Price {
    /// What `usage` costs, in billionths of a US dollar.
    pub fn cost_nano_usd(&self, usage: &crate::events::Usage) -> u64 {
        let plain = usage
            .prompt_tokens
            .saturating_sub(usage.cached_tokens)
            .saturating_sub(usage.cache_write_tokens);
        // $ per million tokens = 1000 nano-dollars per token.
        let nanos = 1000.0
            * (plain as f64 * self.input
                + usage.cached_tokens as f64 * self.cached_input.unwrap_or(self.input)
                + usage.cache_write_tokens as f64 * self.cache_write.unwrap_or(self.input)
                + usage.completion_tokens as f64 * self.output);
        if nanos.is_finite() && nanos > 0.0 {
            nanos.round() as u64
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_counts_cached_and_written_input_at_their_prices() {
        let price = Price {
            input: 3.0,
            cached_input: Some(0.3),
            cache_write: Some(3.75),
            output: 15.0,
        };
        let usage = crate::events::Usage {
            prompt_tokens: 1_000_000 + 2_000_000 + 100_000,
            cached_tokens: 2_000_000,
            cache_write_tokens: 100_000,
            completion_tokens: 10_000,
            ..Default::default()
        };
        // 1M plain × $3 + 2M cached × $0.30 + 0.1M written × $3.75 + 10k out × $15
        let dollars = 3.0 + 0.6 + 0.375 + 0.15;
        assert_eq!(
            price.cost_nano_usd(&usage),
            (dollars * 1e9_f64).round() as u64
        );
    }

    #[test]
    fn families_are_detected_from_todays_names() {
        for name in [
            "gpt-5",
            "gpt-5.1",
            "gpt-5-mini",
            "gpt-5.1-codex",
            "o1",
            "o1-mini",
            "o3",
            "o3-mini-2025-01-31",
            "o4-mini",
            "openai/gpt-5.1",
            "GPT-5.2",
            "gpt-6",
        ] {
            assert_eq!(Family::detect(name), Family::Reasoning, "{name}");
        }
        for name in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4.1",
            "gpt-3.5-turbo",
            "gpt-5-chat-latest",
            "gpt-5.1-chat-latest",
            "llama3.2",
            "qwen3",
            "o1x",
            "gpt-oss-20b",
            "omni",
        ] {
            assert_eq!(Family::detect(name), Family::Classic, "{name}");
        }
    }
}
