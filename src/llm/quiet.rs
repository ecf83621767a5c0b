//! Quiet replies: replies that signal the graph, not the user.
//!
//! A node may tell its model to answer a word such as `[PROCEED]` when it
//! has nothing to say to the user (the graph then routes on it). Streamed
//! as it comes, the user would read that word. So while the text of a call
//! could still become one of the node's quiet replies (ignoring case and
//! surrounding white space) it is held back; as soon as it cannot, what
//! was held is sent in one delta and the rest streams as usual. A reply
//! that is a quiet one is never sent at all — it is still the call's
//! output (`llm_finished`), so the node writes it and a route can read it.

/// The text held back in one model call.
#[derive(Debug)]
pub(super) struct Held<'a> {
    quiet: &'a [String],
    /// Text not sent yet.
    pending: String,
    /// The text can no longer be a quiet reply: everything streams.
    open: bool,
}

impl<'a> Held<'a> {
    /// For a call whose quiet replies are `quiet` (none: nothing is held).
    pub(super) fn new(quiet: &'a [String]) -> Self {
        Self {
            quiet,
            pending: String::new(),
            open: quiet.is_empty(),
        }
    }

    /// A delta arrived; `text` is the call's whole text so far. Returns
    /// what to send now.
    pub(super) fn pass(&mut self, text: &str, delta: String) -> Option<String> {
        if self.open {
            return Some(delta);
        }
        self.pending.push_str(&delta);
        if self.could_be(text) {
            return None;
        }
        self.open = true;
        Some(std::mem::take(&mut self.pending))
    }

    /// The call finished with `text`: what is still held, unless the
    /// reply is a quiet one (then nothing is sent).
    pub(super) fn finish(&mut self, text: &str) -> Option<String> {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() || self.is_quiet(text) {
            return None;
        }
        Some(pending)
    }

    /// Whether `text` is the start of a quiet reply.
    fn could_be(&self, text: &str) -> bool {
        let t = text.trim().to_uppercase();
        self.quiet
            .iter()
            .any(|q| q.trim().to_uppercase().starts_with(&t))
    }

    /// Whether `text` is a quiet reply.
    pub(super) fn is_quiet(&self, text: &str) -> bool {
        let t = text.trim().to_uppercase();
        !t.is_empty() && self.quiet.iter().any(|q| q.trim().to_uppercase() == t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `deltas`; returns what was sent.
    fn sent(quiet: &[String], deltas: &[&str]) -> Vec<String> {
        let mut held = Held::new(quiet);
        let mut text = String::new();
        let mut out = Vec::new();
        for d in deltas {
            text.push_str(d);
            out.extend(held.pass(&text, (*d).to_owned()));
        }
        out.extend(held.finish(&text));
        out
    }

    #[test]
    fn a_quiet_reply_is_never_sent_however_it_is_split() {
        let quiet = ["[PROCEED]".to_owned()];
        assert!(sent(&quiet, &["[PRO", "CEED", "]"]).is_empty());
        assert!(sent(&quiet, &[" [proceed]", "\n"]).is_empty());
    }

    #[test]
    fn other_text_is_sent_whole_once_it_cannot_be_quiet() {
        let quiet = ["[PROCEED]".to_owned()];
        assert_eq!(
            sent(&quiet, &["[PRO", "bably", " Kenya?"]),
            ["[PRObably", " Kenya?"]
        );
        assert_eq!(
            sent(&quiet, &["Which", " country?"]),
            ["Which", " country?"]
        );
        // A quiet reply's start that ends there is sent at the end.
        assert_eq!(sent(&quiet, &["[PRO"]), ["[PRO"]);
        // Nothing quiet: every delta as it comes.
        assert_eq!(sent(&[], &["[PRO", "CEED]"]), ["[PRO", "CEED]"]);
    }
}
