//! The sidecar's readers of outside bytes, for the fuzzers and their replay tests (hidden,
//! outside semver): the nginx grants file a starting sidecar reads back, a stream's
//! `Last-Event-ID`, and the body of `POST /v1/resolve`. Thin views over the sidecar's own
//! functions; nothing here is used by the sidecar itself.

use std::fmt;
use std::path::Path;

use axum::http::HeaderValue;
use axum::Json;

use crate::answer::check_session;
use crate::events::{resume_at, Resume};
use crate::resolve::{ResolveBody, BAD_BODY};

/// The grants a starting sidecar reads back from a grants file holding `file`, at `now` (unix
/// seconds), each ending at `latest` at most: `(cache key, until)`, in file order.
pub fn grants_in_force(file: &[u8], now: u64, latest: u64) -> Vec<(String, u64)> {
    crate::nginx_cache::journal::read_in_force(file, now, latest, Path::new("grants"))
        .expect("reading from memory does not fail")
}

/// Where an event stream takes up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastEventId {
    /// No `Last-Event-ID`: sent what is owed.
    Fresh,
    /// After this event of this process.
    After(u64),
    /// An id of another process, or one that cannot be read.
    Unknown,
}

/// Where a stream whose `Last-Event-ID` is `header` takes up in a process whose ids carry
/// `epoch`; `None` when `header` is no header value (hyper never hands one over).
pub fn last_event_id(epoch: u64, header: Option<&[u8]>) -> Option<LastEventId> {
    let header = match header {
        Some(bytes) => Some(HeaderValue::from_bytes(bytes).ok()?),
        None => None,
    };
    Some(match resume_at(epoch, header.as_ref()) {
        Resume::Fresh => LastEventId::Fresh,
        Resume::After(n) => LastEventId::After(n),
        Resume::Unknown => LastEventId::Unknown,
    })
}

/// A body of `POST /v1/resolve` as the sidecar takes it.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolveRequest {
    /// `access_token`.
    pub access_token: String,
    /// `auth_url`, when given and not `null`.
    pub auth_url: Option<String>,
    /// `session`, when given and not `null`.
    pub session: Option<String>,
}

impl fmt::Debug for ResolveRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolveRequest")
            .field("access_token", &"[redacted]")
            .field("auth_url", &self.auth_url)
            .field("session", &self.session)
            .finish()
    }
}

/// The body `bytes` of `POST /v1/resolve` as the sidecar reads it (with
/// `Content-Type: application/json`, within the size limit).
///
/// # Errors
///
/// The message of the 400 `invalid_request` the sidecar answers with: a body that is not the
/// documented object, or a `session` that is not 1 to 128 visible ASCII characters.
pub fn resolve_body(bytes: &[u8]) -> Result<ResolveRequest, &'static str> {
    let Json(body) = Json::<ResolveBody>::from_bytes(bytes).map_err(|_| BAD_BODY)?;
    if let Some(session) = &body.session {
        check_session(session)?;
    }
    Ok(ResolveRequest {
        access_token: body.access_token,
        auth_url: body.auth_url,
        session: body.session,
    })
}

/// What the ext_authz check makes of a `CheckRequest`'s HTTP headers and its `grpc-timeout`.
#[derive(Clone, PartialEq, Eq)]
pub struct ExtAuthzCheck {
    /// The bearer token of `authorization`, or the error's code and message.
    pub token: Result<String, (&'static str, String)>,
    /// The client's headers an allowed check tells Envoy to remove upstream.
    pub removed: Vec<String>,
    /// The headers an allowed check tells Envoy to set, each overwriting the client's.
    pub set: Vec<(String, bool)>,
    /// How long the check may take; `None` when `grpc-timeout` is no metadata value.
    pub deadline: Option<std::time::Duration>,
}

impl fmt::Debug for ExtAuthzCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtAuthzCheck")
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("removed", &self.removed)
            .field("set", &self.set)
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// The ext_authz check of a `CheckRequest` whose HTTP headers are `headers` (Envoy's map:
/// lowercase names, one string each) and whose gRPC metadata has `grpc_timeout`; an allowed
/// check is for user 1 named `name`.
pub fn ext_authz_check(
    headers: &std::collections::HashMap<String, String>,
    grpc_timeout: Option<&str>,
    name: &str,
) -> ExtAuthzCheck {
    use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
    use envoy_types::pb::envoy::service::auth::v3::CheckRequest;

    let token = crate::grpc::bearer_of(headers.get("authorization"))
        .map_err(|e| (e.code().as_str(), e.to_string()));
    let allowed = crate::grpc::allowed(1, name, headers.keys());
    let (removed, set) = match allowed.http_response {
        Some(HttpResponse::OkResponse(ok)) => {
            #[allow(deprecated)] // `append` is what older Envoy reads.
            let set = (ok.headers.iter())
                .filter_map(|option| {
                    let header = option.header.as_ref()?;
                    let overwrites =
                        option.append.is_some_and(|a| !a.value) && option.append_action == 2;
                    Some((header.key.clone(), overwrites))
                })
                .collect();
            (ok.headers_to_remove, set)
        }
        _ => (Vec::new(), Vec::new()),
    };
    let mut request = tonic::Request::new(CheckRequest::default());
    let deadline = match grpc_timeout {
        None => Some(crate::grpc::check_timeout(&request)),
        Some(value) => value.parse().ok().map(|value| {
            request.metadata_mut().insert("grpc-timeout", value);
            crate::grpc::check_timeout(&request)
        }),
    };
    ExtAuthzCheck {
        token,
        removed,
        set,
        deadline,
    }
}
