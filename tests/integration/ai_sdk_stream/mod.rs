//! The AI SDK UI stream on `POST /api/chat`: its ids, its broken streams, what was shown staying shown, the cards and the assistant-ui client.

mod assistant_ui;
mod broken_streams;
mod card_shapes;
mod shown_stays;
mod sse_ids;
mod sse_stream;
