//! What a node kind's `build` sees: the node's settings, read with their
//! locations, and every name they use resolved against the state schema,
//! the prompts and the tools — problems reported as diagnostics.
//!
//! A kind reads its settings through the typed accessors ([`BuildCx::string`],
//! [`BuildCx::output`], [`BuildCx::prompt`], …), and declares them in its
//! settings table; compilation reports every key the table does not list as
//! not applicable to the kind (with the accepted settings as the hint). So a
//! kind declares and reads its settings in its own file, and nothing else
//! has to know them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::CompiledGraph;
use super::diagnostic::{Diagnostics, name_hint};
use super::expr::{Expr, Scope, ValueExpr};
use super::loc::{Loc, Sp};
use super::prompts::Prompts;
use super::spec::{NodeSpec, SpMap};
use super::value::{SpEntry, SpValue};
use crate::state::{FieldId, FieldSpec, StateSchema, TypeSpec};
use crate::tools::ToolRegistry;
use crate::units::Dur;

mod prompt;
pub(crate) use prompt::PromptRef;

/// A setting was wrong and its diagnostic has been reported: the node
/// does not build, and the caller has nothing more to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reported;

/// Everything a kind's `build` can consult, and where it reports problems.
/// `N` is the compiled node type (see [`CompiledGraph`]).
pub struct BuildCx<'a, N> {
    /// The node's spec.
    pub node: &'a NodeSpec,
    /// The graph's state schema (`None` if the state itself is invalid;
    /// that is reported once and field checks are skipped).
    pub schema: Option<&'a StateSchema>,
    /// The catalog's prompts.
    pub prompts: &'a Prompts,
    /// Tools available.
    pub tools: &'a ToolRegistry,
    /// Graphs compiled so far (for subgraphs).
    pub graphs: &'a BTreeMap<String, Arc<CompiledGraph<N>>>,
    /// Whether a map edge targets this node (its settings may use `item`).
    pub is_map_target: bool,
    /// Tools and partitions the graph file says configuration provides
    /// (`external_tools:`): accepted in `tools` though no registry knows them.
    pub external_tools: &'a [String],
    /// The graph file's `config:` values (bound tool arguments read them
    /// as `config.NAME`), if it has any.
    pub config: Option<&'a Value>,
    /// On a map target, the type of one `item`, when the map's `over`
    /// says (its attribute reads are checked against it).
    pub item_type: Option<TypeSpec>,
    diags: &'a mut Diagnostics,
    pub(crate) writes: Vec<FieldId>,
    pub(crate) prompts_used: BTreeSet<String>,
    pub(crate) declared: Option<(FieldId, Vec<String>)>,
    pub(crate) subgraph: Option<Arc<CompiledGraph<N>>>,
    pub(crate) tools_used: Vec<String>,
    pub(crate) client_tools: Vec<String>,
    pub(crate) surface: Option<super::spec::Surface>,
}

impl<'a, N> BuildCx<'a, N> {
    /// A context for one node.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        node: &'a NodeSpec,
        schema: Option<&'a StateSchema>,
        prompts: &'a Prompts,
        tools: &'a ToolRegistry,
        graphs: &'a BTreeMap<String, Arc<CompiledGraph<N>>>,
        is_map_target: bool,
        external_tools: &'a [String],
        diags: &'a mut Diagnostics,
    ) -> Self {
        Self {
            node,
            schema,
            prompts,
            tools,
            graphs,
            is_map_target,
            external_tools,
            config: None,
            item_type: None,
            diags,
            writes: Vec::new(),
            prompts_used: BTreeSet::new(),
            declared: None,
            subgraph: None,
            tools_used: Vec::new(),
            client_tools: Vec::new(),
            surface: None,
        }
    }

    /// The node's id.
    pub fn id(&self) -> &'a str {
        &self.node.id.value
    }

    /// Where the node's kind is written (for problems with no better place).
    pub fn kind_loc(&self) -> Loc {
        self.node.kind.loc
    }

    /// Reports an error.
    pub fn error(
        &mut self,
        loc: Loc,
        code: &'static str,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.diags.error(loc, code, message, hint);
    }

    /// Reports a warning.
    pub fn warning(
        &mut self,
        loc: Loc,
        code: &'static str,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.diags.warning(loc, code, message, hint);
    }

    /// The diagnostics (for helpers that report directly).
    pub fn diagnostics(&mut self) -> &mut Diagnostics {
        self.diags
    }

    // ---- raw settings ----

    /// The setting `name`. (Keys a kind does not declare in its settings
    /// table are reported by compilation as not applicable.)
    pub fn setting(&mut self, name: &str) -> Option<&'a Sp<SpValue>> {
        self.node
            .settings
            .iter()
            .find(|(k, _)| k.value == name)
            .map(|(_, v)| v)
    }

    fn wrong(&mut self, name: &str, v: &Sp<SpValue>, expected: &str) -> Reported {
        self.error(
            v.loc,
            "invalid-setting",
            format!("`{name}` must be {expected}, not {}", v.value.kind()),
            None,
        );
        Reported
    }

    /// A string setting.
    ///
    /// # Errors
    /// It is there but not a string (reported).
    pub fn string(&mut self, name: &str) -> Result<Option<Sp<String>>, Reported> {
        match self.setting(name) {
            None => Ok(None),
            Some(v) => match &v.value {
                SpValue::Str(s) => Ok(Some(Sp::new(s.clone(), v.loc))),
                _ => Err(self.wrong(name, v, "a string")),
            },
        }
    }

    /// A required string setting.
    ///
    /// # Errors
    /// It is missing or not a string (reported).
    pub fn require_string(&mut self, name: &str) -> Result<Sp<String>, Reported> {
        match self.string(name)? {
            Some(s) => Ok(s),
            None => {
                let (id, kind) = (self.id().to_owned(), self.node.kind.value.clone());
                self.error(
                    self.kind_loc(),
                    "missing-setting",
                    format!("node `{id}` of kind `{kind}` needs `{name}`"),
                    None,
                );
                Err(Reported)
            }
        }
    }

    /// A whole-number setting in `range`, or `default`.
    ///
    /// # Errors
    /// Not a whole number, or out of range (reported).
    pub fn integer(
        &mut self,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
        default: i64,
    ) -> Result<i64, Reported> {
        let Some(v) = self.setting(name) else {
            return Ok(default);
        };
        match v.value {
            SpValue::Int(i) if range.contains(&i) => Ok(i),
            SpValue::Int(_) => {
                self.error(
                    v.loc,
                    "invalid-setting",
                    format!(
                        "`{name}` must be between {} and {}",
                        range.start(),
                        range.end()
                    ),
                    None,
                );
                Err(Reported)
            }
            _ => Err(self.wrong(name, v, "a whole number")),
        }
    }

    /// A number setting in `range`, or `default`.
    ///
    /// # Errors
    /// Not a number, or out of range (reported).
    pub fn number(
        &mut self,
        name: &str,
        range: std::ops::RangeInclusive<f64>,
        default: f64,
    ) -> Result<f64, Reported> {
        let Some(v) = self.setting(name) else {
            return Ok(default);
        };
        let n = match v.value {
            SpValue::Int(i) => i as f64,
            SpValue::Float(f) => f,
            _ => return Err(self.wrong(name, v, "a number")),
        };
        if !range.contains(&n) {
            self.error(
                v.loc,
                "invalid-setting",
                format!(
                    "`{name}` must be between {} and {}",
                    range.start(),
                    range.end()
                ),
                None,
            );
            return Err(Reported);
        }
        Ok(n)
    }

    /// A boolean setting, or `default`.
    ///
    /// # Errors
    /// Not a boolean (reported).
    pub fn boolean(&mut self, name: &str, default: bool) -> Result<bool, Reported> {
        match self.setting(name) {
            None => Ok(default),
            Some(v) => match v.value {
                SpValue::Bool(b) => Ok(b),
                _ => Err(self.wrong(name, v, "true or false")),
            },
        }
    }

    /// A duration setting (`30s`, `500ms`).
    ///
    /// # Errors
    /// Not a duration (reported).
    pub fn duration(&mut self, name: &str) -> Result<Option<Sp<std::time::Duration>>, Reported> {
        let Some(v) = self.setting(name) else {
            return Ok(None);
        };
        let parsed = match &v.value {
            SpValue::Int(ms) if *ms >= 0 => Some(std::time::Duration::from_millis(*ms as u64)),
            SpValue::Str(s) => Dur::parse(s),
            _ => None,
        };
        match parsed {
            Some(d) => Ok(Some(Sp::new(d, v.loc))),
            None => Err(self.wrong(name, v, "a duration such as 500ms, 30s or 2m")),
        }
    }

    /// A name or a list of names.
    ///
    /// # Errors
    /// Anything else (reported).
    pub fn names(&mut self, name: &str) -> Result<Vec<Sp<String>>, Reported> {
        let Some(v) = self.setting(name) else {
            return Ok(Vec::new());
        };
        match &v.value {
            SpValue::Seq(items) => items
                .iter()
                .map(|i| match i.value.as_name() {
                    Some(s) => Ok(Sp::new(s, i.loc)),
                    None => Err(self.wrong(name, i, "a list of names")),
                })
                .collect(),
            other => match other.as_name() {
                Some(s) => Ok(vec![Sp::new(s, v.loc)]),
                None => Err(self.wrong(name, v, "a name or a list of names")),
            },
        }
    }

    /// A mapping of names to names.
    ///
    /// # Errors
    /// Anything else (reported).
    pub fn name_map(&mut self, name: &str) -> Result<Option<SpMap>, Reported> {
        let Some(v) = self.setting(name) else {
            return Ok(None);
        };
        let SpValue::Map(entries) = &v.value else {
            return Err(self.wrong(name, v, "a mapping of names"));
        };
        let mut out = SpMap {
            loc: v.loc,
            entries: Vec::new(),
        };
        for (k, val) in entries {
            match val.value.as_name() {
                Some(s) => out.entries.push((k.clone(), Sp::new(s, val.loc))),
                None => return Err(self.wrong(&format!("{name}.{}", k.value), val, "a name")),
            }
        }
        Ok(Some(out))
    }

    /// A mapping, entries with their places.
    ///
    /// # Errors
    /// Not a mapping (reported).
    pub fn mapping(&mut self, name: &str) -> Result<Option<&'a [SpEntry]>, Reported> {
        match self.setting(name) {
            None => Ok(None),
            Some(v) => match &v.value {
                SpValue::Map(entries) => Ok(Some(entries)),
                _ => Err(self.wrong(name, v, "a mapping")),
            },
        }
    }

    /// Any value, as JSON.
    pub fn json(&mut self, name: &str) -> Option<Sp<Value>> {
        self.setting(name)
            .map(|v| Sp::new(v.value.to_json(), v.loc))
    }

    // ---- fields ----

    /// Resolves a state field named in the file; `check` tells whether its
    /// type suits the use (`expected` describes it for the message).
    pub fn field(
        &mut self,
        name: &Sp<String>,
        expected: &str,
        check: impl Fn(&FieldSpec) -> bool,
    ) -> Option<FieldId> {
        let schema = self.schema?;
        let Some(id) = schema.field(&name.value) else {
            self.error(
                name.loc,
                "unknown-field",
                format!("state `{}` has no field `{}`", schema.name, name.value),
                name_hint(&name.value, schema.names()),
            );
            return None;
        };
        let spec = schema.spec(id);
        if !check(spec) {
            self.error(
                name.loc,
                "field-type",
                format!(
                    "field `{}` is {} but `{}` needs {expected}",
                    name.value,
                    spec.ty.describe(),
                    self.node.id.value
                ),
                None,
            );
            return None;
        }
        Some(id)
    }

    /// Declares that the node writes `field`.
    pub fn writes(&mut self, field: FieldId) {
        if !self.writes.contains(&field) {
            self.writes.push(field);
        }
    }

    /// A field the node writes, named by setting `setting` or `default`;
    /// returns its id and name.
    pub fn output(
        &mut self,
        setting: &str,
        default: &str,
        expected: &str,
        check: impl Fn(&FieldSpec) -> bool,
    ) -> Option<(FieldId, Arc<str>)> {
        let name = match self.string(setting) {
            Ok(Some(n)) => n,
            Ok(None) => Sp::new(default.to_owned(), self.kind_loc()),
            Err(Reported) => return None,
        };
        let id = self.field(&name, expected, check)?;
        self.writes(id);
        Some((id, name.value.as_str().into()))
    }

    /// A field the node writes only when setting `setting` names one.
    ///
    /// # Errors
    /// It names a wrong field (reported).
    pub fn optional_output(
        &mut self,
        setting: &str,
        expected: &str,
        check: impl Fn(&FieldSpec) -> bool,
    ) -> Result<Option<(FieldId, Arc<str>)>, Reported> {
        let Some(name) = self.string(setting)? else {
            return Ok(None);
        };
        let id = self.field(&name, expected, check).ok_or(Reported)?;
        self.writes(id);
        Ok(Some((id, name.value.as_str().into())))
    }

    /// A text field the node reads, named by setting `setting`; `None`
    /// when not set.
    ///
    /// # Errors
    /// It names a wrong field (reported).
    pub fn text_input(&mut self, setting: &str) -> Result<Option<FieldId>, Reported> {
        match self.string(setting)? {
            None => Ok(None),
            Some(name) => self
                .field(&name, "a string field", |f| f.ty.is_string())
                .map(Some)
                .ok_or(Reported),
        }
    }

    /// The history field and window (`history`, `history_window`).
    ///
    /// # Errors
    /// A wrong field or window (reported).
    pub fn history(&mut self, default_window: u32) -> Result<(Option<FieldId>, usize), Reported> {
        let window = self.integer("history_window", 0..=1000, i64::from(default_window))? as usize;
        match self.string("history")? {
            None => Ok((None, window)),
            Some(name) => self
                .field(&name, "a field of type messages", |f| f.ty.is_messages())
                .map(|f| (Some(f), window))
                .ok_or(Reported),
        }
    }

    /// The model role (`model`, default `chat`).
    pub fn role(&mut self) -> Arc<str> {
        match self.string("model") {
            Ok(Some(m)) => m.value.as_str().into(),
            _ => "chat".into(),
        }
    }

    // ---- expressions ----

    /// A setting holding an expression; `extra` are the names it may read
    /// besides state fields (`item` is added on map targets).
    ///
    /// # Errors
    /// Not a string, or not a valid expression (reported).
    pub fn expr(&mut self, name: &str, extra: &[&str]) -> Result<Option<Expr>, Reported> {
        let Some(source) = self.string(name)? else {
            return Ok(None);
        };
        self.compile_expr(&source, name, extra).map(Some)
    }

    /// Compiles an expression written at `source` (setting `what`).
    ///
    /// # Errors
    /// Not a valid expression (reported).
    pub fn compile_expr(
        &mut self,
        source: &Sp<String>,
        what: &str,
        extra: &[&str],
    ) -> Result<Expr, Reported> {
        let extra = self.scope_names(extra);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let typed: Vec<(&str, TypeSpec)> = self
            .item_type
            .clone()
            .filter(|_| self.is_map_target)
            .map(|t| ("item", t))
            .into_iter()
            .collect();
        let scope = Scope {
            schema: self.schema,
            extra: &extra,
            typed: &typed,
        };
        Expr::compile(source, what, scope, self.diags).ok_or(Reported)
    }

    /// A setting value under the literal / `{{ expression }}` / template
    /// rule (see [`ValueExpr`]).
    ///
    /// # Errors
    /// A bad expression or template (reported).
    pub fn value_expr(
        &mut self,
        value: &Sp<SpValue>,
        what: &str,
        extra: &[&str],
    ) -> Result<ValueExpr, Reported> {
        self.value_expr_typed(value, what, extra, &[])
    }

    /// [`BuildCx::value_expr`] where some of `extra`'s names have a
    /// declared type (`result` of a tool with an output schema): their
    /// attribute reads are checked against it.
    ///
    /// # Errors
    /// A bad expression or template, or an attribute its type does not
    /// have (reported).
    pub fn value_expr_typed(
        &mut self,
        value: &Sp<SpValue>,
        what: &str,
        extra: &[&str],
        typed: &[(&str, TypeSpec)],
    ) -> Result<ValueExpr, Reported> {
        let extra = self.scope_names(extra);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut typed = typed.to_vec();
        if let Some(t) = self.item_type.clone().filter(|_| self.is_map_target) {
            typed.push(("item", t));
        }
        let scope = Scope {
            schema: self.schema,
            extra: &extra,
            typed: &typed,
        };
        ValueExpr::compile_tree(value, what, scope, self.diags).ok_or(Reported)
    }

    fn scope_names(&self, extra: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        if self.is_map_target {
            names.push("item".into());
        }
        names
    }

    // ---- prompts and tools ----

    /// The tool and partition names of setting `tools`, each checked to be
    /// known to the registry or declared external (a partition's tools are
    /// looked up per call, so MCP servers can come and go).
    ///
    /// # Errors
    /// An unknown name (reported).
    pub fn tools(&mut self) -> Result<Vec<String>, Reported> {
        let entries = self.names("tools")?;
        self.check_tools(&entries)
    }

    /// [`BuildCx::tools`] for names a kind read itself (an agent's
    /// `tools` also takes `{name, args}` entries).
    ///
    /// # Errors
    /// An unknown name (reported).
    pub fn check_tools(&mut self, entries: &[Sp<String>]) -> Result<Vec<String>, Reported> {
        let mut out: Vec<String> = Vec::new();
        let mut ok = true;
        for entry in entries {
            if let Some(servers) = self.tools.lock_conflict(&entry.value) {
                self.error(
                    entry.loc,
                    "ambiguous-tool",
                    format!(
                        "`{}` is listed by MCP servers {} in {}: which one a run calls depends on which starts first",
                        entry.value,
                        servers.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(" and "),
                        crate::tools::lock::LOCK_FILE
                    ),
                    Some("give one MCP server a `prefix` in stategraph.toml, run `stategraph tools lock` again and name the prefixed tool".into()),
                );
                ok = false;
                continue;
            }
            if self.tools.knows_at_check(&entry.value) || self.external_tools.contains(&entry.value)
            {
                if !out.contains(&entry.value) {
                    out.push(entry.value.clone());
                }
                continue;
            }
            let names = self.tools.names_at_check();
            let hint = super::diagnostic::did_you_mean(
                &entry.value,
                names.iter().map(String::as_str),
            )
            .or_else(|| {
                Some(format!(
                    "if an MCP server provides it, run `stategraph tools lock` with the server configured and commit graphs/{} (or declare it: `external_tools: [{}]`)",
                    crate::tools::lock::LOCK_FILE,
                    entry.value
                ))
            });
            self.error(
                entry.loc,
                "unknown-tool",
                format!(
                    "no tool registry provides `{}` (neither a tool nor a partition)",
                    entry.value
                ),
                hint,
            );
            ok = false;
        }
        for t in &out {
            if !self.tools_used.contains(t) {
                self.tools_used.push(t.clone());
            }
        }
        if ok { Ok(out) } else { Err(Reported) }
    }

    /// Records a tool the node calls (for health checks and the studio).
    pub fn uses_tool(&mut self, name: &str) {
        if !self.tools_used.iter().any(|t| t == name) {
            self.tools_used.push(name.to_owned());
        }
    }

    /// Records a client-side tool the node offers (the front end runs it;
    /// the stream shows its calls as `tool-<name>` parts).
    pub fn client_tool(&mut self, name: &str) {
        if !self.client_tools.iter().any(|t| t == name) {
            self.client_tools.push(name.to_owned());
        }
    }

    // ---- what the compiled graph needs to know ----

    /// Declares the values the node writes to `field` (a router's
    /// intents): conditional edges on that field must map each of them.
    pub fn declare_values(&mut self, field: FieldId, values: Vec<String>) {
        self.declared = Some((field, values));
    }

    /// The surface this node streams to when its `surface:` is not set,
    /// overriding the kind's default (an `llm` answering JSON is hidden).
    pub fn default_surface(&mut self, surface: super::spec::Surface) {
        self.surface = Some(surface);
    }

    /// Declares that the node runs `graph` (its version is part of this
    /// graph's, its tools are this graph's tools).
    pub fn runs_subgraph(&mut self, graph: Arc<CompiledGraph<N>>) {
        self.subgraph = Some(graph);
    }
}
