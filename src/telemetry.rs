//! Logs (and, when configured, exported spans).
//!
//! Every request and run runs inside a span carrying its correlation id, so
//! each log line names the request it belongs to: in the pretty format in
//! the span prefix (`request{request_id=…}:run{…}:tool{…}`), in the JSON
//! format as top-level `request_id` (and `run_id`) keys — however deep the
//! line is nested (a tool call inside a node inside a run), which the
//! `span` field alone (the innermost span) would not show.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, MakeWriter};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogFormat, TelemetryConfig};

/// Keeps exporters alive; flushes them when dropped.
#[derive(Debug, Default)]
pub(crate) struct TelemetryGuard {
    #[allow(dead_code)]
    otlp: Option<crate::otlp::Exporter>,
}

/// Installs the global subscriber. `RUST_LOG` overrides the configured filter.
///
/// # Errors
/// A subscriber was already installed, or the OTLP endpoint is invalid.
pub(crate) fn init(cfg: &TelemetryConfig) -> Result<TelemetryGuard, String> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cfg.log_filter));
    let protocol = match cfg.otlp_protocol.as_deref().map(str::trim) {
        None | Some("" | "http/json") => crate::otlp::Protocol::HttpJson,
        Some("http/protobuf") => crate::otlp::Protocol::HttpProtobuf,
        Some(other) => {
            return Err(format!(
                "otlp_protocol `{other}` is not supported; write `http/json` or `http/protobuf`"
            ));
        }
    };
    let otlp = match &cfg.otlp_endpoint {
        Some(endpoint) => Some(crate::otlp::Exporter::start_with(
            endpoint,
            &cfg.service_name,
            protocol,
        )?),
        None => None,
    };
    crate::llm::spans::capture_content(cfg.capture_content);
    let otlp_layer = otlp.as_ref().map(crate::otlp::Exporter::layer);
    let registry = tracing_subscriber::registry().with(filter).with(otlp_layer);
    let result = match cfg.log_format {
        // Logs go to stderr; stdout is for what the command itself prints.
        LogFormat::Pretty => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            registry
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_target(false)
                        .with_ansi(ansi)
                        .with_writer(std::io::stderr),
                )
                .try_init()
        }
        LogFormat::Json => registry.with(json_layer(std::io::stderr)).try_init(),
    };
    result.map_err(|e| e.to_string())?;
    Ok(TelemetryGuard { otlp })
}

/// The JSON log format, writing lines to `writer`: tracing-subscriber's
/// JSON object per event (`timestamp`, `level`, `fields`, `target`, `span`)
/// with the correlation ids of the event's spans — `request_id`, `run_id`
/// — as top-level keys.
pub fn json_layer<S, W>(writer: W) -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    Correlate.and_then(
        tracing_subscriber::fmt::layer()
            .fmt_fields(JsonFields::new())
            .event_format(CorrelatedJson(
                tracing_subscriber::fmt::format()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false),
            ))
            .with_writer(writer),
    )
}

/// The correlation ids a span carries or inherits from its parent.
#[derive(Clone, Debug, Default)]
struct Ids {
    request_id: Option<String>,
    run_id: Option<String>,
}

impl Visit for Ids {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.set(field, format!("{value:?}"));
    }
}

impl Ids {
    fn set(&mut self, field: &Field, value: String) {
        match field.name() {
            "request_id" if !value.is_empty() => self.request_id = Some(value),
            "run_id" if !value.is_empty() => self.run_id = Some(value),
            _ => {}
        }
    }
}

/// Keeps each span's correlation ids (its own, else its parent's) in its
/// extensions, for [`CorrelatedJson`].
struct Correlate;

impl<S> Layer<S> for Correlate
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut ids = span
            .parent()
            .and_then(|p| p.extensions().get::<Ids>().cloned())
            .unwrap_or_default();
        attrs.record(&mut ids);
        span.extensions_mut().insert(ids);
    }
}

/// The JSON line of tracing-subscriber with the correlation ids of the
/// event's span as top-level keys.
struct CorrelatedJson(Format<Json>);

impl<S> FormatEvent<S, JsonFields> for CorrelatedJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let span = match event.parent() {
            Some(id) => ctx.span(id),
            None if event.is_contextual() => ctx.lookup_current(),
            None => None,
        };
        let ids = span
            .and_then(|s| s.extensions().get::<Ids>().cloned())
            .unwrap_or_default();
        if ids.request_id.is_none() && ids.run_id.is_none() {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let Some(rest) = line.strip_prefix('{') else {
            return writer.write_str(&line);
        };
        writer.write_char('{')?;
        for (key, value) in [("request_id", &ids.request_id), ("run_id", &ids.run_id)] {
            if let Some(v) = value {
                let v = serde_json::to_string(v).map_err(|_| fmt::Error)?;
                write!(writer, "\"{key}\":{v},")?;
            }
        }
        writer.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_inside_a_request_carry_its_id_at_the_top_level() {
        let buf = Buf::default();
        let sink = buf.clone();
        let subscriber = tracing_subscriber::registry().with(json_layer(move || sink.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("outside");
            let request = tracing::info_span!("request", request_id = "r-1");
            let _r = request.enter();
            let run = tracing::info_span!("run", run_id = %"run-9", request_id = "r-1");
            let _u = run.enter();
            let tool = tracing::info_span!("tool", tool = "find");
            let _t = tool.enter();
            tracing::info!(cached = false, "tool finished");
        });
        let text = String::from_utf8(buf.0.lock().map(|b| b.clone()).unwrap_or_default())
            .unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_default())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].get("request_id").is_none(), "{text}");
        assert_eq!(lines[1]["request_id"], "r-1", "{text}");
        assert_eq!(lines[1]["run_id"], "run-9", "{text}");
        assert_eq!(lines[1]["span"]["name"], "tool", "{text}");
        assert_eq!(lines[1]["fields"]["message"], "tool finished", "{text}");
    }
}
