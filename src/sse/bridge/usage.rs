//! `data-usage`: every node's token usage in one part, updated after each
//! model call.

use serde_json::{Value, json};

use super::{Bridge, Chunk};
use crate::events::Usage;

impl Bridge {
    /// `data-usage`: per node the model id, its cost and its prompt, completion,
    /// cached-prompt and reasoning tokens; and the totals.
    pub(super) fn usage_chunk(&self) -> Chunk {
        let counts = |u: &Usage| {
            json!({"promptTokens": u.prompt_tokens, "completionTokens": u.completion_tokens,
                "cachedTokens": u.cached_tokens, "reasoningTokens": u.reasoning_tokens,
                "cacheWriteTokens": u.cache_write_tokens, "cost": dollars(u)})
        };
        let nodes: serde_json::Map<String, Value> = self
            .usage
            .iter()
            .map(|(n, (model, u))| {
                let mut v = counts(u);
                v["model"] = json!(model);
                (n.clone(), v)
            })
            .collect();
        let mut total = Usage::default();
        let mut models: Vec<&str> = Vec::new();
        for (model, u) in self.usage.values() {
            total += *u;
            if !models.contains(&model.as_str()) {
                models.push(model);
            }
        }
        let mut total = counts(&total);
        total["models"] = json!(models);
        Chunk::Data {
            name: "usage".into(),
            id: Some("usage".into()),
            data: json!({"nodes": nodes, "total": total}),
            transient: false,
        }
    }
}

/// A cost in US dollars as JSON: a whole number written as an integer, as
/// JavaScript writes it back (the stored message and the client's agree).
fn dollars(u: &Usage) -> Value {
    let d = u.cost_usd();
    if d.fract() == 0.0 && d < 9e15 {
        json!(d as u64)
    } else {
        json!(d)
    }
}
