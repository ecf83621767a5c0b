//! The AI SDK UI message stream: a pure mapping from run events to SSE bytes.
//!
//! [`Bridge`] turns events into [`Chunk`]s, [`chunk::frame`] turns chunks into
//! SSE text (`id:` is the event seq, with `.N` for an event's further chunks), and [`Assembler`] turns chunks into the
//! stored assistant message. [`render`] runs the whole pipeline over a
//! recorded run — the live stream, a resume and `replay --sse` are all this
//! same function over the same events, which is why they agree byte for byte.

mod assemble;
mod bridge;
pub(crate) mod chunk;

pub use assemble::Assembler;
#[cfg(feature = "server")]
pub(crate) use assemble::is_failed;
pub use bridge::{Bridge, BridgeConfig};
pub use chunk::Chunk;
#[cfg(feature = "server")]
pub(crate) use chunk::KEEP_ALIVE;
pub(crate) use chunk::{DONE, frame};

use crate::events::Event;

/// Where a client's stream got to: the SSE id of the last chunk it
/// received. One event can make several chunks (a text part's
/// `text-start` and its first `text-delta`), so each chunk has its own id:
/// `SEQ` for an event's first chunk, `SEQ.N` for its chunk `N` (from 1).
/// A resume after any id sends exactly the chunks that came after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct After {
    /// The event's seq.
    pub seq: u64,
    /// The chunk within it (0: its first).
    pub part: u32,
}

impl After {
    /// Reads an SSE id (`SEQ` or `SEQ.N`); `None` for anything else.
    pub fn parse(id: &str) -> Option<Self> {
        let id = id.trim();
        let (seq, part) = match id.split_once('.') {
            Some((seq, part)) => (seq, part.parse().ok()?),
            None => (id, 0),
        };
        Some(Self {
            seq: seq.parse().ok()?,
            part,
        })
    }

    /// Whether chunk `part` of event `seq` comes after this point.
    fn sends(self, seq: u64, part: u32) -> bool {
        (seq, part) > (self.seq, self.part)
    }
}

impl std::fmt::Display for After {
    /// The SSE id: `SEQ`, or `SEQ.N` past an event's first chunk.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.part == 0 {
            write!(f, "{}", self.seq)
        } else {
            write!(f, "{}.{}", self.seq, self.part)
        }
    }
}

impl From<u64> for After {
    /// After the whole event `seq` (every chunk it made): a stream that
    /// starts after it.
    fn from(seq: u64) -> Self {
        Self {
            seq,
            part: u32::MAX,
        }
    }
}

/// Appends the SSE text for `ev` to `out` (only its chunks after `after`:
/// a resumed stream replays the earlier events through the bridge for its
/// state but sends only what the client has not seen). Returns whether the
/// message is closed; the caller then sends [`DONE`].
pub(crate) fn render_event(
    bridge: &mut Bridge,
    ev: &Event,
    after: After,
    scratch: &mut Vec<Chunk>,
    out: &mut String,
) -> bool {
    scratch.clear();
    bridge.on_event(ev, scratch);
    if ev.seq >= after.seq {
        for (part, c) in scratch.iter().enumerate() {
            let part = u32::try_from(part).unwrap_or(u32::MAX);
            if after.sends(ev.seq, part) {
                frame(out, ev.seq, part, c);
            }
        }
    }
    bridge.is_done()
}

/// The SSE text a client receives for `events` (those after `after`: an
/// event seq, or an [`After`] read from an SSE id).
pub fn render(cfg: BridgeConfig, events: &[Event], after: impl Into<After>) -> String {
    let after = after.into();
    let mut bridge = Bridge::new(cfg);
    bridge.resumed_after(resumed_after(events));
    let mut scratch = Vec::new();
    let mut out = String::new();
    for ev in events {
        if render_event(&mut bridge, ev, after, &mut scratch, &mut out) {
            out.push_str(DONE);
            break;
        }
    }
    out
}

/// The seq after which a logged run last continued from a pause (0 when
/// it never paused and went on): pauses up to it do not end its stream.
pub(crate) fn resumed_after(events: &[Event]) -> u64 {
    events
        .iter()
        .rev()
        .find(|e| matches!(e.event, crate::events::EventKind::RunResumed { .. }))
        .map_or(0, |e| e.seq.saturating_sub(1))
}
