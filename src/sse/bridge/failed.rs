//! A run that fails, on the wire. The rule: **what was shown stays.**
//!
//! - The answer was written and a later node failed (a card builder, the
//!   follow-ups, a store write): the answer the user read is the turn's
//!   answer. The message closes without an `error` chunk (which would put
//!   `useChat` in its error state beside a good answer); a `data-error`
//!   part (`{node, message, reference}`) names the node that failed, and
//!   `finish` carries `finishReason: "error"` so the client knows the turn
//!   did not end cleanly. The stored message is the streamed one: the
//!   answer, then the `data-error` part.
//! - Nothing was answered yet, the answering node itself failed
//!   mid-answer (`on_error: fail`), or the run failed with no node to
//!   blame (its store became unavailable mid-answer: what was shown may not
//!   be stored): one `error` chunk naming the run as
//!   the reference, then `finish` with reason `error`; the stored message
//!   keeps what the run did but not the half answer
//!   ([`crate::sse::Assembler::stored_parts`]).

use serde_json::{Value, json};

use super::{At, Bridge, Chunk};

impl Bridge {
    /// `run_failed`: the message closes as the module docs say.
    pub(super) fn on_failed(&mut self, at: &At<'_>, out: &mut Vec<Chunk>) {
        let ev = at.ev;
        self.flush(out);
        let reference = self.cfg.metadata["runId"]
            .as_str()
            .map_or_else(|| ev.run_id.to_string(), str::to_owned);
        let mut metadata = json!({ "reference": reference });
        if let Some(node) = &self.failed_node {
            metadata["node"] = json!(node);
        }
        // The answer is whole when no answer part is still open and the
        // failure is a node's other than the one answering; a run that
        // failed otherwise (its store went away mid-answer) is not known
        // to have stored or finished what it showed.
        let whole = self.answered
            && self.text.is_none()
            && self.failed_node.is_some()
            && !self.answer_failed;
        if whole {
            self.close_parts(out);
            self.close_step(out);
            let mut data = json!({
                "message": format!(
                    "The answer above is complete, but a later step of this turn failed (reference {reference})."
                ),
                "reference": reference,
            });
            data["node"] = self.failed_node.as_deref().map_or(Value::Null, Value::from);
            out.push(Chunk::Data {
                name: "error".into(),
                id: Some("error".into()),
                data,
                transient: false,
            });
        } else {
            out.push(Chunk::Error {
                error_text: format!(
                    "The assistant could not finish this answer (reference {reference})."
                ),
            });
            self.close_step(out);
        }
        out.push(Chunk::Finish {
            finish_reason: "error".into(),
            message_metadata: metadata,
        });
        self.done = true;
    }
}
