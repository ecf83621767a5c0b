//! An application built on stategraph's public API: a custom node kind,
//! registered next to the built-in ones, used by a graph file, and served.
//!
//! ```text
//! cargo run --example custom_kind -- check
//! cargo run --example custom_kind -- run feedback "The delivery was late and the box was broken"
//! cargo run --example custom_kind -- serve      # POST /api/chat with "graph": "feedback"
//! ```
//!
//! The kind, `lexicon`, scores a text field against word lists given in the
//! node's settings — logic a graph file cannot express in an expression, so
//! it is Rust; everything else (state, routing, prompts, the answer) is the
//! graph file `graphs/feedback.yaml`. Its settings are checked when the
//! graph loads, like a built-in kind's: a misspelt field or a non-number
//! field is a `check` error with file:line:col.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;
use stategraph::{
    BuildCx, FieldId, Kind, Node, NodeContext, NodeError, Patch, Registries, SettingDoc, Surface,
    schema,
};

fn main() -> ExitCode {
    let mut registries = Registries::default();
    registries.kinds.register(lexicon_kind());
    stategraph::cli::App::new(registries)
        .graphs_dir(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/custom_kind/graphs"
        ))
        .prompts_dir(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/custom_kind/prompts"
        ))
        .main()
}

/// The settings of `lexicon` (shown by `stategraph schema` and editors).
const SETTINGS: &[SettingDoc] = &[
    SettingDoc::new("input", schema::FIELD, "the text field to score"),
    SettingDoc::new(
        "output",
        schema::FIELD,
        "the number field receiving the score, -1 to 1",
    ),
    SettingDoc::new("positive", schema::NAMES, "words that count +1"),
    SettingDoc::new("negative", schema::NAMES, "words that count -1"),
];

/// The kind's table entry: its name, documentation, settings and how a node
/// is built from a graph file's entry.
fn lexicon_kind() -> Kind {
    Kind::new(
        "lexicon",
        "Scores a text field against positive and negative word lists (-1 to 1).",
        SETTINGS,
        Surface::Hidden,
        build,
    )
}

/// Builds a node; every problem is reported with its place and the node
/// is not built (`None`).
fn build(cx: &mut BuildCx<'_>) -> Option<Arc<dyn Node>> {
    let input = match cx.text_input("input") {
        Ok(Some(f)) => f,
        Ok(None) => {
            let (loc, id) = (cx.kind_loc(), cx.id().to_owned());
            cx.error(
                loc,
                "missing-setting",
                format!("node `{id}` needs `input:`"),
                None,
            );
            return None;
        }
        Err(_) => return None,
    };
    let (_, output) = cx.output("output", "score", "a number field", |f| f.ty.is_number())?;
    let words = |cx: &mut BuildCx<'_>, name| -> Option<HashSet<String>> {
        let names = cx.names(name).ok()?;
        Some(names.into_iter().map(|w| w.value.to_lowercase()).collect())
    };
    let positive = words(cx, "positive")?;
    let negative = words(cx, "negative")?;
    Some(Arc::new(Lexicon {
        input,
        output,
        positive,
        negative,
    }))
}

/// A `lexicon` node.
#[derive(Debug)]
struct Lexicon {
    input: FieldId,
    output: Arc<str>,
    positive: HashSet<String>,
    negative: HashSet<String>,
}

impl Lexicon {
    /// (positive − negative) / matched words; 0 when none matched.
    fn score(&self, text: &str) -> (f64, Vec<String>) {
        let (mut sum, mut hits) = (0i32, Vec::new());
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .map(str::to_lowercase)
        {
            if self.positive.contains(&word) {
                sum += 1;
                hits.push(word);
            } else if self.negative.contains(&word) {
                sum -= 1;
                hits.push(word);
            }
        }
        let score = if hits.is_empty() {
            0.0
        } else {
            f64::from(sum) / hits.len() as f64
        };
        (score, hits)
    }
}

impl Node for Lexicon {
    fn run<'a>(&'a self, cx: NodeContext<'a>) -> BoxFuture<'a, Result<Patch, NodeError>> {
        Box::pin(async move {
            let text = cx.state.text(self.input).unwrap_or_default();
            let (score, hits) = self.score(text);
            // A data part on the chat stream (`data-lexicon`), and in the log.
            cx.events
                .custom("lexicon", json!({"score": score, "words": hits}))
                .await;
            Ok(Patch::new().set(Arc::clone(&self.output), score))
        })
    }
}
