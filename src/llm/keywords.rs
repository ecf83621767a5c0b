//! Keywords for a schema's enum values, so a model that cannot read — the
//! built-in offline model — still chooses the value the graph file means.
//!
//! They come from the graph file (a router's `keywords`), travel with the
//! [`JsonSchemaFormat`](super::JsonSchemaFormat) they belong to and are
//! never sent to a provider: a real model reads the prompt instead.

use std::sync::Arc;

use regex::Regex;

/// Per enum value, a regular expression matched (case-insensitively)
/// against the user's text.
#[derive(Clone, Debug, Default)]
pub struct ValueKeywords(Arc<[(String, Regex)]>);

impl ValueKeywords {
    /// Keywords from `(value, compiled pattern)` pairs.
    pub fn new(pairs: Vec<(String, Regex)>) -> Self {
        Self(pairs.into())
    }

    /// Whether `text` matches `value`'s keywords; `None` when the value has
    /// none.
    pub fn matches(&self, value: &str, text: &str) -> Option<bool> {
        self.0
            .iter()
            .find(|(v, _)| v == value)
            .map(|(_, re)| re.is_match(text))
    }

    /// Whether no value has keywords.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Two sets are equal when they give the same values the same patterns.
impl PartialEq for ValueKeywords {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(other.0.iter())
                .all(|((a, ra), (b, rb))| a == b && ra.as_str() == rb.as_str())
    }
}
