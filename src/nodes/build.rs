//! The build half of node kinds: resolving a node's settings against the
//! state schema, the prompts and the tool registry, with diagnostics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{NodeContext, NodeError};
use crate::graph::CompiledGraph;
use crate::graph::diagnostic::{Diagnostics, name_hint};
use crate::graph::loc::{Loc, Sp};
use crate::graph::prompts::Prompts;
use crate::graph::spec::NodeSpec;
use crate::state::{FieldId, FieldSpec, StateSchema, StateTypes};
use crate::tools::ToolRegistry;

/// A setting was wrong and its diagnostic has been reported: the node
/// does not build, and the caller has nothing more to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reported;

/// Everything a kind's `build` can consult, and where it reports problems.
pub struct BuildCx<'a> {
    /// The node's spec.
    pub node: &'a NodeSpec,
    /// The graph's state schema (`None` if the state type is unknown; that
    /// is reported once and field checks are skipped).
    pub schema: Option<&'a StateSchema>,
    /// The catalog's prompts.
    pub prompts: &'a Prompts,
    /// Tools available.
    pub tools: &'a ToolRegistry,
    /// Graphs compiled so far (for subgraphs).
    pub graphs: &'a BTreeMap<String, Arc<CompiledGraph>>,
    /// Registered state types (for subgraphs).
    pub states: &'a StateTypes,
    /// Whether a map edge targets this node (its prompt may use `item`).
    pub is_map_target: bool,
    /// Tools and partitions the graph file says configuration provides
    /// (`external_tools:`): accepted in `tools` though no registry knows them.
    pub external_tools: &'a [String],
    diags: &'a mut Diagnostics,
    pub(crate) writes: Vec<FieldId>,
    pub(crate) prompts_used: BTreeSet<String>,
}

impl<'a> BuildCx<'a> {
    /// A context for one node.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        node: &'a NodeSpec,
        schema: Option<&'a StateSchema>,
        prompts: &'a Prompts,
        tools: &'a ToolRegistry,
        graphs: &'a BTreeMap<String, Arc<CompiledGraph>>,
        states: &'a StateTypes,
        is_map_target: bool,
        diags: &'a mut Diagnostics,
    ) -> Self {
        Self {
            node,
            schema,
            prompts,
            tools,
            graphs,
            states,
            is_map_target,
            external_tools: &[],
            diags,
            writes: Vec::new(),
            prompts_used: BTreeSet::new(),
        }
    }

    fn kind(&self) -> &str {
        &self.node.kind.value
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

    /// Rejects kind settings other than `allowed` that the node sets.
    pub fn accept(&mut self, allowed: &[&str]) {
        for (name, loc) in self.node.present_settings() {
            if !allowed.contains(&name) {
                let kind = self.kind().to_owned();
                let hint = if allowed.is_empty() {
                    format!("kind `{kind}` takes no settings besides the common ones")
                } else {
                    format!("kind `{kind}` accepts: {}", allowed.join(", "))
                };
                self.error(
                    loc,
                    "setting-not-applicable",
                    format!("`{name}` is not a setting of kind `{kind}`"),
                    Some(hint),
                );
            }
        }
    }

    /// Requires a setting.
    pub fn require<'s, T>(&mut self, value: &'s Option<Sp<T>>, name: &str) -> Option<&'s Sp<T>> {
        if value.is_none() {
            let (kind, id) = (self.kind().to_owned(), self.node.id.value.clone());
            self.error(
                self.node.kind.loc,
                "missing-setting",
                format!("node `{id}` of kind `{kind}` needs `{name}`"),
                None,
            );
        }
        value.as_ref()
    }

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

    /// A field the node writes: the setting, or `default` when not set.
    pub fn output(
        &mut self,
        setting: &Option<Sp<String>>,
        default: &str,
        expected: &str,
        check: impl Fn(&FieldSpec) -> bool,
    ) -> Option<FieldId> {
        let name = setting
            .clone()
            .unwrap_or_else(|| Sp::new(default.to_owned(), self.node.kind.loc));
        let id = self.field(&name, expected, check)?;
        self.writes.push(id);
        Some(id)
    }

    /// An optional field the node writes, only when set.
    pub fn optional_output(
        &mut self,
        setting: &Option<Sp<String>>,
        expected: &str,
        check: impl Fn(&FieldSpec) -> bool,
    ) -> Result<Option<FieldId>, Reported> {
        match setting {
            None => Ok(None),
            Some(name) => match self.field(name, expected, check) {
                Some(id) => {
                    self.writes.push(id);
                    Ok(Some(id))
                }
                None => Err(Reported),
            },
        }
    }

    /// A field the node reads: the setting, or `default` when not set.
    pub fn input(&mut self, setting: &Option<Sp<String>>, default: &str) -> Option<FieldId> {
        let name = setting
            .clone()
            .unwrap_or_else(|| Sp::new(default.to_owned(), self.node.kind.loc));
        self.field(&name, "a text field", |f| f.ty.is_string())
    }

    /// The history field and window (`history`, `history_window`).
    pub fn history(&mut self, default_window: u32) -> Result<(Option<FieldId>, usize), Reported> {
        let window = self
            .node
            .history_window
            .as_ref()
            .map_or(default_window, |w| w.value) as usize;
        match &self.node.history {
            None => Ok((None, window)),
            Some(name) => self
                .field(name, "a list of messages", is_messages)
                .map(|f| (Some(f), window))
                .ok_or(Reported),
        }
    }

    /// The model role (default `chat`).
    pub fn role(&self) -> Arc<str> {
        self.node
            .model
            .as_ref()
            .map_or("chat", |m| m.value.as_str())
            .into()
    }

    /// The node's prompt, checked: it exists, parses, and uses only state
    /// fields (and `item` on map targets).
    pub fn prompt(&mut self, required: bool) -> Result<Option<PromptRef>, Reported> {
        let Some(name) = &self.node.prompt else {
            if required {
                let (kind, id) = (self.kind().to_owned(), self.node.id.value.clone());
                self.error(
                    self.node.kind.loc,
                    "missing-setting",
                    format!("node `{id}` of kind `{kind}` needs a `prompt`"),
                    None,
                );
                return Err(Reported);
            }
            return Ok(None);
        };
        let Some(file) = self.prompts.get(&name.value) else {
            let dir = self.prompts.dir().display().to_string();
            let hint = crate::graph::diagnostic::did_you_mean(&name.value, self.prompts.names())
                .unwrap_or_else(|| format!("create {dir}/{}", name.value));
            self.error(
                name.loc,
                "missing-prompt",
                format!("prompt `{}` does not exist in {dir}", name.value),
                Some(hint),
            );
            return Err(Reported);
        };
        self.prompts_used.insert(name.value.clone());
        if let Some(d) = &file.error {
            self.diags.extend(vec![d.clone()]);
            return Err(Reported);
        }
        let mut ok = true;
        let mut vars = Vec::new();
        let mut uses_item = false;
        for var in &file.variables {
            if var == "item" {
                if !self.is_map_target {
                    let (line, col) = self.prompts.locate_variable(&name.value, var);
                    let display = file.display.to_string();
                    self.diags.error_in(
                        &display,
                        Loc::new(line, col),
                        "prompt-variable",
                        format!("prompt `{}` uses `item`, but node `{}` is not the target of a map edge", name.value, self.node.id.value),
                        None,
                    );
                    ok = false;
                }
                uses_item = true;
                continue;
            }
            let Some(schema) = self.schema else { continue };
            match schema.field(var) {
                Some(id) => vars.push((Arc::<str>::from(var.as_str()), id)),
                None => {
                    let (line, col) = self.prompts.locate_variable(&name.value, var);
                    let display = file.display.to_string();
                    self.diags.error_in(
                        &display,
                        Loc::new(line, col),
                        "prompt-variable",
                        format!(
                            "prompt `{}` uses `{var}`, but state `{}` has no such field",
                            name.value, schema.name
                        ),
                        name_hint(var, schema.names().chain(["item"])),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return Err(Reported);
        }
        Ok(Some(PromptRef {
            name: name.value.as_str().into(),
            vars,
            uses_item,
        }))
    }

    /// The tool and partition names the node may call, each checked to be
    /// known to the registry (a partition's tools are looked up per call, so
    /// MCP servers can come and go).
    pub fn tools(&mut self) -> Result<Vec<String>, Reported> {
        let mut out: Vec<String> = Vec::new();
        let mut ok = true;
        for entry in &self.node.tools {
            if self.tools.knows(&entry.value) || self.external_tools.contains(&entry.value) {
                if !out.contains(&entry.value) {
                    out.push(entry.value.clone());
                }
            } else {
                {
                    let partitions = self.tools.partitions();
                    let names = self.tools.names();
                    let candidates: Vec<&str> = names
                        .iter()
                        .map(String::as_str)
                        .chain(partitions.keys().map(String::as_str))
                        .collect();
                    let hint = name_hint(&entry.value, candidates.iter().copied()).or_else(|| {
                        Some(format!(
                            "if configuration provides it (an MCP server), declare it in the graph file: `external_tools: [{}]`",
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
            }
        }
        if ok { Ok(out) } else { Err(Reported) }
    }
}

/// Whether a field holds chat messages (a list with the merge-by-id reducer).
pub(crate) fn is_messages(f: &FieldSpec) -> bool {
    f.ty.is_messages()
}

/// A resolved prompt: the template and the state fields it reads.
#[derive(Debug, Clone)]
pub struct PromptRef {
    name: Arc<str>,
    vars: Vec<(Arc<str>, FieldId)>,
    uses_item: bool,
}

impl PromptRef {
    /// The template name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renders the template with the fields it uses (and `item`).
    ///
    /// # Errors
    /// The template fails at render time.
    pub fn render(&self, cx: &NodeContext<'_>) -> Result<String, NodeError> {
        let mut ctx: std::collections::BTreeMap<&str, minijinja::Value> = self
            .vars
            .iter()
            .map(|(n, f)| (&**n, cx.state.template_value(*f)))
            .collect();
        if self.uses_item {
            ctx.insert(
                "item",
                cx.item
                    .map(minijinja::Value::from_serialize_json)
                    .unwrap_or_default(),
            );
        }
        let ctx = minijinja::Value::from(ctx);
        cx.prompts
            .render(&self.name, ctx)
            .map_err(|e| NodeError::Prompt {
                prompt: self.name.to_string(),
                message: e.to_string(),
            })
    }
}

/// Converts JSON into template values.
trait FromJson {
    fn from_serialize_json(v: &serde_json::Value) -> minijinja::Value;
}

impl FromJson for minijinja::Value {
    fn from_serialize_json(v: &serde_json::Value) -> minijinja::Value {
        minijinja::Value::from(minijinja::value::Serde(v))
    }
}
