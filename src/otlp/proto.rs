//! The OTLP `ExportTraceServiceRequest` in protobuf, written by hand: the
//! few messages a span export needs do not justify a protobuf code
//! generator in the build.
//!
//! Field numbers from opentelemetry-proto
//! (`opentelemetry/proto/collector/trace/v1/trace_service.proto`,
//! `trace/v1/trace.proto`, `common/v1/common.proto`,
//! `resource/v1/resource.proto`):
//! - `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }`
//! - `ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }`
//! - `Resource { repeated KeyValue attributes = 1; }`
//! - `ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }`
//! - `InstrumentationScope { string name = 1; string version = 2; }`
//! - `Span { bytes trace_id = 1; bytes span_id = 2; bytes parent_span_id = 4;
//!   string name = 5; SpanKind kind = 6; fixed64 start_time_unix_nano = 7;
//!   fixed64 end_time_unix_nano = 8; repeated KeyValue attributes = 9; }`
//! - `KeyValue { string key = 1; AnyValue value = 2; }`
//! - `AnyValue { oneof { string string_value = 1; bool bool_value = 2;
//!   int64 int_value = 3; double double_value = 4; ArrayValue array_value = 5; } }`
//! - `ArrayValue { repeated AnyValue values = 1; }`

use serde_json::Value;

use super::{SpanData, is_list};

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn tag(buf: &mut Vec<u8>, field: u32, wire: u8) {
    varint(buf, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(buf, field, LEN);
    varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}

/// A nested message, written by `f` into its own buffer.
fn message(buf: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    f(&mut inner);
    bytes(buf, field, &inner);
}

fn any_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Bool(b) => {
            tag(buf, 2, VARINT);
            varint(buf, u64::from(*b));
        }
        Value::Number(n) if n.is_i64() || n.is_u64() => {
            tag(buf, 3, VARINT);
            // int64 is written as its two's complement bits.
            varint(
                buf,
                n.as_i64()
                    .map_or_else(|| n.as_u64().unwrap_or(0), |i| i as u64),
            );
        }
        Value::Number(n) => {
            tag(buf, 4, FIXED64);
            buf.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_le_bytes());
        }
        Value::String(s) => bytes(buf, 1, s.as_bytes()),
        Value::Array(items) => message(buf, 5, |arr| {
            for item in items {
                message(arr, 1, |inner| any_value(inner, item));
            }
        }),
        other => bytes(buf, 1, other.to_string().as_bytes()),
    }
}

fn key_value(buf: &mut Vec<u8>, field: u32, key: &str, v: &Value) {
    let list = is_list(key)
        .then(|| {
            v.as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
        })
        .flatten()
        .filter(Value::is_array);
    message(buf, field, |kv| {
        bytes(kv, 1, key.as_bytes());
        message(kv, 2, |any| any_value(any, list.as_ref().unwrap_or(v)));
    });
}

fn span(buf: &mut Vec<u8>, s: &SpanData) {
    bytes(buf, 1, &s.trace_id.to_be_bytes());
    bytes(buf, 2, &s.span_id.to_be_bytes());
    if let Some(p) = s.parent {
        bytes(buf, 4, &p.to_be_bytes());
    }
    bytes(buf, 5, s.name.as_bytes());
    tag(buf, 6, VARINT);
    varint(buf, u64::from(s.kind));
    tag(buf, 7, FIXED64);
    buf.extend_from_slice(&s.start.to_le_bytes());
    tag(buf, 8, FIXED64);
    buf.extend_from_slice(&s.end.to_le_bytes());
    for (k, v) in &s.attributes {
        key_value(buf, 9, k, v);
    }
}

/// The request body for `spans`.
pub(super) fn encode(spans: &[SpanData], service: &str) -> Vec<u8> {
    let mut out = Vec::new();
    message(&mut out, 1, |rs| {
        message(rs, 1, |resource| {
            key_value(resource, 1, "service.name", &Value::String(service.into()));
        });
        message(rs, 2, |scope_spans| {
            message(scope_spans, 1, |scope| {
                bytes(scope, 1, b"stategraph");
                bytes(scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            for s in spans {
                message(scope_spans, 2, |buf| span(buf, s));
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_keys_follow_the_wire_format() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        let mut b = Vec::new();
        key_value(&mut b, 9, "a", &serde_json::json!(1));
        // field 9, LEN; KeyValue{ key=1 "a", value=2 AnyValue{ int_value=3 1 } }
        assert_eq!(b, [0x4a, 7, 0x0a, 1, b'a', 0x12, 2, 0x18, 1]);
        let mut b = Vec::new();
        key_value(
            &mut b,
            1,
            "gen_ai.response.finish_reasons",
            &serde_json::json!("[\"stop\"]"),
        );
        let text = String::from_utf8_lossy(&b);
        assert!(
            text.contains("stop") && !text.contains('['),
            "an array, not its text: {b:?}"
        );
    }
}
