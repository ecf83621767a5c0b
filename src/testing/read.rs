//! Reading located YAML values: the shapes every part of a test file is
//! made of (mappings with known keys, names, lists of names, JSON values),
//! each problem reported at its place and reading going on, so a file's
//! mistakes are all listed at once.

use serde_json::Value;

use crate::graph::diagnostic::{Diagnostics, did_you_mean};
use crate::graph::loc::{Loc, Sp};
use crate::graph::value::{SpEntry, SpValue};

/// Reads values into diagnostics.
pub(super) struct Reader<'a> {
    pub(super) d: &'a mut Diagnostics,
}

impl Reader<'_> {
    /// A mapping's entries whose keys are `allowed`; others are reported
    /// (with the closest allowed key) and left out.
    pub(super) fn map<'v>(
        &mut self,
        v: &'v Sp<SpValue>,
        what: &str,
        allowed: &[&str],
    ) -> Option<Vec<&'v SpEntry>> {
        let SpValue::Map(entries) = &v.value else {
            self.d.error(
                v.loc,
                "invalid-value",
                format!("{what} is a mapping, not {}", v.value.kind()),
                Some(format!("write its keys: {}", allowed.join(", "))),
            );
            return None;
        };
        let mut out = Vec::new();
        for e in entries {
            if out.iter().any(|o: &&SpEntry| o.0.value == e.0.value) {
                self.d.error(
                    e.0.loc,
                    "duplicate-key",
                    format!("`{}` is given twice in {what}", e.0.value),
                    None,
                );
            } else if allowed.contains(&e.0.value.as_str()) {
                out.push(e);
            } else {
                let hint = did_you_mean(&e.0.value, allowed.iter().copied())
                    .unwrap_or_else(|| format!("{what} has {}", allowed.join(", ")));
                self.d.error(
                    e.0.loc,
                    "unknown-key",
                    format!("unknown key `{}` in {what}", e.0.value),
                    Some(hint),
                );
            }
        }
        Some(out)
    }

    /// A mapping whose keys are names the caller checks (nodes, fields).
    pub(super) fn named<'v>(&mut self, v: &'v Sp<SpValue>, what: &str) -> Vec<&'v SpEntry> {
        match &v.value {
            SpValue::Map(entries) => entries.iter().collect(),
            other => {
                self.d.error(
                    v.loc,
                    "invalid-value",
                    format!("{what} is a mapping, not {}", other.kind()),
                    None,
                );
                Vec::new()
            }
        }
    }

    /// A string.
    pub(super) fn string(&mut self, v: &Sp<SpValue>, what: &str) -> Option<Sp<String>> {
        match &v.value {
            SpValue::Str(s) => Some(Sp::new(s.clone(), v.loc)),
            other => {
                self.d.error(
                    v.loc,
                    "invalid-value",
                    format!("{what} is a string, not {}", other.kind()),
                    None,
                );
                None
            }
        }
    }

    /// A name: a string, or a boolean or number written bare (a route
    /// value `true`).
    pub(super) fn name(&mut self, v: &Sp<SpValue>, what: &str) -> Option<Sp<String>> {
        match v.value.as_name() {
            Some(s) => Some(Sp::new(s, v.loc)),
            None => {
                self.d.error(
                    v.loc,
                    "invalid-value",
                    format!("{what} is a name, not {}", v.value.kind()),
                    None,
                );
                None
            }
        }
    }

    /// A list of names (a single name is a list of one).
    pub(super) fn names(&mut self, v: &Sp<SpValue>, what: &str) -> Vec<Sp<String>> {
        match &v.value {
            SpValue::Seq(items) => items.iter().filter_map(|i| self.name(i, what)).collect(),
            _ => self.name(v, what).into_iter().collect(),
        }
    }

    /// A list's items.
    pub(super) fn seq<'v>(&mut self, v: &'v Sp<SpValue>, what: &str) -> &'v [Sp<SpValue>] {
        match &v.value {
            SpValue::Seq(items) => items,
            other => {
                self.d.error(
                    v.loc,
                    "invalid-value",
                    format!("{what} is a list, not {}", other.kind()),
                    None,
                );
                &[]
            }
        }
    }

    /// A boolean.
    pub(super) fn bool(&mut self, v: &Sp<SpValue>, what: &str) -> Option<bool> {
        match &v.value {
            SpValue::Bool(b) => Some(*b),
            other => {
                self.d.error(
                    v.loc,
                    "invalid-value",
                    format!("{what} is true or false, not {}", other.kind()),
                    None,
                );
                None
            }
        }
    }

    /// An error at `loc`.
    pub(super) fn error(
        &mut self,
        loc: Loc,
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        self.d.error(loc, code, message, hint);
    }
}

/// The value as JSON, keeping its place.
pub(super) fn json(v: &Sp<SpValue>) -> Sp<Value> {
    Sp::new(v.value.to_json(), v.loc)
}

/// The entry called `key`.
pub(super) fn get<'v>(entries: &[&'v SpEntry], key: &str) -> Option<&'v Sp<SpValue>> {
    entries.iter().find(|e| e.0.value == key).map(|e| &e.1)
}
