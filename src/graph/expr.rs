//! The expression language of graph files: minijinja expressions.
//!
//! One language wherever a graph needs logic: conditional routes
//! (`route: {expr: "coverage < 0.7 and iteration < 3"}`), computed fields
//! (`kind: set`), map fan-out over any list (`map: {over: "sources[:5]"}`),
//! tool arguments and HTTP bodies built from the state. Expressions are
//! parsed when the graph loads, and every variable they read must be a state
//! field (or a name the setting provides, such as `item` on a map target or
//! `result` for a tool's result): a typo is a diagnostic with its place, not
//! a run that quietly reads nothing.
//!
//! Values in settings follow one rule ([`ValueExpr`]): a string that is
//! exactly `{{ expression }}` is that expression's value, typed (a list
//! stays a list); a string with `{{ … }}` or `{% … %}` inside is a template
//! rendering to a string; anything else is the literal value.
//!
//! Besides minijinja's built-in filters (`map`, `selectattr`, `sort`,
//! `unique`, `join`, `length`, `round`, …) expressions have `host` (a URL's
//! host), `chunks(size)` (text cut into passages), `flatten`, `interleave`
//! (lists merged round-robin: the first of each, then the second of each —
//! a rank-preserving merge of result lists), `merge(other)` (an object with
//! another's properties added), `wrap(key)` (a value as `{key: value}`),
//! `fromjson`, `weighted(weights)` (a weighted score per item) and
//! `newest_json(budget)` (the newest items of a list as JSON, as many as fit
//! in `budget` characters). Prompt templates have the same filters. Evaluation is pure:
//! no clock, no randomness, so a re-executed run computes the same values.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use minijinja::value::{Kwargs, Value as Mv, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::Value;

use super::diagnostic::{Diagnostics, name_hint};
use super::loc::{Loc, Sp};
use super::prompts::BUILTIN_GLOBALS;
use super::typecheck::{AttrProblem, TypeScope, check_expression, check_template};
use super::value::SpValue;
use crate::state::{DynState, FieldId, StateSchema, TypeSpec};

/// The environment every expression and value template is compiled in.
static ENV: LazyLock<Environment<'static>> = LazyLock::new(environment);

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    // As in prompts: a template never renders a missing value as empty
    // text; as a value (a whole-expression setting) it is `null`.
    env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
    add_filters(&mut env);
    env
}

/// The filters of graph files, in expressions and prompt templates alike.
pub(crate) fn add_filters(env: &mut Environment<'static>) {
    env.add_filter("host", host);
    env.add_filter("chunks", chunks);
    env.add_filter("flatten", flatten);
    env.add_filter("fromjson", fromjson);
    env.add_filter("weighted", weighted);
    env.add_filter("interleave", interleave);
    env.add_filter("merge", merge);
    env.add_filter("wrap", wrap);
    env.add_filter("newest_json", newest_json);
}

/// A parsed expression and the state fields it reads.
pub struct Expr {
    source: Arc<str>,
    compiled: minijinja::Expression<'static, 'static>,
    vars: Vec<(Arc<str>, FieldId)>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

/// An expression failed at run time.
#[derive(Debug, thiserror::Error)]
#[error("expression `{source_text}` failed: {message}")]
pub struct ExprError {
    /// The expression.
    pub source_text: String,
    /// Why.
    pub message: String,
}

/// What an expression may read besides state fields.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scope<'a> {
    /// The state's fields (`None` when the state is unknown: then fields
    /// are not checked, the state was already reported).
    pub schema: Option<&'a StateSchema>,
    /// Other names the setting provides (`item`, `result`, …).
    pub extra: &'a [&'a str],
    /// Declared types of some of `extra`'s names (`result` of a tool with
    /// an output schema, `state`, `user`): attribute reads of them are
    /// checked, as those of state fields are.
    pub typed: &'a [(&'a str, TypeSpec)],
}

impl Scope<'_> {
    fn types(&self) -> TypeScope<'_> {
        TypeScope {
            schema: self.schema,
            typed: self.typed,
        }
    }
}

/// Reports the attribute reads of `source` (a setting's expression or
/// template, written at `loc`) that its declared types say are not there.
fn report_attributes(
    problems: Vec<AttrProblem>,
    what: &str,
    source: &str,
    loc: Loc,
    d: &mut Diagnostics,
) -> bool {
    let ok = problems.is_empty();
    for p in problems {
        d.error(
            loc,
            "unknown-attribute",
            format!("{what}: `{source}`: {}", p.message),
            p.hint,
        );
    }
    ok
}

impl Expr {
    /// Parses `source` and checks its variables against `scope`; problems
    /// are reported at `source.loc` with `what` naming the setting.
    pub fn compile(
        source: &Sp<String>,
        what: &str,
        scope: Scope<'_>,
        d: &mut Diagnostics,
    ) -> Option<Self> {
        let compiled = match ENV.compile_expression_owned(source.value.clone()) {
            Ok(c) => c,
            Err(e) => {
                d.error(
                    source.loc,
                    "expression-syntax",
                    format!("{what}: `{}` is not a valid expression: {}", source.value, detail(&e)),
                    Some("expressions are minijinja (Jinja2) expressions, e.g. `coverage < 0.7 and iteration < 3`".into()),
                );
                return None;
            }
        };
        let mut vars = Vec::new();
        let mut ok = true;
        let mut names: Vec<String> = compiled.undeclared_variables(false).into_iter().collect();
        // minijinja's own analysis misses the base of a slice (`xs[:3]`);
        // an expression binds no names, so every name it reads counts.
        for n in scan_names(&source.value) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names.sort();
        for var in names {
            if scope.extra.contains(&var.as_str()) || BUILTIN_GLOBALS.contains(&var.as_str()) {
                continue;
            }
            let Some(schema) = scope.schema else { continue };
            match schema.field(&var) {
                Some(id) => vars.push((Arc::<str>::from(var.as_str()), id)),
                None => {
                    ok = false;
                    d.error(
                        source.loc,
                        "expression-variable",
                        format!(
                            "{what}: `{}` reads `{var}`, but state `{}` has no such field",
                            source.value, schema.name
                        ),
                        name_hint(&var, schema.names().chain(scope.extra.iter().copied())),
                    );
                }
            }
        }
        if ok {
            let problems = check_expression(&source.value, scope.types());
            ok = report_attributes(problems, what, &source.value, source.loc, d);
        }
        ok.then(|| Self {
            source: source.value.as_str().into(),
            compiled,
            vars,
        })
    }

    /// The expression text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The state fields the expression reads.
    pub fn fields(&self) -> impl Iterator<Item = FieldId> + '_ {
        self.vars.iter().map(|(_, f)| *f)
    }

    /// Evaluates against `state`, with `extra` values for the scope's names.
    ///
    /// # Errors
    /// The expression failed (a filter refused its input, say).
    pub fn eval(&self, state: &dyn DynState, extra: &[(&str, Mv)]) -> Result<Mv, ExprError> {
        let ctx = context(&self.vars, state, extra);
        self.compiled.eval(ctx).map_err(|e| ExprError {
            source_text: self.source.to_string(),
            message: detail(&e),
        })
    }

    /// Evaluates to JSON (`undefined` becomes `null`).
    ///
    /// # Errors
    /// As [`Expr::eval`].
    pub fn eval_json(
        &self,
        state: &dyn DynState,
        extra: &[(&str, Mv)],
    ) -> Result<Value, ExprError> {
        self.eval(state, extra).map(|v| to_json(&v))
    }
}

fn context(vars: &[(Arc<str>, FieldId)], state: &dyn DynState, extra: &[(&str, Mv)]) -> Mv {
    let mut map: BTreeMap<&str, Mv> = BTreeMap::new();
    for (name, field) in vars {
        map.insert(name, state.template_value(*field));
    }
    for (name, value) in extra {
        map.insert(name, value.clone());
    }
    Mv::from(map)
}

/// A minijinja value as JSON; `undefined` and `none` become `null`.
pub(crate) fn to_json(v: &Mv) -> Value {
    if v.is_undefined() || v.is_none() {
        return Value::Null;
    }
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// JSON as a minijinja value.
pub(crate) fn from_json(v: &Value) -> Mv {
    Mv::from(minijinja::value::Serde(v))
}

fn detail(e: &Error) -> String {
    e.detail()
        .map_or_else(|| e.kind().to_string(), str::to_owned)
}

/// A setting's value: a literal, an expression (`"{{ expr }}"`, typed), a
/// template (`"Dear {{ name }}"`, a string), or a mapping or list whose
/// values follow the same rule.
#[derive(Debug)]
pub enum ValueExpr {
    /// Used as written.
    Literal(Value),
    /// A mapping whose values are evaluated.
    Map(Vec<(String, ValueExpr)>),
    /// A list whose items are evaluated.
    List(Vec<ValueExpr>),
    /// The value of the expression.
    Expr(Expr),
    /// The rendered text.
    Template {
        /// The template source.
        source: Arc<str>,
        /// The state fields it reads.
        vars: Vec<(Arc<str>, FieldId)>,
    },
}

impl ValueExpr {
    /// Reads a setting's value written at `value` (nested mappings and
    /// lists too, each part reported at its own place); `what` names it in
    /// diagnostics.
    pub fn compile_tree(
        value: &Sp<SpValue>,
        what: &str,
        scope: Scope<'_>,
        d: &mut Diagnostics,
    ) -> Option<Self> {
        let parts = match &value.value {
            SpValue::Map(entries) => {
                let mut out = Vec::new();
                let mut ok = true;
                for (k, v) in entries {
                    let inner = match what.strip_suffix('`') {
                        Some(w) => format!("{w}.{}`", k.value),
                        None => format!("{what}.{}", k.value),
                    };
                    match Self::compile_tree(v, &inner, scope, d) {
                        Some(e) => out.push((k.value.clone(), e)),
                        None => ok = false,
                    }
                }
                return ok.then(|| Self::literal_or(ValueExpr::Map(out), value));
            }
            SpValue::Seq(items) => items
                .iter()
                .map(|i| Self::compile_tree(i, what, scope, d))
                .collect::<Vec<_>>(),
            other => return Self::compile(&other.to_json(), value.loc, what, scope, d),
        };
        let items: Option<Vec<_>> = parts.into_iter().collect();
        items.map(|items| Self::literal_or(ValueExpr::List(items), value))
    }

    /// A mapping or list with nothing to evaluate is a literal.
    fn literal_or(e: ValueExpr, written: &Sp<SpValue>) -> ValueExpr {
        let all_literal = match &e {
            ValueExpr::Map(entries) => entries
                .iter()
                .all(|(_, v)| matches!(v, ValueExpr::Literal(_))),
            ValueExpr::List(items) => items.iter().all(|v| matches!(v, ValueExpr::Literal(_))),
            _ => false,
        };
        if all_literal {
            ValueExpr::Literal(written.value.to_json())
        } else {
            e
        }
    }

    /// Reads a scalar setting value; `what` names it in diagnostics.
    pub fn compile(
        value: &Value,
        loc: Loc,
        what: &str,
        scope: Scope<'_>,
        d: &mut Diagnostics,
    ) -> Option<Self> {
        let Value::String(text) = value else {
            return Some(ValueExpr::Literal(value.clone()));
        };
        let trimmed = text.trim();
        if let Some(inner) = trimmed
            .strip_prefix("{{")
            .and_then(|t| t.strip_suffix("}}"))
            .filter(|inner| !inner.contains("{{") && !inner.contains("}}"))
        {
            return Expr::compile(&Sp::new(inner.trim().to_owned(), loc), what, scope, d)
                .map(ValueExpr::Expr);
        }
        if !text.contains("{{") && !text.contains("{%") {
            return Some(ValueExpr::Literal(value.clone()));
        }
        let vars = match ENV.template_from_str(text) {
            Ok(t) => with_scanned(t.undeclared_variables(false), text, scope.schema),
            Err(e) => {
                d.error(
                    loc,
                    "expression-syntax",
                    format!("{what}: not a valid template: {}", detail(&e)),
                    None,
                );
                return None;
            }
        };
        let mut fields = Vec::new();
        let mut ok = true;
        for var in vars {
            if scope.extra.contains(&var.as_str()) || BUILTIN_GLOBALS.contains(&var.as_str()) {
                continue;
            }
            let Some(schema) = scope.schema else { continue };
            match schema.field(&var) {
                Some(id) => fields.push((Arc::<str>::from(var.as_str()), id)),
                None => {
                    ok = false;
                    d.error(
                        loc,
                        "expression-variable",
                        format!(
                            "{what}: the template reads `{var}`, but state `{}` has no such field",
                            schema.name
                        ),
                        name_hint(&var, schema.names().chain(scope.extra.iter().copied())),
                    );
                }
            }
        }
        if ok {
            let problems = check_template(text, scope.types());
            ok = report_attributes(problems, what, text, loc, d);
        }
        ok.then(|| ValueExpr::Template {
            source: text.as_str().into(),
            vars: fields,
        })
    }

    /// The value for `state` (and the scope's `extra` values).
    ///
    /// # Errors
    /// The expression or template failed.
    pub fn eval(&self, state: &dyn DynState, extra: &[(&str, Mv)]) -> Result<Value, ExprError> {
        match self {
            ValueExpr::Literal(v) => Ok(v.clone()),
            ValueExpr::Map(entries) => entries
                .iter()
                .map(|(k, v)| Ok((k.clone(), v.eval(state, extra)?)))
                .collect::<Result<serde_json::Map<_, _>, ExprError>>()
                .map(Value::Object),
            ValueExpr::List(items) => items
                .iter()
                .map(|v| v.eval(state, extra))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            ValueExpr::Expr(e) => e.eval_json(state, extra),
            ValueExpr::Template { source, vars } => ENV
                .render_str(source, context(vars, state, extra))
                .map(Value::String)
                .map_err(|e| ExprError {
                    source_text: source.to_string(),
                    message: detail(&e),
                }),
        }
    }

    /// The state fields it reads.
    pub fn fields(&self) -> Vec<FieldId> {
        match self {
            ValueExpr::Literal(_) => Vec::new(),
            ValueExpr::Map(entries) => entries.iter().flat_map(|(_, v)| v.fields()).collect(),
            ValueExpr::List(items) => items.iter().flat_map(ValueExpr::fields).collect(),
            ValueExpr::Expr(e) => e.fields().collect(),
            ValueExpr::Template { vars, .. } => vars.iter().map(|(_, f)| *f).collect(),
        }
    }
}

/// Names an expression (or the expressions of a template) reads as
/// variables: identifiers that are not attributes (`.x`), filters or tests
/// (`| x`, `is x`), keyword arguments (`x=`) or keywords. A lexical scan,
/// to catch what minijinja's analysis misses (the base of a slice).
pub(crate) fn scan_names(src: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "not",
        "in",
        "is",
        "if",
        "else",
        "true",
        "false",
        "none",
        "True",
        "False",
        "None",
        "for",
        "endfor",
        "set",
        "endset",
        "endif",
        "elif",
        "with",
        "endwith",
        "macro",
        "endmacro",
        "block",
        "endblock",
        "recursive",
        "filter",
        "endfilter",
        "call",
        "endcall",
        "include",
        "import",
        "from",
        "extends",
        "raw",
        "endraw",
        "do",
        "continue",
        "break",
        "autoescape",
        "endautoescape",
        "ignore",
        "missing",
    ];
    let chars: Vec<char> = src.chars().collect();
    let mut out: Vec<String> = Vec::new();
    let mut prev = ' ';
    let mut prev_word = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' || c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            prev = c;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j] == ' ' {
                j += 1;
            }
            let kwarg = chars.get(j) == Some(&'=') && chars.get(j + 1) != Some(&'=');
            let skip = matches!(prev, '.' | '|')
                || prev_word == "is"
                || kwarg
                || KEYWORDS.contains(&word.as_str());
            if !skip && !out.contains(&word) {
                out.push(word.clone());
            }
            prev_word = word;
            prev = 'a';
            continue;
        }
        if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            prev = '0';
            continue;
        }
        if !c.is_whitespace() {
            prev = c;
            prev_word.clear();
        }
        i += 1;
    }
    out
}

/// A template's variables: minijinja's, plus state fields the scan finds
/// in its `{{ }}` / `{% %}` parts (names the template binds itself, loop
/// variables, are not fields, so adding only fields keeps them out).
pub(crate) fn with_scanned(
    mut vars: std::collections::HashSet<String>,
    text: &str,
    schema: Option<&StateSchema>,
) -> std::collections::HashSet<String> {
    let Some(schema) = schema else { return vars };
    let mut rest = text;
    while let Some(start) = rest.find(['{']) {
        let after = &rest[start + 1..];
        let close = match after.chars().next() {
            Some('{') => "}}",
            Some('%') => "%}",
            _ => {
                rest = after;
                continue;
            }
        };
        let body = &after[1..];
        let end = body.find(close).unwrap_or(body.len());
        for n in scan_names(&body[..end]) {
            if schema.field(&n).is_some() {
                vars.insert(n);
            }
        }
        rest = &body[end..];
    }
    vars
}

// ---- filters ----

/// `url | host`: the host of a URL without `www.` (`""` if it has none).
fn host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = host.split(':').next().unwrap_or_default();
    host.trim_start_matches("www.").to_ascii_lowercase()
}

/// `text | chunks(600)`: the text cut into passages of at most `size`
/// characters, at paragraph, then sentence, then word boundaries.
fn chunks(text: &str, size: Option<usize>) -> Vec<String> {
    let size = size.unwrap_or(600).max(40);
    let mut out = Vec::new();
    let mut current = String::new();
    let pieces = text
        .split("\n\n")
        .flat_map(|p| p.split_inclusive(['.', '!', '?']))
        .map(str::trim)
        .filter(|p| !p.is_empty());
    for piece in pieces {
        for word_run in split_long(piece, size) {
            if !current.is_empty() && current.chars().count() + 1 + word_run.chars().count() > size
            {
                out.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(&word_run);
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// A piece longer than `size` split at word boundaries.
fn split_long(piece: &str, size: usize) -> Vec<String> {
    if piece.chars().count() <= size {
        return vec![piece.to_owned()];
    }
    let mut out = Vec::new();
    let mut current = String::new();
    for word in piece.split_whitespace() {
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > size {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `lists | flatten`: one list of the lists' items (other items kept).
fn flatten(value: Mv) -> Result<Mv, Error> {
    let mut out = Vec::new();
    for item in value.try_iter()? {
        if item.kind() == ValueKind::Seq {
            out.extend(item.try_iter()?);
        } else {
            out.push(item);
        }
    }
    Ok(Mv::from(out))
}

/// `lists | interleave`: the first item of each list, then the second of
/// each, and so on.
fn interleave(value: Mv) -> Result<Mv, Error> {
    let lists: Vec<Vec<Mv>> = value
        .try_iter()?
        .map(|l| l.try_iter().map(Iterator::collect).unwrap_or_default())
        .collect();
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::new();
    for i in 0..longest {
        for l in &lists {
            if let Some(v) = l.get(i) {
                out.push(v.clone());
            }
        }
    }
    Ok(Mv::from(out))
}

/// `object | merge(other)`: `object` with `other`'s properties (which win).
fn merge(a: Mv, b: Mv) -> Result<Mv, Error> {
    match (to_json(&a), to_json(&b)) {
        (Value::Object(mut x), Value::Object(y)) => {
            x.extend(y);
            Ok(from_json(&Value::Object(x)))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            "merge needs two objects",
        )),
    }
}

/// `value | wrap(key)`: `{key: value}`.
fn wrap(value: Mv, key: &str) -> Mv {
    let mut m = serde_json::Map::new();
    m.insert(key.to_owned(), to_json(&value));
    from_json(&Value::Object(m))
}

/// `items | newest_json(budget)`: the newest items of a list, newest
/// first, each as compact JSON, as many as fit in `budget` characters; the
/// one that crosses the budget is cut (ending in `…`) when at least 20
/// characters are left or it is the newest, and the rest left out. For giving a prompt the latest tool results without overflowing it.
fn newest_json(items: Mv, budget: usize) -> Result<Vec<String>, Error> {
    let Value::Array(items) = to_json(&items) else {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "newest_json needs a list",
        ));
    };
    let mut left = budget;
    let mut out = Vec::new();
    for item in items.iter().rev() {
        if left == 0 {
            break;
        }
        let text = item.to_string();
        let len = text.chars().count();
        if len <= left {
            left -= len;
            out.push(text);
        } else {
            // A cut item is worth it only with some room left (the newest
            // one is always given, however cut).
            if out.is_empty() || left >= 20 {
                out.push(format!("{}…", text.chars().take(left).collect::<String>()));
            }
            break;
        }
    }
    Ok(out)
}

/// `text | fromjson`: the JSON a string holds (`none` if it holds none).
fn fromjson(text: &str) -> Mv {
    serde_json::from_str::<Value>(text).map_or(Mv::from(()), |v| from_json(&v))
}

/// `items | weighted(relevance=0.3, authority=0.3, …)`: each item (an
/// object) with a `score`: the weighted sum of the named numeric attributes
/// (missing ones count 0), divided by the sum of the weights.
fn weighted(items: Mv, weights: Kwargs) -> Result<Mv, Error> {
    let names: Vec<&str> = weights.args().collect();
    let mut ws = Vec::new();
    for name in &names {
        let w: f64 = weights.get(name)?;
        ws.push((*name, w));
    }
    weights.assert_all_used()?;
    let total: f64 = ws.iter().map(|(_, w)| w).sum();
    if total <= 0.0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "weights must add up to more than 0",
        ));
    }
    let mut out = Vec::new();
    for item in items.try_iter()? {
        let json = to_json(&item);
        let Value::Object(mut map) = json else {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "weighted needs a list of objects",
            ));
        };
        let score: f64 = ws
            .iter()
            .map(|(k, w)| map.get(*k).and_then(Value::as_f64).unwrap_or(0.0) * w)
            .sum::<f64>()
            / total;
        map.insert(
            "score".into(),
            serde_json::json!((score * 1000.0).round() / 1000.0),
        );
        out.push(from_json(&Value::Object(map)));
    }
    Ok(Mv::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{DeclaredState, FieldSpec, TypeSpec};
    use serde_json::json;

    fn schema() -> Arc<StateSchema> {
        Arc::new(StateSchema::new(
            "s",
            vec![
                FieldSpec::new("coverage", TypeSpec::number()),
                FieldSpec::new("iteration", TypeSpec::integer()),
                FieldSpec::new("sources", TypeSpec::array(TypeSpec::object())),
            ],
        ))
    }

    fn compile(src: &str, extra: &[&str]) -> Result<Expr, Vec<String>> {
        let schema = schema();
        let mut d = Diagnostics::new("g.yaml");
        let scope = Scope {
            schema: Some(&schema),
            extra,
            typed: &[],
        };
        Expr::compile(
            &Sp::new(src.to_owned(), Loc::new(3, 9)),
            "route",
            scope,
            &mut d,
        )
        .ok_or_else(|| d.into_vec().iter().map(ToString::to_string).collect())
    }

    #[test]
    fn newest_json_keeps_the_newest_within_the_budget() {
        let items = from_json(&serde_json::json!([{"a": 1}, {"b": 2}, {"c": "long text here"}]));
        assert_eq!(
            newest_json(items.clone(), 1000).unwrap(),
            vec![r#"{"c":"long text here"}"#, r#"{"b":2}"#, r#"{"a":1}"#]
        );
        let cut = newest_json(items.clone(), 30).unwrap();
        assert_eq!(
            cut,
            vec![
                r#"{"c":"long text here"}"#.to_owned(),
                r#"{"b":2}"#.to_owned()
            ]
        );
        let cut = newest_json(items, 10).unwrap();
        assert_eq!(cut, vec![r#"{"c":"long…"#.to_owned()]);
        assert!(newest_json(Mv::from(3), 10).is_err());
    }

    #[test]
    fn expressions_are_checked_at_load_and_evaluated_on_the_state() {
        let e = compile("coverage < 0.7 and iteration < 3", &[]).unwrap();
        let schema = schema();
        let mut s = DeclaredState::new(Arc::clone(&schema));
        s.apply(FieldId(0), &json!(0.5)).unwrap();
        assert_eq!(e.eval_json(&s, &[]).unwrap(), json!(true));
        s.apply(FieldId(1), &json!(3)).unwrap();
        assert_eq!(e.eval_json(&s, &[]).unwrap(), json!(false));
        let err = compile("coverge < 0.7", &[]).unwrap_err();
        assert!(
            err[0].starts_with("g.yaml:3:9: error[expression-variable]"),
            "{err:?}"
        );
        assert!(err[0].contains("did you mean `coverage`"), "{err:?}");
        let err = compile("sourcs[:3]", &[]).unwrap_err();
        assert!(
            err[0].contains("reads `sourcs`"),
            "a slice's base is a variable too: {err:?}"
        );
        let err = compile("coverage <", &[]).unwrap_err();
        assert!(err[0].contains("expression-syntax"), "{err:?}");
        assert!(compile("item.url | host", &["item"]).is_ok());
    }

    #[test]
    fn value_expressions_keep_types_and_templates_render_text() {
        let schema = schema();
        let mut d = Diagnostics::new("g.yaml");
        let scope = Scope {
            schema: Some(&schema),
            extra: &["item"],
            typed: &[],
        };
        let mut s = DeclaredState::new(Arc::clone(&schema));
        s.apply(
            FieldId(2),
            &json!([{"url": "https://www.Example.org/a", "relevance": 1.0, "authority": 0.5}]),
        )
        .unwrap();
        let typed = ValueExpr::compile(
            &json!("{{ sources | length }}"),
            Loc::default(),
            "x",
            scope,
            &mut d,
        )
        .unwrap();
        assert_eq!(typed.eval(&s, &[]).unwrap(), json!(1));
        let text = ValueExpr::compile(
            &json!("n={{ iteration }}"),
            Loc::default(),
            "x",
            scope,
            &mut d,
        )
        .unwrap();
        assert_eq!(text.eval(&s, &[]).unwrap(), json!("n=0"));
        let lit = ValueExpr::compile(&json!("plain"), Loc::default(), "x", scope, &mut d).unwrap();
        assert_eq!(lit.eval(&s, &[]).unwrap(), json!("plain"));
        let scored = ValueExpr::compile(
            &json!("{{ sources | weighted(relevance=0.5, authority=0.5) | map(attribute='score') | list }}"),
            Loc::default(),
            "x",
            scope,
            &mut d,
        )
        .unwrap();
        assert_eq!(scored.eval(&s, &[]).unwrap(), json!([0.75]));
        let hosts = ValueExpr::compile(
            &json!("{{ sources | map(attribute='url') | map('host') | list }}"),
            Loc::default(),
            "x",
            scope,
            &mut d,
        )
        .unwrap();
        assert_eq!(hosts.eval(&s, &[]).unwrap(), json!(["example.org"]));
        assert!(d.into_vec().is_empty());
    }

    #[test]
    fn the_scan_finds_variables_not_attributes_filters_or_keywords() {
        assert_eq!(
            scan_names(
                "(results | map(attribute='output.results') | list)[:5] if x.y is defined and not z else w[0]"
            ),
            ["results", "x", "z", "w"]
        );
        assert_eq!(scan_names("'quoted name' ~ \"another\" ~ n"), ["n"]);
    }

    #[test]
    fn chunks_cut_at_boundaries() {
        let text = "One sentence here. Another one follows!\n\nA new paragraph that is rather long indeed.";
        let c = chunks(text, Some(45));
        assert!(c.iter().all(|p| p.chars().count() <= 45), "{c:?}");
        assert_eq!(c.join(" "), text.replace("\n\n", " "));
        assert_eq!(
            host("http://user@sub.example.com:8080/x?y"),
            "sub.example.com"
        );
    }
}
