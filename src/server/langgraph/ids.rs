//! The ids the LangGraph API shows: assistant ids (one per served graph),
//! checkpoint ids (a run and a step) and stream event ids.
//!
//! An assistant id is the UUID v5 of the graph name in the namespace the
//! LangGraph server uses for its default assistants
//! (`langgraph_api/graph.py`: `NAMESPACE_GRAPH`, `uuid5(NAMESPACE_GRAPH,
//! graph_id)`), so a graph served here has the same assistant id it would
//! have on LangGraph's own server. The `uuid` crate is built without its
//! `v5` feature (and its SHA-1), so the hash is here: 40 lines, checked
//! against Python's `uuid.uuid5` in the tests.

use uuid::Uuid;

/// LangGraph's `NAMESPACE_GRAPH`.
const NAMESPACE_GRAPH: Uuid = Uuid::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);

/// The assistant id of graph `name`.
pub(super) fn assistant_id(name: &str) -> Uuid {
    let mut data = NAMESPACE_GRAPH.as_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    let hash = sha1(&data);
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash[..16]);
    uuid::Builder::from_sha1_bytes(bytes).into_uuid()
}

/// SHA-1 (FIPS 180-4), for UUID v5 only.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// A checkpoint id: the state of run `run` after `step`. Run ids are UUID
/// v7 (time first), so ids sort by time as LangGraph's do.
pub(super) fn checkpoint_id(run: Uuid, step: u32) -> String {
    format!("{}-{step:06}", run.simple())
}

/// The run and step a checkpoint id names.
pub(super) fn parse_checkpoint(id: &str) -> Option<(Uuid, u32)> {
    let (run, step) = id.rsplit_once('-')?;
    Some((Uuid::parse_str(run).ok()?, step.parse().ok()?))
}

/// Where a stream resumes from, as a `Last-Event-ID` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LastEvent {
    /// `-1`: from the start.
    Start,
    /// After the `n`th SSE event made from event `seq` (`SEQ-N`, as this
    /// server writes ids).
    After(u64, u32),
}

/// A stream event's id: the event it comes from and its place among the
/// SSE events that event made.
pub(super) fn event_id(seq: u64, n: u32) -> String {
    format!("{seq}-{n}")
}

/// Reads a `Last-Event-ID`.
pub(super) fn parse_last_event(v: &str) -> Option<LastEvent> {
    let v = v.trim();
    if v == "-1" {
        return Some(LastEvent::Start);
    }
    let (seq, n) = v.split_once('-')?;
    Some(LastEvent::After(seq.parse().ok()?, n.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_the_standard_vector() {
        let hex: String = sha1(b"abc").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
    }

    #[test]
    fn assistant_ids_match_langgraphs_uuid5() {
        // python3 -c "from uuid import *; print(uuid5(UUID('6ba7b821-9dad-11d1-80b4-00c04fd430c8'), 'chat'))"
        assert_eq!(
            assistant_id("chat").to_string(),
            "eb6db400-e3c8-5d06-a834-015cb89efe69"
        );
        assert_eq!(
            assistant_id("agent").to_string(),
            "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
        );
    }

    #[test]
    fn checkpoint_and_event_ids_round_trip() {
        let run = Uuid::now_v7();
        assert_eq!(parse_checkpoint(&checkpoint_id(run, 7)), Some((run, 7)));
        assert!(checkpoint_id(run, 2) < checkpoint_id(run, 10));
        assert_eq!(parse_last_event("-1"), Some(LastEvent::Start));
        assert_eq!(
            parse_last_event(&event_id(12, 3)),
            Some(LastEvent::After(12, 3))
        );
        assert_eq!(parse_last_event("nope"), None);
    }
}
