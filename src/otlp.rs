//! OpenTelemetry span export over OTLP/HTTP, JSON or protobuf encoded.
//!
//! A `tracing` layer records spans (name, fields, timing, parent) and a
//! background thread posts finished spans in batches to
//! `{endpoint}/v1/traces`: as the OTLP/JSON mapping (`Content-Type:
//! application/json`) or as the `ExportTraceServiceRequest` protobuf
//! (`application/x-protobuf`, module `proto`), which every OTLP receiver
//! accepts — some, such as Arize Phoenix, only that. It is deliberately
//! small: spans from the request and run `tracing` spans, with the
//! correlation id as an attribute, and the model and tool calls with the
//! OpenTelemetry GenAI attributes (`gen_ai.*`) are what operators need; the
//! queue is bounded and spans are dropped (and counted) rather than slowing
//! the server when the collector is down.
//!
//! Two span fields steer the export, as in the OpenTelemetry conventions of
//! `tracing` bridges: `otel.name` replaces the span's name (GenAI spans are
//! named `chat gpt-5.1`, `execute_tool calculator`) and `otel.kind` sets its
//! kind (`client` for calls to a model provider).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Spans held while waiting for export; beyond this they are dropped.
const QUEUE_LIMIT: usize = 10_000;

mod proto;

/// How spans are encoded on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub(crate) enum Protocol {
    /// OTLP/HTTP with the JSON mapping.
    #[default]
    #[serde(rename = "http/json")]
    HttpJson,
    /// OTLP/HTTP with protobuf (the OTLP default; Arize Phoenix takes only this).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

#[derive(Clone, Debug)]
struct SpanData {
    trace_id: u128,
    span_id: u64,
    parent: Option<u64>,
    name: std::borrow::Cow<'static, str>,
    /// OTLP `SpanKind`: 1 internal, 2 server, 3 client.
    kind: u8,
    start: u64,
    end: u64,
    attributes: Vec<(String, Value)>,
}

impl SpanData {
    /// Applies `otel.name` and `otel.kind` (see the module docs) and drops
    /// them from the attributes.
    fn steer(&mut self) {
        self.attributes.retain(|(k, v)| match k.as_str() {
            "otel.name" => {
                self.name = v
                    .as_str()
                    .map_or_else(|| v.to_string(), str::to_owned)
                    .into();
                false
            }
            "otel.kind" => {
                self.kind = match v.as_str() {
                    Some("internal") => 1,
                    Some("client") => 3,
                    Some("producer") => 4,
                    Some("consumer") => 5,
                    _ => 2,
                };
                false
            }
            _ => true,
        });
    }
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Vec<SpanData>>,
    dropped: AtomicU64,
}

/// The exporter: its layer and its sender thread.
pub(crate) struct Exporter {
    shared: Arc<Shared>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("otlp::Exporter")
    }
}

fn nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Exporter {
    /// Starts the sender thread for `endpoint` (e.g. `http://127.0.0.1:4318`),
    /// encoding spans with `protocol`.
    ///
    /// # Errors
    /// The endpoint is not an http(s) URL.
    pub(crate) fn start_with(
        endpoint: &str,
        service: &str,
        protocol: Protocol,
    ) -> Result<Self, String> {
        let base = endpoint.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!("OTLP endpoint `{endpoint}` must be an http(s) URL"));
        }
        let url = if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        };
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let worker = Arc::clone(&shared);
        let service = service.to_owned();
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_loop(&worker, &url, &service, protocol, &stopped))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The `tracing` layer feeding this exporter.
    pub(crate) fn layer<S>(&self) -> OtlpLayer<S> {
        OtlpLayer {
            shared: Arc::clone(&self.shared),
            _s: std::marker::PhantomData,
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // Flush what is queued, then stop the thread.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn export_loop(
    shared: &Shared,
    url: &str,
    service: &str,
    protocol: Protocol,
    stopped: &std::sync::mpsc::Receiver<()>,
) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap_or_default();
    loop {
        let last = matches!(
            stopped.recv_timeout(Duration::from_millis(500)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) | Ok(())
        );
        let batch: Vec<SpanData> =
            std::mem::take(&mut *shared.queue.lock().unwrap_or_else(PoisonError::into_inner));
        if !batch.is_empty() {
            let (content_type, body) = match protocol {
                Protocol::HttpJson => (
                    "application/json",
                    encode(&batch, service).to_string().into_bytes(),
                ),
                Protocol::HttpProtobuf => {
                    ("application/x-protobuf", proto::encode(&batch, service))
                }
            };
            let send = async {
                client
                    .post(url)
                    .header("content-type", content_type)
                    .body(body)
                    .send()
                    .await?
                    .error_for_status()
            };
            if let Err(e) = rt.block_on(send) {
                shared
                    .dropped
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                eprintln!("otlp: could not export {} spans: {e}", batch.len());
            }
        }
        if last {
            return;
        }
    }
}

/// Attributes whose value is a list (recorded on a `tracing` span as the
/// list's JSON text).
fn is_list(key: &str) -> bool {
    key.ends_with("finish_reasons")
}

fn attr(key: &str, v: &Value) -> Value {
    if is_list(key)
        && let Some(Ok(Value::Array(items))) = v.as_str().map(serde_json::from_str::<Value>)
    {
        let values: Vec<Value> = items.iter().map(|i| attr("", i)["value"].clone()).collect();
        return json!({"key": key, "value": {"arrayValue": {"values": values}}});
    }
    let value = match v {
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({"intValue": n.to_string()}),
        Value::Number(n) => json!({"doubleValue": n.as_f64()}),
        Value::String(s) => json!({"stringValue": s}),
        other => json!({"stringValue": other.to_string()}),
    };
    json!({"key": key, "value": value})
}

/// The OTLP/JSON request body for `spans`.
fn encode(spans: &[SpanData], service: &str) -> Value {
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            let mut v = json!({
                "traceId": format!("{:032x}", s.trace_id),
                "spanId": format!("{:016x}", s.span_id),
                "name": s.name,
                "kind": s.kind,
                "startTimeUnixNano": s.start.to_string(),
                "endTimeUnixNano": s.end.to_string(),
                "attributes": s.attributes.iter().map(|(k, v)| attr(k, v)).collect::<Vec<_>>(),
            });
            if let Some(p) = s.parent {
                v["parentSpanId"] = json!(format!("{p:016x}"));
            }
            v
        })
        .collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": [attr("service.name", &json!(service))]},
        "scopeSpans": [{"scope": {"name": "stategraph", "version": env!("CARGO_PKG_VERSION")}, "spans": spans}]
    }]})
}

struct Fields<'a>(&'a mut Vec<(String, Value)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .push((field.name().to_owned(), json!(format!("{value:?}"))));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), json!(value)));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.push((field.name().to_owned(), json!(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.push((field.name().to_owned(), json!(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.push((field.name().to_owned(), json!(value)));
    }
}

/// Records spans for the exporter.
pub(crate) struct OtlpLayer<S> {
    shared: Arc<Shared>,
    _s: std::marker::PhantomData<fn(S)>,
}

impl<S> Layer<S> for OtlpLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<SpanData>()
                .map(|d| (d.trace_id, d.span_id))
        });
        let mut attributes = Vec::new();
        attrs.record(&mut Fields(&mut attributes));
        let data = SpanData {
            trace_id: parent.map_or_else(
                || (u128::from(fastrand::u64(..)) << 64) | u128::from(fastrand::u64(..)),
                |p| p.0,
            ),
            span_id: fastrand::u64(1..),
            parent: parent.map(|p| p.1),
            name: attrs.metadata().name().into(),
            kind: 2,
            start: nanos(),
            end: 0,
            attributes,
        };
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(data) = span.extensions_mut().get_mut::<SpanData>()
        {
            values.record(&mut Fields(&mut data.attributes));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(mut data) = span.extensions_mut().remove::<SpanData>() else {
            return;
        };
        data.end = nanos();
        data.steer();
        let mut q = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if q.len() < QUEUE_LIMIT {
            q.push(data);
        } else {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_encode_as_otlp_json() {
        let s = SpanData {
            trace_id: 0xabc,
            span_id: 0x12,
            parent: Some(0x34),
            name: "request".into(),
            kind: 2,
            start: 10,
            end: 20,
            attributes: vec![
                ("request_id".into(), json!("r-1")),
                ("status".into(), json!(200)),
            ],
        };
        let v = encode(&[s], "svc");
        let span = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "00000000000000000000000000000abc");
        assert_eq!(span["parentSpanId"], "0000000000000034");
        assert_eq!(
            span["attributes"][0],
            json!({"key": "request_id", "value": {"stringValue": "r-1"}})
        );
        assert_eq!(span["attributes"][1]["value"], json!({"intValue": "200"}));
        assert_eq!(
            v["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
            "svc"
        );
    }
}
