//! The `messages` stream mode (not the tuple one) and the messages a node
//! writes without streaming them.
//!
//! `langgraph_api`'s stream.py makes the `messages` mode from the same
//! `(message, metadata)` pairs as `messages-tuple`: `messages/metadata
//! {id: {metadata}}` the first time an id is seen, then `messages/partial
//! [message so far]` for a chunk or `messages/complete [message]` for a
//! whole message. LangGraph's `StreamMessagesHandler` gives those pairs
//! for a model's tokens and, when a node ends, for each message the node
//! returned that it has not seen (not in the node's input, not streamed):
//! a message a node makes without a model, a tool result. So a streamed
//! reply gets no `messages/complete`, and a message written whole gets
//! only that (tests/fixtures/langgraph_wire/messages_*.sse). When both
//! modes are asked for, LangGraph sends the tuples alone.

use serde_json::{Value, json};

use super::Wire;
use crate::events::Event;
use crate::state::Patch;

impl Wire {
    /// A token's `messages/metadata` (its message's first) and
    /// `messages/partial` frames: the chunks of its id added up as an
    /// `AIMessage`.
    pub(super) fn partial(&mut self, tuple: &Value, out: &mut Vec<(&'static str, Value)>) {
        let id = tuple[0]["id"].as_str().unwrap_or_default().to_owned();
        let delta = tuple[0]["content"].as_str().unwrap_or_default();
        let so_far = match self.partials.get_mut(&id) {
            Some(text) => {
                text.push_str(delta);
                text.clone()
            }
            None => {
                out.push((
                    "messages/metadata",
                    json!({ id.clone(): {"metadata": tuple[1]} }),
                ));
                self.partials.insert(id.clone(), delta.to_owned());
                delta.to_owned()
            }
        };
        out.push((
            "messages/partial",
            json!([{
                "content": so_far, "additional_kwargs": {}, "response_metadata": {},
                "type": "ai", "name": null, "id": id, "example": false,
                "tool_calls": [], "invalid_tool_calls": [], "usage_metadata": null,
            }]),
        ));
    }

    /// The frames of the messages a finished node wrote that were not
    /// streamed (before its patch is applied): each as a `messages` tuple
    /// and as `messages/metadata` + `messages/complete`. Left out, as
    /// LangGraph's handler leaves them out: messages already in the state
    /// (the node's input), the reply of a node whose tokens were streamed
    /// (our stored reply's id is not its tokens' id, so it is matched by
    /// the task instead). A node's `surface` does not matter: it says how
    /// its tokens show, and a `set` node, hidden by default, may write a
    /// message.
    pub(super) fn unstreamed(
        &self,
        ev: &Event,
        node: &str,
        patch: &Patch,
        out: &mut Vec<(&'static str, Value)>,
    ) {
        let Some(state) = self.state.as_ref() else {
            return;
        };
        let schema = &self.ctx.graph.state.schema;
        let streamed = self.streamed.contains(&(ev.step, ev.task));
        let before = state.to_json();
        for (field, written) in patch.iter() {
            let is_messages = schema
                .field(field)
                .is_some_and(|id| schema.spec(id).ty.is_messages());
            if !is_messages {
                continue;
            }
            let seen: Vec<&Value> = before[field]
                .as_array()
                .map(|l| l.iter().map(|m| &m["id"]).collect())
                .unwrap_or_default();
            let written = written.as_array().map(Vec::as_slice).unwrap_or_default();
            for m in written {
                let reply = m["role"] == "assistant" && streamed;
                if reply || m["id"].is_null() || seen.contains(&&m["id"]) {
                    continue;
                }
                let message = super::messages::to_langchain(m);
                let meta = self.node_metadata(ev, node);
                out.push(("messages", json!([message, meta])));
                out.push((
                    "messages/metadata",
                    json!({ m["id"].as_str().unwrap_or_default(): {"metadata": meta} }),
                ));
                out.push(("messages/complete", json!([message])));
            }
        }
    }
}
