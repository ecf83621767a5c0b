//! Diagnostics: every problem in a graph file, with its place and a fix.
//!
//! Validation never stops at the first problem; it collects all of them so a
//! developer fixes a file in one pass. Each diagnostic names the file, the
//! line and column, a stable code (for tests and tooling), what is wrong and,
//! where we can tell, what to write instead.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::loc::Loc;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The graph cannot be compiled.
    Error,
    /// Suspicious but runnable.
    Warning,
}

/// One problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The file, as given to the loader.
    pub file: Arc<str>,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// Stable code, e.g. `unknown-node`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Diagnostic {
    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {sev}[{}]: {}",
            self.file, self.line, self.column, self.code, self.message
        )?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Collects diagnostics for one file.
#[derive(Debug)]
pub struct Diagnostics {
    file: Arc<str>,
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// An empty collection for `file`.
    pub fn new(file: impl Into<Arc<str>>) -> Self {
        Self {
            file: file.into(),
            items: Vec::new(),
        }
    }

    /// The file these diagnostics are about.
    pub fn file(&self) -> &Arc<str> {
        &self.file
    }

    /// Records an error.
    pub fn error(
        &mut self,
        loc: Loc,
        code: &'static str,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.push(Severity::Error, loc, code, message.into(), hint);
    }

    /// Records a warning.
    pub fn warning(
        &mut self,
        loc: Loc,
        code: &'static str,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.push(Severity::Warning, loc, code, message.into(), hint);
    }

    /// Records a diagnostic about another file (e.g. a prompt template).
    pub fn error_in(
        &mut self,
        file: &str,
        loc: Loc,
        code: &'static str,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.items.push(Diagnostic {
            severity: Severity::Error,
            file: file.into(),
            line: loc.line.max(1),
            column: loc.column.max(1),
            code,
            message: message.into(),
            hint,
        });
    }

    fn push(
        &mut self,
        severity: Severity,
        loc: Loc,
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        self.items.push(Diagnostic {
            severity,
            file: Arc::clone(&self.file),
            line: loc.line.max(1),
            column: loc.column.max(1),
            code,
            message,
            hint,
        });
    }

    /// Whether any error was recorded.
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(Diagnostic::is_error)
    }

    /// The diagnostics, sorted by position.
    pub fn into_vec(mut self) -> Vec<Diagnostic> {
        self.items
            .sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        self.items.dedup();
        self.items
    }

    /// Moves diagnostics from another collection into this one.
    pub fn extend(&mut self, other: Vec<Diagnostic>) {
        self.items.extend(other);
    }
}

/// "did you mean `x`?" for a misspelt name, if a candidate is close.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        let score = strsim::jaro_winkler(&name.to_lowercase(), &c.to_lowercase());
        if score > 0.8 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| format!("did you mean `{c}`?"))
}

/// "one of: a, b, c" for hints.
pub(crate) fn one_of<'a>(candidates: impl IntoIterator<Item = &'a str>) -> String {
    let v: Vec<String> = candidates.into_iter().map(|c| format!("`{c}`")).collect();
    if v.is_empty() {
        "none are defined".into()
    } else {
        format!("one of {}", v.join(", "))
    }
}

/// A hint naming the closest candidate, or listing them all (once each)
/// when few; none when there are no candidates, so the caller's own hint
/// applies.
pub(crate) fn name_hint<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let mut unique: Vec<&str> = Vec::new();
    for c in candidates {
        if !unique.contains(&c) {
            unique.push(c);
        }
    }
    if unique.is_empty() {
        return None;
    }
    did_you_mean(name, unique.iter().copied())
        .or_else(|| (unique.len() <= 12).then(|| format!("expected {}", one_of(unique))))
}
