//! Logs (and, when configured, exported spans).
//!
//! Every request and run runs inside a span carrying its correlation id, so
//! each log line names the request it belongs to: in the pretty format as
//! the span prefix, in the JSON format as the `span`/`spans` fields.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogFormat, TelemetryConfig};

/// Keeps exporters alive; flushes them when dropped.
#[derive(Debug, Default)]
pub struct TelemetryGuard {
    #[allow(dead_code)]
    otlp: Option<crate::otlp::Exporter>,
}

/// Installs the global subscriber. `RUST_LOG` overrides the configured filter.
///
/// # Errors
/// A subscriber was already installed, or the OTLP endpoint is invalid.
pub fn init(cfg: &TelemetryConfig) -> Result<TelemetryGuard, String> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cfg.log_filter));
    let otlp = match &cfg.otlp_endpoint {
        Some(endpoint) => Some(crate::otlp::Exporter::start(endpoint, &cfg.service_name)?),
        None => None,
    };
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
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    result.map_err(|e| e.to_string())?;
    Ok(TelemetryGuard { otlp })
}
