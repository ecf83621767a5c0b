//! The chat client: `POST /api/chat` over a real socket, reading the SSE
//! response as it arrives.

use serde_json::json;
use stategraph::internals::events::now_micros;

/// What one chat's stream showed.
#[derive(Debug, Default)]
pub struct Chat {
    /// The stream ended with a `finish` (reason `stop`) and `[DONE]`.
    pub ok: bool,
    /// For each stamped answer token (see `model`): µs from the model
    /// making it to this client reading its `text-delta` frame.
    pub delays_us: Vec<u64>,
    /// Bytes of the response body.
    pub bytes: usize,
}

fn body(i: u64, text: &str) -> String {
    json!({
        "id": format!("load-{i}"),
        "messages": [{"id": format!("u{i}"), "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message"
    })
    .to_string()
}

/// The user's question: the offline model and the router both pick RESEARCH for it.
pub const QUESTION: &str = "please research the latest EV sales numbers";

/// One chat: POST, then read the stream to its end.
pub async fn chat(client: &reqwest::Client, base: &str, i: u64) -> Chat {
    let resp = client
        .post(format!("{base}/api/chat"))
        .header("content-type", "application/json")
        .body(body(i, QUESTION))
        .send()
        .await;
    let mut resp = match resp {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            eprintln!("chat {i}: HTTP {}", r.status());
            return Chat::default();
        }
        Err(e) => {
            eprintln!("chat {i}: {e}");
            return Chat::default();
        }
    };
    let mut out = Chat::default();
    let mut pending = Vec::new();
    let (mut finished, mut done) = (false, false);
    loop {
        let piece = match resp.chunk().await {
            Ok(Some(piece)) => piece,
            Ok(None) => break,
            Err(e) => {
                eprintln!("chat {i}: {e}");
                return Chat::default();
            }
        };
        let read_at = now_micros();
        out.bytes += piece.len();
        pending.extend_from_slice(&piece);
        // Whole lines only; a line cut by the chunk boundary waits.
        let Some(end) = pending.iter().rposition(|b| *b == b'\n') else {
            continue;
        };
        for line in pending[..end].split(|b| *b == b'\n') {
            if let Some(stamp) = stamp(line) {
                out.delays_us.push(read_at.saturating_sub(stamp));
            } else if line.starts_with(b"data: {\"type\":\"finish\"") {
                finished = line.windows(21).any(|w| w == b"\"finishReason\":\"stop\"");
            } else if line == b"data: [DONE]" {
                done = true;
            }
        }
        pending.drain(..=end);
    }
    out.ok = finished && done;
    out
}

/// The model's timestamp in a `text-delta` frame's line, if it has one.
fn stamp(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"data: {\"type\":\"text-delta\"")?;
    let at = rest.windows(10).position(|w| w == b"\"delta\":\"@")?;
    let digits = &rest[at + 10..];
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&digits[..n]).ok()?.parse().ok()
}
