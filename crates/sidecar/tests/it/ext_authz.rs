//! The sidecar's ext_authz gRPC service through a real gRPC client (tonic's, built from the
//! same Envoy protos), in front of the reference API: what Envoy sends, what it gets back.

use token_resolver_support as support;

use std::collections::HashMap;

use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use token_resolver::Resolver;
use token_resolver_sidecar::{RunningGrpc, Sidecar, SidecarConfig};
use tonic::transport::Channel;

/// A check request as Envoy sends it: the request's headers, and the route's extensions.
fn check_request(headers: &[(&str, &str)], extensions: &[(&str, &str)]) -> CheckRequest {
    let owned = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    headers: owned(headers),
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            context_extensions: owned(extensions),
            ..AttributeContext::default()
        }),
    }
}

/// The headers an answer asks Envoy to add (OK) or to send back (DENIED).
fn headers(answer: &CheckResponse) -> HashMap<String, String> {
    let options = match answer.http_response.as_ref() {
        Some(HttpResponse::OkResponse(ok)) => &ok.headers,
        Some(HttpResponse::DeniedResponse(denied)) => &denied.headers,
        _ => return HashMap::new(),
    };
    options
        .iter()
        .filter_map(|o| o.header.as_ref())
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

/// The HTTP status a DENIED answer asks Envoy to send.
fn denied_status(answer: &CheckResponse) -> Option<i32> {
    match answer.http_response.as_ref() {
        Some(HttpResponse::DeniedResponse(denied)) => denied.status.as_ref().map(|s| s.code),
        _ => None,
    }
}

async fn client(grpc: &RunningGrpc) -> AuthorizationClient<Channel> {
    AuthorizationClient::connect(format!("http://{}", grpc.local_addr()))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_check_is_ok_with_the_users_headers_or_denied_as_a_bearer_api_answers() {
    let api = support::reference_api().await;
    let base = api.base_url();
    let token = support::login_and_take_token(&base, "alice", "wonderland").await;
    let resolver = Resolver::builder().default_auth_url(&base).build().unwrap();
    let grpc = Sidecar::new(resolver, SidecarConfig::default())
        .spawn_grpc("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut client = client(&grpc).await;
    let bearer = format!("Bearer {token}");

    let ok = client
        .check(check_request(&[("authorization", &bearer)], &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.status.as_ref().map(|s| s.code), Some(0), "OK");
    let added = headers(&ok);
    assert_eq!(
        (added["x-user-id"].as_str(), added["x-user-name"].as_str()),
        ("1", "Alice")
    );

    // The route names its authUrl: the API's own, then one outside the allowlist.
    let route = [("auth_url", base.as_str())];
    let at_route = client
        .check(check_request(&[("authorization", &bearer)], &route))
        .await;
    assert_eq!(at_route.unwrap().into_inner().status.unwrap().code, 0);
    let elsewhere = [("auth_url", "https://elsewhere.example")];
    let refused = client
        .check(check_request(&[("authorization", &bearer)], &elsewhere))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        refused.status.as_ref().map(|s| s.code),
        Some(tonic::Code::PermissionDenied as i32)
    );
    assert_eq!(denied_status(&refused), Some(403));

    let rejected = client
        .check(check_request(
            &[("authorization", "Bearer not-issued")],
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rejected.status.as_ref().map(|s| s.code),
        Some(tonic::Code::Unauthenticated as i32)
    );
    assert_eq!(denied_status(&rejected), Some(401));
    assert_eq!(
        headers(&rejected)["www-authenticate"],
        r#"Bearer error="invalid_token""#
    );

    let missing = client
        .check(check_request(&[], &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(denied_status(&missing), Some(401));
    assert_eq!(headers(&missing)["www-authenticate"], "Bearer");

    let empty = client
        .check(CheckRequest { attributes: None })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);
    grpc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_are_closed_at_the_head_deadline_and_one_over_the_cap_at_once() {
    use std::time::{Duration, Instant};
    use support::closed_within;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    let api = support::reference_api().await;
    let base = api.base_url();
    let token = support::login_and_take_token(&base, "alice", "wonderland").await;
    let resolver = Resolver::builder().default_auth_url(&base).build().unwrap();
    let config = SidecarConfig {
        max_connections: 4,
        header_timeout: Duration::from_secs(2),
        ..SidecarConfig::default()
    };
    let grpc = Sidecar::new(resolver, config)
        .spawn_grpc("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = grpc.local_addr();

    // 24 bytes that are not the HTTP/2 preface: closed once read, long before the deadline.
    let mut http1 = TcpStream::connect(addr).await.unwrap();
    http1
        .write_all(b"GET / HTTP/1.1\r\nHost: \r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut http1, Duration::from_secs(1)).await);

    let started = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    // Real time: the kernel queues the four for the listener's accept loop, and nothing shows
    // when that loop has counted them against the cap before the fifth arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut over = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_within(&mut over, Duration::from_secs(1)).await,
        "a fifth connection is closed at once while four hold the cap"
    );
    for socket in &mut silent {
        assert!(
            closed_within(socket, Duration::from_secs(5)).await,
            "a socket that never sent the preface is closed"
        );
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "closed at the head deadline, not before: {:?}",
        started.elapsed()
    );

    let ok = client(&grpc)
        .await
        .check(check_request(
            &[("authorization", &format!("Bearer {token}"))],
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.status.unwrap().code, 0, "the slots came back");
}

/// Which Envoy reads an OK answer's header options.
#[derive(Debug, Clone, Copy)]
enum Envoy {
    /// Up to 1.36: only the deprecated `append`, unset meaning false (replace).
    ReadsAppend,
    /// Since envoyproxy/envoy#42878: `append_action`, whose default appends.
    ReadsAppendAction,
}

/// The request `envoy` sends upstream: `client`'s headers (a header sent twice is two
/// entries) with `ok`'s header options applied and its removals made.
#[allow(deprecated)] // `append`, what older Envoy reads.
fn upstream(
    envoy: Envoy,
    client: &[(&str, &str)],
    ok: &envoy_types::ext_authz::v3::pb::OkHttpResponse,
) -> Vec<(String, String)> {
    use envoy_types::ext_authz::v3::pb::HeaderAppendAction as Action;
    let mut request: Vec<(String, String)> = (client.iter())
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    for option in &ok.headers {
        let header = option.header.as_ref().expect("an option names its header");
        let key = header.key.to_ascii_lowercase();
        let present = request.iter().any(|(k, _)| *k == key);
        let replace = match envoy {
            Envoy::ReadsAppend => !option.append.is_some_and(|append| append.value),
            Envoy::ReadsAppendAction => match Action::try_from(option.append_action) {
                Ok(Action::OverwriteIfExistsOrAdd) => true,
                Ok(Action::AppendIfExistsOrAdd) => false,
                Ok(Action::AddIfAbsent) if present => continue,
                Ok(Action::AddIfAbsent) => false,
                Ok(Action::OverwriteIfExists) if !present => continue,
                Ok(Action::OverwriteIfExists) => true,
                Err(_) => panic!("an append_action Envoy does not know"),
            },
        };
        if replace {
            request.retain(|(k, _)| *k != key);
        }
        request.push((key, header.value.clone()));
    }
    for removed in &ok.headers_to_remove {
        request.retain(|(k, _)| !k.eq_ignore_ascii_case(removed));
    }
    request
}

#[tokio::test]
async fn the_users_headers_replace_the_clients_own_on_every_envoy() {
    // A client that claims to be user 1, "mallory", and names its own integrator, through an
    // Envoy that forwards everything it is not told to replace or remove.
    let api = support::reference_api().await;
    let base = api.base_url();
    let token = support::login_and_take_token(&base, "bob", "builder").await;
    let resolver = Resolver::builder().default_auth_url(&base).build().unwrap();
    let grpc = Sidecar::new(resolver, SidecarConfig::default())
        .spawn_grpc("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let bearer = format!("Bearer {token}");
    let client_headers = [
        ("authorization", bearer.as_str()),
        ("x-user-id", "1"),
        ("x-user-id", "1"),
        ("X-User-Name", "mallory"),
        ("x-user-role", "admin"),
        ("x-auth-url", "http://evil"),
    ];
    // Envoy joins a header sent twice into one entry of the check request.
    let checked = [
        ("authorization", bearer.as_str()),
        ("x-user-id", "1,1"),
        ("x-user-name", "mallory"),
        ("x-user-role", "admin"),
        ("x-auth-url", "http://evil"),
    ];
    let answer = client(&grpc)
        .await
        .check(check_request(&checked, &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.status.as_ref().map(|s| s.code), Some(0), "OK");
    let Some(HttpResponse::OkResponse(ok)) = answer.http_response.as_ref() else {
        panic!("an OK answer with HTTP attributes: {answer:?}");
    };
    assert!(
        ok.headers.len() >= 2,
        "the user's headers: {:?}",
        ok.headers
    );
    for option in &ok.headers {
        #[allow(deprecated)] // `append`, what older Envoy reads.
        let append = option.append.map(|append| append.value);
        assert_eq!(append, Some(false), "append: false on {option:?}");
        assert_eq!(
            option.append_action,
            envoy_types::ext_authz::v3::pb::HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
            "{option:?}"
        );
    }
    for envoy in [Envoy::ReadsAppend, Envoy::ReadsAppendAction] {
        let request = upstream(envoy, &client_headers, ok);
        let values = |name: &str| -> Vec<&str> {
            (request.iter())
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(
            values("x-user-id"),
            ["2"],
            "{envoy:?}: the resolver's user alone"
        );
        assert_eq!(values("x-user-name"), ["Bob"], "{envoy:?}");
        assert!(values("x-user-role").is_empty(), "{envoy:?}");
        assert!(values("x-auth-url").is_empty(), "{envoy:?}");
        assert_eq!(values("authorization"), [bearer.as_str()], "{envoy:?}");
    }
    grpc.shutdown().await;
}

/// A raw HTTP/2 connection to `addr` that has sent its preface and an empty SETTINGS frame.
async fn h2_connection(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    stream
}

/// The type of the next HTTP/2 frame on `stream` (its payload skipped, a PING answered as a
/// client does); `None` once closed.
async fn next_frame(stream: &mut tokio::net::TcpStream) -> Option<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    let (kind, flags) = (head[3], head[4]);
    if kind == 6 && flags & 1 == 0 {
        let mut ack = vec![0, 0, 8, 6, 1, 0, 0, 0, 0];
        ack.extend_from_slice(&payload);
        stream.write_all(&ack).await.ok()?;
    }
    Some(kind)
}

/// A connector for tonic's client that counts the connections it opened and those that ended
/// (the server closed them): what a client's reconnect is seen by.
#[derive(Clone, Default)]
struct Counted {
    opened: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ended: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Counted {
    fn opened(&self) -> usize {
        self.opened.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn ended(&self) -> usize {
        self.ended.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl tonic::codegen::Service<tonic::codegen::http::Uri> for Counted {
    type Response = hyper_util::rt::TokioIo<Watched>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Self::Response>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: tonic::codegen::http::Uri) -> Self::Future {
        let counted = self.clone();
        Box::pin(async move {
            let authority = uri.authority().expect("an address").as_str().to_owned();
            let stream = tokio::net::TcpStream::connect(authority).await?;
            counted
                .opened
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(hyper_util::rt::TokioIo::new(Watched {
                stream,
                ended: Some(counted.ended),
            }))
        })
    }
}

/// A client's connection that counts itself in `ended` when a read finds its end or the client
/// drops it.
struct Watched {
    stream: tokio::net::TcpStream,
    ended: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let (room, before) = (buf.remaining() > 0, buf.filled().len());
        let polled = std::pin::Pin::new(&mut self.stream).poll_read(cx, buf);
        let end = match &polled {
            std::task::Poll::Ready(Ok(())) => room && buf.filled().len() == before,
            std::task::Poll::Ready(Err(_)) => true,
            std::task::Poll::Pending => false,
        };
        if end {
            if let Some(ended) = self.ended.take() {
                ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        polled
    }
}

impl Drop for Watched {
    // The client lets the connection go once the server said GOAWAY: that ends it too.
    fn drop(&mut self) {
        if let Some(ended) = self.ended.take() {
            ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

// Real time: the listener's timers run on the server's runtime against a real socket, and the
// durations are a few hundred milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_connection_is_closed_when_idle_and_sent_goaway_at_its_maximum_age() {
    use std::time::{Duration, Instant};
    use support::closed_within;

    let api = support::reference_api().await;
    let base = api.base_url();
    let token = support::login_and_take_token(&base, "alice", "wonderland").await;
    let resolver = Resolver::builder().default_auth_url(&base).build().unwrap();
    // Long enough that a loaded machine's pause between the calls below cannot close their
    // shared connection as idle, nor the handshake's outlast the "not before" check.
    const IDLE: Duration = Duration::from_secs(1);
    let idle = SidecarConfig {
        grpc_idle_timeout: IDLE,
        ..SidecarConfig::default()
    };
    let grpc = Sidecar::new(resolver.clone(), idle)
        .spawn_grpc("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();

    // A connection that never makes a call: open past nothing, closed at the idle timeout.
    let started = Instant::now();
    let mut quiet = h2_connection(grpc.local_addr()).await;
    assert!(
        !closed_within(&mut quiet, IDLE / 2).await,
        "not closed before its idle timeout"
    );
    assert!(
        closed_within(&mut quiet, IDLE * 3).await,
        "closed once idle for its timeout"
    );
    assert!(started.elapsed() >= IDLE);
    // Told with GOAWAY, then closed: a request that crossed the timeout is answered or refused
    // as one the client may retry, never lost with the socket.
    let mut told = h2_connection(grpc.local_addr()).await;
    let goaway = tokio::time::timeout(IDLE * 4, async {
        let mut goaway = false;
        while let Some(frame) = next_frame(&mut told).await {
            goaway |= frame == 7;
        }
        goaway
    })
    .await;
    assert_eq!(goaway, Ok(true), "GOAWAY before an idle connection's close");

    // Calls keep a connection in use; the client reconnects once it was closed as idle.
    let counted = Counted::default();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", grpc.local_addr()))
        .unwrap()
        .connect_with_connector(counted.clone())
        .await
        .unwrap();
    let mut client = AuthorizationClient::new(channel);
    let bearer = format!("Bearer {token}");
    for call in ["first", "second", "third", "after the idle close"] {
        if call == "after the idle close" {
            assert_eq!(counted.opened(), 1, "the calls shared one connection");
            support::eventually("the idle connection is closed", || counted.ended() == 1).await;
        }
        let ok = client
            .check(check_request(&[("authorization", &bearer)], &[]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(ok.status.unwrap().code, 0, "{call} call");
    }
    assert_eq!(counted.opened(), 2, "the client reconnected");
    // A call longer than the idle timeout holds its connection open to its answer.
    let fresh = support::login_and_take_token(&base, "bob", "builder").await;
    api.api()
        .set_user_latency(IDLE + Duration::from_millis(500));
    let slow = client
        .check(check_request(
            &[("authorization", &format!("Bearer {fresh}"))],
            &[],
        ))
        .await
        .expect("answered on a connection busy past its idle timeout")
        .into_inner();
    assert_eq!(slow.status.unwrap().code, 0);
    api.api().set_user_latency(Duration::ZERO);
    grpc.shutdown().await;

    // A connection older than the maximum age is sent GOAWAY, idle or not.
    let aged = SidecarConfig {
        grpc_max_age: Duration::from_millis(300),
        ..SidecarConfig::default()
    };
    let grpc = Sidecar::new(resolver, aged)
        .spawn_grpc("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let started = Instant::now();
    let mut old = h2_connection(grpc.local_addr()).await;
    let goaway = tokio::time::timeout(Duration::from_secs(3), async {
        while let Some(frame) = next_frame(&mut old).await {
            if frame == 7 {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(goaway, Ok(true), "GOAWAY at the maximum age");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    let closed = tokio::time::timeout(Duration::from_secs(2), async {
        while next_frame(&mut old).await.is_some() {}
    });
    assert!(
        closed.await.is_ok(),
        "closed after GOAWAY, with no call in flight"
    );
    grpc.shutdown().await;
}

#[tokio::test]
async fn a_check_continues_the_trace_envoy_passes_on_to_the_integrator() {
    use opentelemetry::trace::{SpanId, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const CALLER_SPAN: &str = "00f067aa0ba902b7";
    // Spans into memory, for this thread (the current-thread runtime runs the server here too).
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    let _traced = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let api = support::api_answering(|_| support::user_answer(7, "alice")).await;
    let resolver = support::resolver_for(&api.url()).build().unwrap();
    let grpc = Sidecar::new(resolver, SidecarConfig::default())
        .spawn_grpc("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let traceparent = format!("00-{TRACE}-{CALLER_SPAN}-01");
    let bearer = format!("Bearer {}", support::GOOD_TOKEN);
    let answer = client(&grpc)
        .await
        .check(check_request(
            &[("authorization", &bearer), ("traceparent", &traceparent)],
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.status.as_ref().map(|s| s.code), Some(0), "OK");

    let seen = api.seen();
    let sent = seen[0].header("traceparent").expect("a traceparent");
    assert_eq!(sent.split('-').nth(1), Some(TRACE), "{sent}");
    let spans = exporter.get_finished_spans().unwrap();
    let check = (spans.iter())
        .find(|s| s.name == "envoy.service.auth.v3.Authorization/Check")
        .unwrap_or_else(|| panic!("no check span in {spans:?}"));
    assert_eq!(check.parent_span_id, SpanId::from_hex(CALLER_SPAN).unwrap());
    assert!(check.parent_span_is_remote);
}
