//! `research_passages` (the process step): the pages read, cut into
//! passages.
//!
//! A page counts when its fetch succeeded with a status below 400 and some
//! text; any other page — a tool failure (timeout, refused host), an HTTP
//! error, an empty page — is skipped with a note saying why. Passages are
//! at most `max_chars` long (see [`passages`](super::text::passages)), so a
//! fact quoted from one stays short. The same page reached through two
//! URLs (a redirect) is read once.
//!
//! Reads `pages`; writes `passages`. Params: `max_chars` (100–4000,
//! default 600).

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::{Value, json};

use super::FieldType;
use super::text::{arg, canonical_url, error, output, passages};
use super::{Field, params, within};
use crate::nodes::{BuildCx, NodeContext, NodeError};
use crate::state::{Passage, Patch};

/// `params` of `research_passages`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    max_chars: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { max_chars: 600 }
    }
}

/// The page cutter.
#[derive(Debug)]
pub struct Passages {
    pages: Field,
    passages: Field,
    max_chars: usize,
}

impl Passages {
    pub(super) fn build(cx: &mut BuildCx<'_>) -> Option<Self> {
        cx.accept(&["params"]);
        let p = params::<Params>(cx, |p| within("max_chars", p.max_chars, 100..=4000));
        let pages = Field::read(cx, "pages", FieldType::List);
        let passages = Field::write(cx, "passages", FieldType::List);
        Some(Self {
            pages: pages?,
            passages: passages?,
            max_chars: p?.max_chars,
        })
    }

    pub(super) async fn run(&self, cx: NodeContext<'_>) -> Result<Patch, NodeError> {
        let pages = self.pages.get::<Vec<Value>>(cx.state)?;
        let mut out: Vec<Passage> = Vec::new();
        let mut seen = HashSet::new();
        let mut read = 0;
        let mut skipped = Vec::new();
        for record in pages.iter() {
            let requested = arg(record, "url").unwrap_or("");
            let Some(page) = output(record) else {
                skipped.push(format!(
                    "{requested} ({})",
                    error(record).unwrap_or("failed")
                ));
                continue;
            };
            let url = page["url"].as_str().unwrap_or(requested);
            let status = page["status"].as_u64().unwrap_or(200);
            let text = page["text"].as_str().unwrap_or("");
            if status >= 400 {
                skipped.push(format!("{url} (HTTP {status})"));
                continue;
            }
            if text.trim().is_empty() {
                skipped.push(format!("{url} (no readable text)"));
                continue;
            }
            if !seen.insert(canonical_url(url)) {
                continue;
            }
            read += 1;
            let title = page["title"]
                .as_str()
                .filter(|t| !t.trim().is_empty())
                .unwrap_or(url);
            out.extend(
                passages(text, self.max_chars)
                    .into_iter()
                    .enumerate()
                    .map(|(i, text)| Passage {
                        url: url.to_owned(),
                        title: title.trim().to_owned(),
                        index: i as u32,
                        text,
                    }),
            );
        }
        let mut note = format!(
            "Read {read} page{} into {} passage{}",
            if read == 1 { "" } else { "s" },
            out.len(),
            if out.len() == 1 { "" } else { "s" }
        );
        if !skipped.is_empty() {
            note.push_str(&format!(
                "; skipped {}: {}",
                skipped.len(),
                skipped.join(", ")
            ));
        }
        note.push('.');
        cx.events.thinking(note).await;
        Ok(Patch::new().set(self.passages.name(), json!(out)))
    }
}
