//! What the process tells about itself as it runs: log lines on stderr (text, or JSON with the
//! trace's id) and, with `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`), its spans over
//! OTLP (HTTP/protobuf) to a collector.
//!
//! The library only reads and writes the W3C trace context (`token_resolver::trace`); the SDK,
//! the exporter and tracing's bridge to OpenTelemetry are installed here, in the program.
//!
//! Exported: every span at INFO and above, and the library's own at DEBUG (one per resolution,
//! one per call to `/api/user`), so that a trace shows the caller's request, the resolution with
//! its outcome and the integrator's call. The log filter (`RUST_LOG`, `warn` by default) is
//! the log lines' alone.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::cli::LogFormat;

/// The exporter's tracer provider while the process runs: [`Telemetry::shutdown`] sends what
/// is left before the process exits.
pub(crate) struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Where spans go, and as what service.
pub(crate) struct Export {
    /// The URL spans are POSTed to.
    traces: String,
    /// `service.name`, unless `OTEL_SERVICE_NAME` says otherwise.
    service: String,
}

impl Export {
    /// Spans to `/v1/traces` under the collector's base URL `endpoint` (`--otlp-endpoint` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, as the OpenTelemetry specification says of the generic
    /// setting), or else to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is; `None` when neither
    /// is set (no export).
    pub(crate) fn configured(endpoint: Option<&str>, service: String) -> Option<Export> {
        let traces = match endpoint {
            Some(base) => format!("{}/v1/traces", base.trim_end_matches('/')),
            None => std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .ok()
                .filter(|url| !url.is_empty())?,
        };
        Some(Export { traces, service })
    }
}

/// Why spans cannot be exported as asked.
#[derive(Debug, thiserror::Error)]
#[error("--otlp-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT): spans cannot go to {url:?}: {reason}")]
pub(crate) struct ExportError {
    url: String,
    reason: String,
}

/// Installs the process's subscriber: log lines on stderr in `format`, filtered by `RUST_LOG`
/// (`warn` by default), and spans over OTLP where `export` says. Must be called from within
/// the tokio runtime the exporter sends on.
///
/// # Errors
///
/// An endpoint that is not an `http://` or `https://` URL, or an exporter that cannot be built.
pub(crate) fn install(format: LogFormat, export: Option<Export>) -> Result<Telemetry, ExportError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.with_filter(filter).boxed(),
        // Every event with its own fields and those of the spans it is in (the connection's id,
        // the resolution's host and outcome), one JSON object per line, with the trace's id.
        LogFormat::Json => logs
            .event_format(WithTraceId(
                tracing_subscriber::fmt::format()
                    .json()
                    .with_current_span(true)
                    .with_span_list(true),
            ))
            .fmt_fields(JsonFields::new())
            .with_filter(filter)
            .boxed(),
    };
    let Some(export) = export else {
        tracing_subscriber::registry().with(logs).init();
        return Ok(Telemetry { provider: None });
    };
    let provider = provider(&export)?;
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("token-resolver"))
        // Spans only (an event is a log line's business): at INFO and above, and the library's
        // own at DEBUG. A target is matched by its module path: the library's is
        // `token_resolver` or under `token_resolver::`, not the products' `token_resolver_*`.
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            let library =
                meta.target() == "token_resolver" || meta.target().starts_with("token_resolver::");
            meta.is_span() && *meta.level() <= if library { Level::DEBUG } else { Level::INFO }
        }));
    tracing_subscriber::registry().with(logs).with(spans).init();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// The tracer provider sending batches to `export.traces`.
fn provider(export: &Export) -> Result<SdkTracerProvider, ExportError> {
    let fail = |reason: String| ExportError {
        url: export.traces.clone(),
        reason,
    };
    let url = url::Url::parse(&export.traces).map_err(|e| fail(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(fail("not an http:// or https:// URL".into()));
    }
    let exporter = SpanExporter::builder()
        .with_http()
        .with_http_client(OnRuntime::new())
        .with_endpoint(export.traces.clone())
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(export.service.clone());
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

impl Telemetry {
    /// Sends the spans still batched and stops the exporter: at most one bounded export
    /// ([`OnRuntime`]), and the SDK's own wait for its thread. Call it once the command has
    /// ended.
    pub(crate) async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The batch's last export runs on this runtime (`OnRuntime`): wait for it off it.
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            eprintln!("warning: the last spans could not be exported: {e}");
        }
    }
}

/// The exporter's HTTP client: the binary's reqwest, sending on the process's tokio runtime.
///
/// The SDK exports from a thread of its own with no runtime; an async client there finds no
/// reactor and the thread panics (open-telemetry/opentelemetry-rust#2673, #3125). Each request
/// is spawned onto the runtime the exporter was built in, and its end awaited from that thread.
///
/// Each export is bounded: the SDK puts no deadline on a call from its batch thread, so a
/// collector that accepts and never answers would stop every later export. A request ends
/// after `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds; 10 s by default), and a collector's answer
/// is read up to [`MAX_ANSWER_BYTES`].
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

/// The most of a collector's answer read: an export's answer is a small protobuf message (a
/// partial success at most).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

impl OnRuntime {
    fn new() -> OnRuntime {
        let timeout = std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT")
            .ok()
            .and_then(|ms| ms.trim().parse().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis);
        OnRuntime {
            client: reqwest::Client::builder()
                .timeout(timeout)
                .no_proxy()
                .build()
                .unwrap_or_default(),
            runtime: tokio::runtime::Handle::current(),
            timeout,
        }
    }
}

impl HttpClient for OnRuntime {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: http::Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let sent = self.runtime.spawn(async move {
            let exchange = async {
                let request = reqwest::Request::try_from(request)?;
                let mut response = client.execute(request).await?;
                let mut answer = http::Response::builder().status(response.status());
                if let Some(headers) = answer.headers_mut() {
                    *headers = response.headers().clone();
                }
                let mut body = Vec::new();
                while let Some(chunk) = response.chunk().await? {
                    if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                        return Err(format!(
                            "the collector's answer is over {MAX_ANSWER_BYTES} bytes"
                        )
                        .into());
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok::<_, HttpError>(answer.body(Bytes::from(body))?)
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(answer) => answer,
                Err(_) => Err(format!("the collector did not answer within {timeout:?}").into()),
            }
        });
        Box::pin(async move { sent.await? })
    }
}

/// JSON log lines with the id of the trace (and span) the event happened in, when there is one:
/// `{"trace_id":"…","span_id":"…",…}`, so that a log line leads to its trace.
struct WithTraceId(Format<Json>);

impl<S, N> FormatEvent<S, N> for WithTraceId
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        // The entered span's context, made current by tracing's bridge as it was entered.
        let current = opentelemetry::Context::current();
        let span = current.span();
        let context = span.span_context();
        if !context.is_valid() {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{}\",\"span_id\":\"{}\",{rest}",
                context.trace_id(),
                context.span_id()
            ),
            None => writer.write_str(&line),
        }
    }
}
