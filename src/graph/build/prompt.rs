//! The node's prompt: the template it names, checked when the graph
//! loads — it exists, parses, reads only state fields (and `item` on map
//! targets), and reads only attributes their declared types have.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::super::diagnostic::name_hint;
use super::super::loc::Loc;
use super::super::prompts::Prompts;
use super::super::typecheck::{TypeScope, check_template};
use super::{BuildCx, Reported};
use crate::state::{DynState, FieldId};

impl<N> BuildCx<'_, N> {
    /// The node's prompt (`prompt`), checked: it exists, parses, and uses
    /// only state fields (and `item` on map targets).
    ///
    /// # Errors
    /// Missing when `required`, unknown, or using unknown variables (reported).
    pub fn prompt(&mut self, required: bool) -> Result<Option<PromptRef>, Reported> {
        let Some(name) = self.string("prompt")? else {
            if required {
                let (kind, id) = (self.node.kind.value.clone(), self.id().to_owned());
                self.error(
                    self.kind_loc(),
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
            let hint = super::super::diagnostic::did_you_mean(&name.value, self.prompts.names())
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
                    self.prompt_var_error(&name.value, var, &format!(
                        "prompt `{}` uses `item`, but node `{}` is not the target of a map edge",
                        name.value, self.node.id.value
                    ), None);
                    ok = false;
                }
                uses_item = true;
                continue;
            }
            let Some(schema) = self.schema else { continue };
            match schema.field(var) {
                Some(id) => vars.push((Arc::<str>::from(var.as_str()), id)),
                None => {
                    let message = format!(
                        "prompt `{}` uses `{var}`, but state `{}` has no such field",
                        name.value, schema.name
                    );
                    let hint = name_hint(var, schema.names().chain(["item"]));
                    self.prompt_var_error(&name.value, var, &message, hint);
                    ok = false;
                }
            }
        }
        if ok {
            ok = self.prompt_attributes(&name.value, &file.source, &file.display);
        }
        if !ok {
            return Err(Reported);
        }
        // Fields minijinja's analysis misses (the base of a slice).
        for n in super::super::expr::with_scanned(Default::default(), &file.source, self.schema) {
            if !vars.iter().any(|(v, _)| **v == *n)
                && let Some(id) = self.schema.and_then(|s| s.field(&n))
            {
                vars.push((Arc::<str>::from(n.as_str()), id));
            }
        }
        Ok(Some(PromptRef {
            name: name.value.as_str().into(),
            vars,
            uses_item,
        }))
    }

    /// Reports the attribute reads of a prompt its declared types say are
    /// not there, each at its line and column in the prompt file.
    fn prompt_attributes(&mut self, prompt: &str, source: &str, display: &str) -> bool {
        let typed: Vec<(&str, crate::state::TypeSpec)> = self
            .item_type
            .clone()
            .filter(|_| self.is_map_target)
            .map(|t| ("item", t))
            .into_iter()
            .collect();
        let scope = TypeScope {
            schema: self.schema,
            typed: &typed,
        };
        let problems = check_template(source, scope);
        let ok = problems.is_empty();
        for p in problems {
            self.diags.error_in(
                display,
                Loc::new(p.line, p.column),
                "unknown-attribute",
                format!("prompt `{prompt}`: {}", p.message),
                p.hint,
            );
        }
        ok
    }

    fn prompt_var_error(&mut self, prompt: &str, var: &str, message: &str, hint: Option<String>) {
        let (line, col) = self.prompts.locate_variable(prompt, var);
        let display = self
            .prompts
            .get(prompt)
            .map_or_else(|| prompt.to_owned(), |f| f.display.to_string());
        self.diags.error_in(
            &display,
            Loc::new(line, col),
            "prompt-variable",
            message.to_owned(),
            hint,
        );
    }
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
    pub fn render(
        &self,
        prompts: &Prompts,
        state: &dyn DynState,
        item: Option<&Value>,
    ) -> Result<String, minijinja::Error> {
        let mut ctx: BTreeMap<&str, minijinja::Value> = self
            .vars
            .iter()
            .map(|(n, f)| (&**n, state.template_value(*f)))
            .collect();
        if self.uses_item {
            ctx.insert(
                "item",
                item.map(super::super::expr::from_json).unwrap_or_default(),
            );
        }
        prompts.render(&self.name, minijinja::Value::from(ctx))
    }
}
