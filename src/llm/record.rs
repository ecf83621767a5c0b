//! Recording what a model call was asked (issue 35): the hook
//! [`call_model`](super::call_model) calls once per call, and the
//! redaction that keeps secrets out of what is recorded.
//!
//! The event log keeps what a model answered; what it was asked — the
//! messages after templating, the tools offered, the response format and
//! the settings — goes to a [`CallRecorder`] as a [`CallStart`] when the
//! call starts (once per call: nothing is done per token). The recorder the
//! server installs stores it by content address (see `store::calls`).
//! Before anything is stored, every text of the request passes through the
//! configured [`Redact`]ion: [`RegexRedactor`] from `[[calls.redact]]`
//! rules, or any implementation an embedding supplies.

use std::borrow::Cow;
use std::fmt;

use regex::Regex;
use serde::Deserialize;
use uuid::Uuid;

use super::ChatRequest;

/// A model call as it starts: where it is in its run and what it asks.
#[derive(Clone, Copy, Debug)]
pub struct CallStart<'a> {
    /// The run.
    pub run_id: Uuid,
    /// The seq of the call's `llm_started` event.
    pub seq: u64,
    /// The superstep.
    pub step: u32,
    /// The node.
    pub node: &'a str,
    /// The task within the step.
    pub task: u32,
    /// The call number within the task.
    pub call: u32,
    /// The model role.
    pub role: &'a str,
    /// The model's name.
    pub model: &'a str,
    /// Where and how it is served (`ChatModel::describe`), or `recording`
    /// when a recording answers.
    pub endpoint: &'a str,
    /// The request, as sent.
    pub request: &'a ChatRequest,
}

/// Hears every model call as it starts. Called on the node's task: an
/// implementation does little there and hands the writing off.
pub trait CallRecorder: Send + Sync + fmt::Debug {
    /// Records `call`.
    fn record(&self, call: CallStart<'_>);
}

/// Takes secrets out of a text before it is recorded.
pub trait Redact: Send + Sync + fmt::Debug {
    /// `text` with secrets replaced (borrowed when there were none).
    fn redact<'t>(&self, text: &'t str) -> Cow<'t, str>;
}

/// Redacts nothing.
#[derive(Debug, Default)]
#[cfg(feature = "server")]
pub(crate) struct NoRedaction;

#[cfg(feature = "server")]
impl Redact for NoRedaction {
    fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        Cow::Borrowed(text)
    }
}

/// One `[[calls.redact]]` rule: text matching `pattern` (a regular
/// expression, `regex` crate syntax) is replaced by `replace` (default
/// `[redacted]`; `$1` names a group).
/// A config file's rule is checked when the file is read: an invalid
/// pattern is a config error naming it, not a server that stores secrets.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawRule")]
pub struct RedactRule {
    /// The regular expression.
    pub pattern: String,
    /// What replaces a match.
    pub replace: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    pattern: String,
    #[serde(default = "default_replacement")]
    replace: String,
}

impl TryFrom<RawRule> for RedactRule {
    type Error = String;

    fn try_from(raw: RawRule) -> Result<Self, String> {
        Regex::new(&raw.pattern)
            .map_err(|e| format!("redaction pattern `{}`: {e}", raw.pattern))?;
        Ok(Self {
            pattern: raw.pattern,
            replace: raw.replace,
        })
    }
}

fn default_replacement() -> String {
    "[redacted]".to_owned()
}

/// Redaction by regular expressions, applied in order.
#[derive(Debug, Default)]
#[cfg(feature = "server")]
pub(crate) struct RegexRedactor {
    rules: Vec<(Regex, String)>,
}

#[cfg(feature = "server")]
impl RegexRedactor {
    /// Compiles `rules`.
    ///
    /// # Errors
    /// A pattern is not a valid regular expression: the message names it.
    pub(crate) fn new(rules: &[RedactRule]) -> Result<Self, String> {
        let rules = rules
            .iter()
            .map(|r| {
                Regex::new(&r.pattern)
                    .map(|re| (re, r.replace.clone()))
                    .map_err(|e| format!("redaction pattern `{}`: {e}", r.pattern))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }
}

#[cfg(feature = "server")]
impl Redact for RegexRedactor {
    fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        for (re, replace) in &self.rules {
            if let Cow::Owned(changed) = re.replace_all(&out, replace.as_str()) {
                out = Cow::Owned(changed);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_apply_in_order_and_leave_other_text_borrowed() {
        let r = RegexRedactor::new(&[
            RedactRule {
                pattern: r"sk-[A-Za-z0-9]{8,}".into(),
                replace: default_replacement(),
            },
            RedactRule {
                pattern: r"(\d{3})-\d{4}".into(),
                replace: "$1-XXXX".into(),
            },
        ])
        .unwrap();
        assert_eq!(
            r.redact("key sk-abcdef123456, call 555-1234"),
            "key [redacted], call 555-XXXX"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        let bad = RegexRedactor::new(&[RedactRule {
            pattern: "(".into(),
            replace: String::new(),
        }]);
        assert!(bad.unwrap_err().contains("redaction pattern `(`"));
    }
}
