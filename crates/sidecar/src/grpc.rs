//! Envoy's external authorization over gRPC (`envoy.service.auth.v3.Authorization/Check`), for
//! Envoy, Istio and Contour: the bearer of the checked request's `authorization` header, the
//! authUrl of the route's `context_extensions["auth_url"]` (optional; the allowlist applies),
//! answered OK with `x-user-id` and `x-user-name` (percent-encoded) for Envoy to set upstream
//! in place of the client's own (and the client's other `x-user-*` and `x-auth-url` removed),
//! or DENIED with the HTTP status, `WWW-Authenticate`, `Retry-After` and the JSON body a
//! bearer API answers (the axum integration's statuses). The protos are `envoy-types`' (precompiled).
//!
//! A request without HTTP attributes is `INVALID_ARGUMENT`; nothing of it is logged. The
//! listener is the listener crate's accept loop, HTTP/2 only: the sidecar's connection cap
//! (one more is closed at once), its head deadline bounding the client's preface, a connection
//! closed once idle for `grpc_idle_timeout` and sent `GOAWAY` at `grpc_max_age`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use axum::response::IntoResponse;
use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse, DeniedHttpResponse,
    HeaderAppendAction, HeaderValueOption, HttpStatusCode, OkHttpResponse,
};
use envoy_types::ext_authz::v3::{
    CheckRequestExt, CheckResponseExt, DeniedHttpResponseBuilder, OkHttpResponseBuilder,
};
use envoy_types::pb::google::protobuf::BoolValue;
use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::{Request, Response, Status, TimeoutExpired};
use tracing::Instrument;

use super::authorize::encoded_name;
use super::Node;
use token_resolver::axum::{bearer_token, AuthRejection};
use token_resolver::ResolveError;
use token_resolver_listener::http::{self, Bounds, Clear, Protocols};
use token_resolver_listener::Stopped;

/// Longest a check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams one connection may have open at once.
const MAX_STREAMS: u32 = 256;
/// How often an idle connection is pinged, and how long the answer may take.
const KEEPALIVE: Duration = Duration::from_secs(20);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest body of a denial read back from the answer a bearer API gives.
const MAX_DENIAL_BODY: usize = 4 * 1024;

/// The `Authorization` service over the sidecar's resolver.
pub(crate) struct Checker {
    node: Arc<Node>,
}

/// Serves the `Authorization` service on `listener` until `stopped` fires.
pub(crate) async fn serve(listener: TcpListener, node: Arc<Node>, stopped: Stopped) {
    let config = &node.config;
    let bounds = Bounds {
        max_connections: config.max_connections,
        max_connections_per_address: config.max_connections,
        head_timeout: config.header_timeout,
        // No grace after the age: the GOAWAY is enough, since each call is bounded by
        // `CHECK_TIMEOUT`.
        protocols: Protocols::Http2 {
            keep_alive_interval: KEEPALIVE,
            keep_alive_timeout: KEEPALIVE_TIMEOUT,
            max_concurrent_streams: MAX_STREAMS,
            idle_timeout: config.grpc_idle_timeout,
            max_age: config.grpc_max_age,
        },
        grace: CHECK_TIMEOUT,
    };
    let routes = Routes::new(AuthorizationServer::new(Checker { node: node.clone() }));
    http::serve_with(listener, routes, bounds, Clear, stopped).await;
}

/// The shorter of [`CHECK_TIMEOUT`] and the client's `grpc-timeout`, as tonic's server reads
/// it (at most 8 digits and a unit; ignored when malformed).
pub(crate) fn check_timeout(request: &Request<CheckRequest>) -> Duration {
    let asked = (request.metadata().get("grpc-timeout"))
        .and_then(|value| value.to_str().ok())
        .filter(|value| !value.is_empty())
        .and_then(|value| {
            let (digits, unit) = value.split_at(value.len() - 1);
            let n: u64 = (digits.len() <= 8).then(|| digits.parse().ok()).flatten()?;
            Some(match unit {
                "H" => Duration::from_secs(n * 3600),
                "M" => Duration::from_secs(n * 60),
                "S" => Duration::from_secs(n),
                "m" => Duration::from_millis(n),
                "u" => Duration::from_micros(n),
                "n" => Duration::from_nanos(n),
                _ => return None,
            })
        });
    asked.map_or(CHECK_TIMEOUT, |asked| asked.min(CHECK_TIMEOUT))
}

#[tonic::async_trait]
impl Authorization for Checker {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        // Answered `CANCELLED` past its deadline, as tonic's server timeout answers.
        let deadline = check_timeout(&request);
        let span = traced_check(&request);
        let checked = self.check_within(request).instrument(span);
        match tokio::time::timeout(deadline, checked).await {
            Ok(answer) => answer,
            Err(_) => Err(Status::cancelled(TimeoutExpired(()).to_string())),
        }
    }
}

/// The check's server span, continuing the trace of the client's request when Envoy passed its
/// `traceparent` in the check's HTTP headers (as it does with tracing on).
fn traced_check(request: &Request<CheckRequest>) -> tracing::Span {
    let mut trace = HeaderMap::new();
    if let Some(headers) = request.get_ref().get_client_headers() {
        for name in [
            token_resolver::trace::TRACEPARENT,
            token_resolver::trace::TRACESTATE,
        ] {
            if let Some(value) = headers
                .get(name)
                .and_then(|v| HeaderValue::from_str(v).ok())
            {
                trace.insert(name, value);
            }
        }
    }
    token_resolver::trace::continue_trace(&trace, || {
        tracing::info_span!(
            "ext_authz_check",
            otel.kind = "server",
            otel.name = "envoy.service.auth.v3.Authorization/Check",
        )
    })
}

impl Checker {
    /// The answer to `request`, with no deadline of its own.
    async fn check_within(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let request = request.into_inner();
        let Some(headers) = request.get_client_headers() else {
            return Err(Status::invalid_argument(
                "the check request carries no HTTP headers (attributes.request.http.headers)",
            ));
        };
        let auth_url = (request.attributes.as_ref())
            .and_then(|attributes| attributes.context_extensions.get("auth_url"))
            .map_or("", String::as_str);
        let answer = match self.resolve(headers.get("authorization"), auth_url).await {
            Ok(user) => allowed(user.id, &user.name, headers.keys()),
            Err(error) => denied(error).await,
        };
        Ok(Response::new(answer))
    }

    /// The user the bearer of `authorization` names at `auth_url` (empty: the default).
    async fn resolve(
        &self,
        authorization: Option<&String>,
        auth_url: &str,
    ) -> Result<token_resolver::Resolution, ResolveError> {
        let token = bearer_of(authorization)?;
        let endpoint = self.node.endpoint(auth_url)?;
        (self.node).resolve_at(auth_url, &endpoint, token).await
    }
}

/// The bearer token of a check's `authorization` header (Envoy passes it as a string), read
/// as a bearer API reads the header.
pub(crate) fn bearer_of(authorization: Option<&String>) -> Result<String, ResolveError> {
    let mut headers = HeaderMap::new();
    if let Some(value) = authorization {
        let value = HeaderValue::from_str(value).map_err(|_| {
            ResolveError::token_malformed(
                "the Authorization header holds bytes outside visible ASCII",
            )
        })?;
        headers.insert(axum::http::header::AUTHORIZATION, value);
    }
    Ok(bearer_token(&headers)?.to_owned())
}

/// OK, with the user's headers for Envoy to set on the request upstream in place of any the
/// client sent, and the client's own `x-user-*` and `x-auth-url` among `client` (the checked
/// request's header names) removed.
pub(crate) fn allowed<'a>(
    id: i64,
    name: &str,
    client: impl Iterator<Item = &'a String>,
) -> CheckResponse {
    let mut ok = OkHttpResponseBuilder::new();
    ok.add_header("x-user-id", id.to_string(), None, false)
        .add_header("x-user-name", encoded_name(name), None, true);
    for header in client {
        let header = header.to_ascii_lowercase();
        let ours = matches!(header.as_str(), "x-user-id" | "x-user-name");
        if !ours && (header.starts_with("x-user-") || header == "x-auth-url") {
            ok.remove_header(header);
        }
    }
    let mut ok = OkHttpResponse::from(ok);
    overwrite(&mut ok.headers);
    let mut response = CheckResponse::with_status(Status::ok("authorized"));
    response.set_http_response(ok);
    response
}

/// Makes each of `options` replace the header's values rather than join them, as every Envoy
/// reads it: `append: false` for those that read only the deprecated `append` (unset meant
/// false, up to Envoy 1.36), and `OVERWRITE_IF_EXISTS_OR_ADD` for those that read
/// `append_action`, whose default appends: a client's own `x-user-id` would then reach the
/// upstream beside the user's, and many frameworks read the first.
#[allow(deprecated)] // `append` is deprecated, and what older Envoy reads.
fn overwrite(options: &mut [HeaderValueOption]) {
    for option in options {
        option.append = Some(BoolValue { value: false });
        option.append_action = HeaderAppendAction::OverwriteIfExistsOrAdd.into();
    }
}

/// DENIED with what a bearer API answers for `error`: its status, challenge, `Retry-After`
/// and JSON body.
async fn denied(error: ResolveError) -> CheckResponse {
    let rejection = AuthRejection::from(error);
    let code = rejection.code();
    let grpc = match rejection.status().as_u16() {
        401 => Status::unauthenticated(code.as_str()),
        403 => Status::permission_denied(code.as_str()),
        _ => Status::unavailable(code.as_str()),
    };
    let http = rejection.into_response();
    let status = HttpStatusCode::try_from(i32::from(http.status().as_u16()))
        .unwrap_or(HttpStatusCode::Forbidden);
    let mut denied = DeniedHttpResponseBuilder::new();
    denied.set_http_status(status);
    for name in [
        "www-authenticate",
        "retry-after",
        "content-type",
        "cache-control",
    ] {
        if let Some(value) = http.headers().get(name).and_then(|v| v.to_str().ok()) {
            denied.add_header(name, value, None, false);
        }
    }
    if let Ok(body) = axum::body::to_bytes(http.into_body(), MAX_DENIAL_BODY).await {
        denied.set_body(String::from_utf8_lossy(&body).into_owned());
    }
    let mut denied = DeniedHttpResponse::from(denied);
    overwrite(&mut denied.headers);
    let mut response = CheckResponse::with_status(grpc);
    response.set_http_response(denied);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(timeout: Option<&str>) -> Duration {
        let mut request = Request::new(CheckRequest::default());
        if let Some(timeout) = timeout {
            request
                .metadata_mut()
                .insert("grpc-timeout", timeout.parse().unwrap());
        }
        check_timeout(&request)
    }

    #[test]
    fn a_check_has_the_shorter_of_its_own_deadline_and_the_clients() {
        assert_eq!(asking(None), CHECK_TIMEOUT);
        assert_eq!(asking(Some("200m")), Duration::from_millis(200));
        assert_eq!(asking(Some("3S")), Duration::from_secs(3));
        assert_eq!(asking(Some("1H")), CHECK_TIMEOUT);
        assert_eq!(asking(Some("5000u")), Duration::from_micros(5000));
        // Malformed or longer than 8 digits: ignored, as tonic's server ignores it.
        assert_eq!(asking(Some("12x")), CHECK_TIMEOUT);
        assert_eq!(asking(Some("m")), CHECK_TIMEOUT);
        assert_eq!(asking(Some("123456789n")), CHECK_TIMEOUT);
    }
}
