//! The kind table: every built-in kind (one file each, one entry in
//! `BUILTIN`) and the kinds an embedding application registers.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::{BuildCx, Node};
use crate::graph::kinds::schema;
use crate::graph::spec::Surface;
use crate::graph::{KindInfo, NodeKinds, SettingDoc};

/// Builds a node of a kind from its settings; `None` when they are wrong
/// (reported through the context).
pub(crate) type BuildFn = dyn Fn(&mut BuildCx<'_>) -> Option<Arc<dyn Node>> + Send + Sync;

/// A node kind: its name, what it accepts and how it builds.
#[derive(Clone)]
pub struct Kind {
    /// The name graph files use in `kind:`.
    pub name: String,
    /// What it does (shown by `stategraph schema` and editors).
    pub doc: String,
    /// The settings it accepts (it reads them in `build`).
    pub settings: Vec<SettingDoc>,
    /// Where its streamed output goes unless the node says otherwise.
    pub default_surface: Surface,
    /// Builds a node.
    pub build: Arc<BuildFn>,
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kind")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Kind {
    /// A kind.
    pub fn new(
        name: impl Into<String>,
        doc: impl Into<String>,
        settings: &[SettingDoc],
        default_surface: Surface,
        build: impl Fn(&mut BuildCx<'_>) -> Option<Arc<dyn Node>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            doc: doc.into(),
            settings: settings.to_vec(),
            default_surface,
            build: Arc::new(build),
        }
    }

    /// A kind whose nodes are made from their free-form `params:` setting
    /// (`null` when absent); `factory` explains what is wrong with them.
    pub fn from_params(
        name: impl Into<String>,
        doc: impl Into<String>,
        factory: impl Fn(&Value) -> Result<Arc<dyn Node>, String> + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        let kind = name.clone();
        Self::new(
            name,
            doc,
            &[SettingDoc::new(
                "params",
                schema::ANY,
                "parameters of this kind",
            )],
            Surface::Hidden,
            move |cx| {
                let params = cx.json("params");
                let value = params.as_ref().map_or(Value::Null, |p| p.value.clone());
                match factory(&value) {
                    Ok(node) => Some(node),
                    Err(message) => {
                        let loc = params.as_ref().map_or(cx.kind_loc(), |p| p.loc);
                        let id = cx.id().to_owned();
                        cx.error(
                            loc,
                            "invalid-params",
                            format!("node `{id}` of kind `{kind}`: {message}"),
                            None,
                        );
                        None
                    }
                }
            },
        )
    }
}

/// The built-in kinds.
pub(super) const BUILTIN: &[fn() -> Kind] = &[
    super::agent::kind,
    super::followup::kind,
    super::http::kind,
    super::interrupt::kind,
    super::llm::kind,
    super::noop::kind,
    super::router::kind,
    super::set::kind,
    super::subgraph::kind,
    super::summarizer::kind,
    super::tool::kind,
];

/// The kinds graph files can use: the built-in ones and any registered.
#[derive(Clone, Debug)]
pub struct Kinds {
    table: BTreeMap<String, Kind>,
}

impl Default for Kinds {
    /// The built-in kinds.
    fn default() -> Self {
        let table = BUILTIN
            .iter()
            .map(|k| k())
            .map(|k| (k.name.clone(), k))
            .collect();
        Self { table }
    }
}

impl Kinds {
    /// Adds (or replaces) a kind.
    pub fn register(&mut self, kind: Kind) -> &mut Self {
        self.table.insert(kind.name.clone(), kind);
        self
    }

    /// Adds a kind whose nodes are made from their `params:` setting (see
    /// [`Kind::from_params`]).
    pub fn register_fn(
        &mut self,
        name: impl Into<String>,
        factory: impl Fn(&Value) -> Result<Arc<dyn Node>, String> + Send + Sync + 'static,
    ) -> &mut Self {
        let name = name.into();
        self.register(Kind::from_params(
            name.clone(),
            format!("Rust kind `{name}`"),
            factory,
        ))
    }

    /// A kind by name.
    pub fn get(&self, name: &str) -> Option<&Kind> {
        self.table.get(name)
    }
}

impl NodeKinds for Kinds {
    type Node = Arc<dyn Node>;

    fn info(&self, name: &str) -> Option<KindInfo<'_>> {
        self.table.get(name).map(|k| KindInfo {
            name: &k.name,
            doc: &k.doc,
            settings: &k.settings,
            default_surface: k.default_surface,
        })
    }

    fn names(&self) -> Vec<&str> {
        self.table.keys().map(String::as_str).collect()
    }

    fn build(&self, name: &str, cx: &mut BuildCx<'_>) -> Option<Arc<dyn Node>> {
        let kind = self.table.get(name)?;
        (kind.build)(cx)
    }
}
