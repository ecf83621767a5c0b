//! The AI SDK UI message stream: a pure mapping from run events to SSE bytes.
//!
//! [`Bridge`] turns events into [`Chunk`]s, [`chunk::frame`] turns chunks into
//! SSE text (`id:` is the event seq), and [`Assembler`] turns chunks into the
//! stored assistant message. [`render`] runs the whole pipeline over a
//! recorded run — the live stream, a resume and `replay --sse` are all this
//! same function over the same events, which is why they agree byte for byte.

mod assemble;
mod bridge;
pub mod chunk;

pub use assemble::{Assembler, ERROR_PART, is_failed};
pub use bridge::{Bridge, BridgeConfig};
pub use chunk::{Chunk, DONE, KEEP_ALIVE, frame};

use crate::events::Event;

/// Appends the SSE text for `ev` to `out` (only if `ev.seq > after`: a
/// resumed stream replays the earlier events through the bridge for its
/// state but sends only what the client has not seen). Returns whether the
/// message is closed; the caller then sends [`DONE`].
pub fn render_event(
    bridge: &mut Bridge,
    ev: &Event,
    after: u64,
    scratch: &mut Vec<Chunk>,
    out: &mut String,
) -> bool {
    scratch.clear();
    bridge.on_event(ev, scratch);
    if ev.seq > after {
        for c in scratch.iter() {
            frame(out, ev.seq, c);
        }
    }
    bridge.is_done()
}

/// The SSE text a client receives for `events` (those after `after`).
pub fn render(cfg: BridgeConfig, events: &[Event], after: u64) -> String {
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
pub fn resumed_after(events: &[Event]) -> u64 {
    events
        .iter()
        .rev()
        .find(|e| matches!(e.event, crate::events::EventKind::RunResumed { .. }))
        .map_or(0, |e| e.seq.saturating_sub(1))
}
