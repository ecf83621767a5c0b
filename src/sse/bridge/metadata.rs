//! The message metadata a completed run's `finish` chunk carries, named
//! so it never collides with what UI kits read from `message.metadata`.

use serde_json::{Value, json};

use crate::events::Usage;

/// `finish.messageMetadata` of a completed run. The keys stay clear of the
/// ones UI kits give a meaning: assistant-ui keeps `steps` (an array of
/// steps it iterates: "steps is not iterable" on a number), `timing`,
/// `custom`, `modality`, `submittedFeedback`, `isOptimistic` and
/// `unstable_*` for itself (`THREAD_METADATA_KEYS` in
/// @assistant-ui/ai-sdk 0.0.7, `src/converters/convertMessage.ts`), so the
/// superstep count is `stepCount`. `usage` carries the AI SDK's
/// `LanguageModelUsage` names (`inputTokens`, `outputTokens`,
/// `totalTokens`), which assistant-ui's token usage reads, beside our
/// older `promptTokens` / `completionTokens`.
pub(super) fn finish(steps: u32, usage: &Usage) -> Value {
    json!({
        "stepCount": steps,
        "usage": {
            "inputTokens": usage.prompt_tokens,
            "outputTokens": usage.completion_tokens,
            "totalTokens": usage.total(),
            "promptTokens": usage.prompt_tokens,
            "completionTokens": usage.completion_tokens,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_count_is_not_under_the_key_assistant_ui_iterates() {
        let usage = Usage {
            prompt_tokens: 12,
            completion_tokens: 5,
            ..Usage::default()
        };
        let m = finish(3, &usage);
        assert_eq!(m.get("steps"), None, "{m}");
        assert_eq!(m["stepCount"], 3);
        assert_eq!(
            (
                &m["usage"]["inputTokens"],
                &m["usage"]["outputTokens"],
                &m["usage"]["totalTokens"]
            ),
            (&json!(12), &json!(5), &json!(17))
        );
    }
}
