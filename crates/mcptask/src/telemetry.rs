//! The process's `tracing` subscriber: log lines on stderr, and, when
//! `[telemetry]` or the `OTEL_*` environment turns it on, the spans of
//! target [`mcptask_client::trace::TARGET`] exported over OTLP/HTTP.
//!
//! With export off no OpenTelemetry layer is installed and the log layer
//! leaves those spans out, so every call site sees them disabled.

use std::sync::OnceLock;

use anyhow::Context as _;
use mcptask_client::trace::TARGET;
use mcptask_gateway::telemetry::TraceExport;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The exporting provider, flushed by [`shutdown`].
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// mcptask's log filter unless `MCPTASK_LOG` says otherwise. rmcp's service
/// loop logs every error answered to a peer at WARN (an unknown tool, a bad
/// argument: the caller's business, not the operator's) and dumps whole
/// unexpected messages: `rmcp::service` only above that. What the operator
/// needs of a failed request, mcptask logs itself (a redacted failure's
/// incident, at WARN).
pub const DEFAULT_LOG_FILTER: &str =
    "info,sqlx=warn,rmcp=warn,rmcp::service=error,rmcp::transport::worker=off";

/// The log filter: `MCPTASK_LOG`, else mcptask's defaults; never the spans
/// meant for export (they are not log lines).
fn log_filter() -> EnvFilter {
    // rmcp's worker logs a failed connection as the Debug dump of its error
    // chain (Rust type paths); mcptask logs the same failure once, in words.
    let filter = EnvFilter::try_from_env("MCPTASK_LOG")
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    filter.add_directive(format!("{TARGET}=off").parse().expect("a valid directive"))
}

/// Log lines on stderr.
fn log_layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: in a log file or journal they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(log_filter())
}

/// Install the subscriber: logs only (`export` `None`), or logs and trace
/// export. Call once, before anything logs.
pub fn init(export: Option<&TraceExport>) -> anyhow::Result<()> {
    let logs = log_layer();
    let Some(export) = export else {
        tracing_subscriber::registry().with(logs).init();
        return Ok(());
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(&export.traces_endpoint)
        .build()
        .with_context(|| {
            format!(
                "cannot set up the trace exporter to {}",
                export.traces_endpoint
            )
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(export.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("mcptask");
    // The spans made for export, and warnings of mcptask's own crates as
    // events on them.
    let exported = Targets::new()
        .with_target(TARGET, LevelFilter::TRACE)
        .with_target("mcptask", LevelFilter::WARN);
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(exported);
    tracing_subscriber::registry().with(logs).with(spans).init();
    let _ = PROVIDER.set(provider);
    tracing::info!(endpoint = %export.traces_endpoint, service = %export.service_name, "exporting traces (OTLP/HTTP)");
    Ok(())
}

/// Export what is buffered and stop the exporter (a no-op with export off).
/// Runs outside the async runtime: the exporter's HTTP client blocks.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get()
        && let Err(e) = provider.shutdown()
    {
        eprintln!("warning: traces not exported at exit: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With export off, the spans made for it are disabled at every call
    /// site: nothing is recorded, formatted or propagated per call.
    #[test]
    fn without_export_the_trace_spans_are_disabled() {
        let subscriber = tracing_subscriber::registry().with(log_layer());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: TARGET, "tools/call", gen_ai.tool.name = "t");
            assert!(span.is_disabled());
            assert!(mcptask_client::trace::current().is_none());
            // The log lines themselves are still on.
            assert!(tracing::enabled!(tracing::Level::INFO));
        });
    }
}
