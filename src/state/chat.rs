//! The chat pipeline's state (`state: chat` in graph files).

use super::{Entity, Message};

crate::state! {
    /// State of the chat pipeline (graphs/chat.yaml).
    pub struct ChatState as "chat" {
        /// The conversation so far, including the newest user message.
        messages: Vec<Message> => merge_by_id,
        /// The newest user message's text.
        query: String => last,
        /// Rolling summary of older history, written by the summarizer.
        summary: String => last,
        /// How many messages the summary covers.
        summarized_count: u32 => last,
        /// An intent forced by the caller, bypassing classification.
        forced_intent: Option<String> => last,
        /// The classified intent the router routes on.
        intent: String => last,
        /// The router's details: reasoning, missing slots, language, source.
        routing: serde_json::Value => last,
        /// The user's language as detected by the router.
        language: String => last,
        /// Findings from the research, quick-answer or explain agent.
        findings: String => last,
        /// Tool calls made and their results, in order.
        tool_results: Vec<serde_json::Value> => append,
        /// The answer shown to the user.
        answer: String => last,
        /// Suggested follow-up questions.
        followups: Vec<String> => last,
        /// Active entities (one per kind, the latest mentioned), extracted
        /// from tool results by agents with an `entities` setting.
        entities: Vec<Entity> => merge_by_id,
    }
}
