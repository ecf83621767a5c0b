//! The thinking panel: one `data-thinking` part per task of a `thinking`
//! node (and per note of a hidden one), updated in place under the same
//! id with its text, tool calls, notes and status.

use serde_json::{Value, json};

use super::{Bridge, Chunk};
use crate::events::Event;

/// A thinking-panel part being built.
#[derive(Debug)]
pub(super) struct Thinking {
    pub(super) id: String,
    pub(super) node: String,
    pub(super) kind: String,
    pub(super) status: &'static str,
    pub(super) text: String,
    pub(super) notes: Vec<String>,
    pub(super) tools: Vec<Value>,
    pub(super) started_at: u64,
    pub(super) finished_at: Option<u64>,
    pub(super) last_emit: u64,
    pub(super) dirty: bool,
}

impl Thinking {
    fn payload(&self) -> Value {
        let mut v = json!({
            "node": self.node,
            "kind": self.kind,
            "status": self.status,
            "text": self.text,
            "notes": self.notes,
            "toolCalls": self.tools,
            "startedAt": self.started_at / 1000,
        });
        if let Some(end) = self.finished_at {
            v["durationMs"] = json!(end.saturating_sub(self.started_at) / 1000);
        }
        v
    }

    pub(super) fn tool(&mut self, call_id: &str) -> Option<&mut Value> {
        self.tools.iter_mut().find(|t| t["toolCallId"] == call_id)
    }
}

impl Bridge {
    pub(super) fn thinking_part(&mut self, key: &str, node: &str, ev: &Event) -> &mut Thinking {
        let kind = self.cfg.kind(node).to_owned();
        self.thinking
            .entry(key.to_owned())
            .or_insert_with(|| Thinking {
                id: format!(
                    "thinking-{}-{}-{}",
                    node.replace('/', "-"),
                    ev.step,
                    ev.task
                ),
                node: node.to_owned(),
                kind,
                status: "running",
                text: String::new(),
                notes: Vec::new(),
                tools: Vec::new(),
                started_at: ev.at,
                finished_at: None,
                last_emit: 0,
                dirty: false,
            })
    }

    /// Sends thinking parts with unsent text, in a stable order.
    pub(super) fn flush(&mut self, out: &mut Vec<Chunk>) {
        let mut dirty: Vec<&mut Thinking> =
            self.thinking.values_mut().filter(|t| t.dirty).collect();
        dirty.sort_by(|a, b| a.id.cmp(&b.id));
        for t in dirty {
            let at = t.last_emit;
            out.push(emit(t, at));
        }
    }
}

/// The part's current payload, as a chunk (its text is now sent).
pub(super) fn emit(t: &mut Thinking, at: u64) -> Chunk {
    t.last_emit = at;
    t.dirty = false;
    Chunk::Data {
        name: "thinking".into(),
        id: Some(t.id.clone()),
        data: t.payload(),
        transient: false,
    }
}
