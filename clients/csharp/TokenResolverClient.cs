// TokenResolverClient.cs: a C# client of the token-resolver sidecar (docs/sidecar.md), for Unity
// and .NET game servers. One file, no package: it needs only what the class libraries of .NET,
// Mono and Unity have (System.Net.Http's HttpClient). Copy it into a project as it is.
//
// What it owns, by type:
// - TokenResolverClient: the calls, POST /v1/resolve (ResolveAsync) and DELETE /v1/sessions/{id}
//   (ForgetAsync), with a timeout each.
// - ResolveResult and TokenResolverException: what a call answers; an error carries the
//   sidecar's stable code (token_rejected, refresh_mismatch, auth_unavailable, ...).
// - EventsReader: GET /v1/events followed as Server-Sent Events, raising Revoked,
//   ReauthRequired and Resync; it comes back with Last-Event-ID after a break, with exponential
//   backoff and jitter, until its CancellationToken is cancelled.
// - Json: a small strict reader of the sidecar's answers (System.Text.Json is not in Mono or
//   every Unity profile) and a writer of JSON strings.
//
// The access token goes into the body of POST /v1/resolve and nowhere else: never into an
// exception's message, an event or a log line.

using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Net;
using System.Net.Http;
using System.Net.Http.Headers;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace TokenResolver
{
    /// <summary>A player as the sidecar resolved them: the answer of
    /// <see cref="TokenResolverClient.ResolveAsync"/>.</summary>
    public sealed class ResolveResult
    {
        internal ResolveResult(long userId, string userName, DateTimeOffset? expiresAt, bool? refreshed)
        {
            UserId = userId;
            UserName = userName;
            ExpiresAt = expiresAt;
            Refreshed = refreshed;
        }

        /// <summary>The integrator's user id.</summary>
        public long UserId { get; private set; }

        /// <summary>The user's display name.</summary>
        public string UserName { get; private set; }

        /// <summary>When the token expires, when the integrator or the token says; null
        /// otherwise.</summary>
        public DateTimeOffset? ExpiresAt { get; private set; }

        /// <summary>For a resolve that named a session: whether it replaced the token of a session
        /// the sidecar already kept (a refresh). Null when no session was named.</summary>
        public bool? Refreshed { get; private set; }

        /// <summary>The user, never the token.</summary>
        public override string ToString()
        {
            return "user " + UserId.ToString(CultureInfo.InvariantCulture) + " (" + UserName + ")";
        }
    }

    /// <summary>A call the sidecar refused, or could not answer. <see cref="Code"/> is the stable
    /// string to act on; the message names neither the token nor the integrator's
    /// answer.</summary>
    public sealed class TokenResolverException : Exception
    {
        /// <summary>The code of a call the sidecar did not answer: it could not be reached, or
        /// did not answer within <see cref="TokenResolverClient.RequestTimeout"/>. Retryable.</summary>
        public const string SidecarUnavailable = "sidecar_unavailable";

        /// <summary>The code of an answer this client cannot read (not the sidecar's JSON, an
        /// unexpected status, or longer than 64 KiB). Not retryable.</summary>
        public const string SidecarBadAnswer = "sidecar_bad_answer";

        internal TokenResolverException(string code, int status, string message, bool retryable,
            TimeSpan? retryAfter, string field, Exception inner)
            : base(message, inner)
        {
            Code = code;
            Status = status;
            IsRetryable = retryable;
            RetryAfter = retryAfter;
            Field = field;
        }

        /// <summary>The sidecar's error code (<c>token_missing</c>, <c>token_malformed</c>,
        /// <c>token_rejected</c>, <c>auth_url_not_allowed</c>, <c>auth_unavailable</c>,
        /// <c>auth_timeout</c>, <c>auth_bad_response</c>, <c>overloaded</c>,
        /// <c>refresh_mismatch</c>, <c>too_many_sessions</c>, <c>invalid_request</c>,
        /// <c>request_too_large</c>, <c>internal</c>), or this client's own
        /// <see cref="SidecarUnavailable"/> or <see cref="SidecarBadAnswer"/>.</summary>
        public string Code { get; private set; }

        /// <summary>The HTTP status of the answer; 0 when there was none.</summary>
        public int Status { get; private set; }

        /// <summary>Whether the same call may succeed later (the integrator or the sidecar was
        /// unavailable, busy or slow), as the sidecar says.</summary>
        public bool IsRetryable { get; private set; }

        /// <summary>How long to wait before retrying, when the sidecar said
        /// (<c>Retry-After</c>).</summary>
        public TimeSpan? RetryAfter { get; private set; }

        /// <summary>The request's field at fault, for some <c>invalid_request</c>s (such as
        /// <c>session</c>); null otherwise.</summary>
        public string Field { get; private set; }

        /// <summary>Whether the player must not be admitted on this token: it was refused (401),
        /// its authUrl is not allowed (403), or it belongs to another user than the session's
        /// (409).</summary>
        public bool IsRefused
        {
            get { return Status == 401 || Status == 403 || Status == 409; }
        }
    }

    /// <summary>The sidecar's HTTP API: resolve a token (optionally keeping a session live),
    /// forget a session, and follow the session events (<see cref="Events"/>). Safe to use from
    /// many threads at once; keep one for the process.</summary>
    public sealed class TokenResolverClient : IDisposable
    {
        /// <summary>Where the sidecar listens unless told otherwise.</summary>
        public const string DefaultBaseUrl = "http://127.0.0.1:7360";

        /// <summary>The environment variable <c>token-resolver run</c> sets to the sidecar's
        /// base URL.</summary>
        public const string BaseUrlVariable = "TOKEN_RESOLVER_URL";

        /// <summary>The largest answer read, in bytes: the sidecar's are far smaller. It bounds
        /// each event of the stream too (a line, and an event's data), as the sidecar's are as
        /// small.</summary>
        internal const int MaxAnswerBytes = 64 * 1024;

        /// <summary>Connections to the sidecar at once: Mono and .NET Framework allow 2 per host
        /// by default, and the event stream holds one for as long as it is followed.</summary>
        const int Connections = 32;

        readonly string baseUrl;
        readonly HttpClient http;
        readonly bool ownsHttp;

        /// <summary>A client of the sidecar at <c>TOKEN_RESOLVER_URL</c> when it is set, else at
        /// <see cref="DefaultBaseUrl"/>.</summary>
        public static TokenResolverClient FromEnvironment()
        {
            var url = Environment.GetEnvironmentVariable(BaseUrlVariable);
            return new TokenResolverClient(string.IsNullOrEmpty(url) ? DefaultBaseUrl : url);
        }

        /// <summary>A client of the sidecar at <paramref name="baseUrl"/>
        /// (<c>http://127.0.0.1:7360</c>), with an HttpClient of its own: no proxy (the sidecar
        /// is on loopback), no <c>Expect: 100-continue</c>.</summary>
        /// <exception cref="ArgumentException">The URL is not absolute http or https.</exception>
        public TokenResolverClient(string baseUrl)
            : this(baseUrl, null)
        {
        }

        /// <summary>A client of the sidecar at <paramref name="baseUrl"/> through
        /// <paramref name="http"/>, which the caller keeps and disposes; null for one of its
        /// own. Its <c>Timeout</c> should be infinite: the event stream stays open, and each
        /// call is bounded by <see cref="RequestTimeout"/>. Answers are read with this client's
        /// bound of 64 KiB whatever its <c>MaxResponseContentBufferSize</c>.</summary>
        /// <exception cref="ArgumentException">The URL is not absolute http or https.</exception>
        public TokenResolverClient(string baseUrl, HttpClient http)
        {
            if (baseUrl == null)
            {
                throw new ArgumentNullException("baseUrl");
            }
            Uri parsed;
            if (!Uri.TryCreate(baseUrl, UriKind.Absolute, out parsed)
                || (parsed.Scheme != Uri.UriSchemeHttp && parsed.Scheme != Uri.UriSchemeHttps))
            {
                throw new ArgumentException("the sidecar's base URL must be absolute http:// or https://", "baseUrl");
            }
            this.baseUrl = baseUrl.TrimEnd('/');
            RequestTimeout = TimeSpan.FromSeconds(10);
            if (http != null)
            {
                this.http = http;
                return;
            }
            var handler = new HttpClientHandler { UseProxy = false, AllowAutoRedirect = false };
            this.http = new HttpClient(handler) { Timeout = System.Threading.Timeout.InfiniteTimeSpan };
            this.http.DefaultRequestHeaders.ExpectContinue = false;
            ownsHttp = true;
#if !NET5_0_OR_GREATER
            // Mono (Unity's runtime too) and .NET Framework send HttpClient's requests through
            // the host's ServicePoint, 2 connections unless told: the event stream would leave
            // every resolve one connection to share.
            try
            {
                var point = ServicePointManager.FindServicePoint(parsed);
                point.ConnectionLimit = Math.Max(point.ConnectionLimit, Connections);
            }
            catch (Exception)
            {
                // A runtime without ServicePoints has no such limit.
            }
#endif
        }

        /// <summary>How long one call may take, from sending to the whole answer; past it the
        /// call fails with <see cref="TokenResolverException.SidecarUnavailable"/>. Default 10
        /// seconds (a resolve waits for the integrator when the sidecar has no answer
        /// cached).</summary>
        public TimeSpan RequestTimeout { get; set; }

        /// <summary>The sidecar's base URL, without a trailing slash.</summary>
        public string BaseUrl
        {
            get { return baseUrl; }
        }

        internal HttpClient Http
        {
            get { return http; }
        }

        internal Uri Url(string path)
        {
            return new Uri(baseUrl + path);
        }

        /// <summary>Resolves <paramref name="accessToken"/> to its user: <c>POST /v1/resolve</c>.
        /// With <paramref name="session"/> (your connection id, 1 to 128 visible ASCII characters)
        /// the sidecar keeps that session live and tells <see cref="EventsReader"/> what happens
        /// to it; the same session with a new token is its refresh. Concurrent calls are fine:
        /// the sidecar asks the integrator once for many calls with one token.</summary>
        /// <param name="accessToken">The player's access token; it is sent to the sidecar and
        /// never shown anywhere.</param>
        /// <param name="authUrl">The integrator to ask; null for the sidecar's default
        /// (<c>--auth-url</c>).</param>
        /// <param name="session">The session to keep live; null for a plain resolve.</param>
        /// <param name="cancellationToken">Cancels the call.</param>
        /// <exception cref="TokenResolverException">The sidecar refused the token (its
        /// <c>Code</c> says why: <c>token_rejected</c>, <c>refresh_mismatch</c>, ...), the
        /// integrator could not answer, or the sidecar could not be reached.</exception>
        /// <exception cref="OperationCanceledException">The call was cancelled.</exception>
        public async Task<ResolveResult> ResolveAsync(string accessToken, string authUrl = null,
            string session = null, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (accessToken == null)
            {
                throw new ArgumentNullException("accessToken");
            }
            var body = new StringBuilder("{\"access_token\":");
            Json.WriteString(body, accessToken);
            if (authUrl != null)
            {
                body.Append(",\"auth_url\":");
                Json.WriteString(body, authUrl);
            }
            if (session != null)
            {
                body.Append(",\"session\":");
                Json.WriteString(body, session);
            }
            body.Append('}');
            Answer answer;
            using (var request = new HttpRequestMessage(HttpMethod.Post, Url("/v1/resolve")))
            {
                request.Content = new StringContent(body.ToString(), new UTF8Encoding(false), "application/json");
                answer = await SendAsync(request, "resolve", cancellationToken).ConfigureAwait(false);
            }
            if (answer.Status != 200)
            {
                throw Refusal("resolve", answer);
            }
            try
            {
                var root = Json.Object(Json.Parse(answer.Body));
                var user = Json.Object(Json.Field(root, "user"));
                var expiresAt = Json.Field(root, "expires_at");
                object refreshed;
                root.TryGetValue("refreshed", out refreshed);
                return new ResolveResult(
                    Json.Integer(Json.Field(user, "id")),
                    Json.String(Json.Field(user, "name")),
                    expiresAt == null ? (DateTimeOffset?)null : DateTimeOffset.FromUnixTimeSeconds(Json.Integer(expiresAt)),
                    refreshed == null ? (bool?)null : Json.Bool(refreshed));
            }
            catch (FormatException e)
            {
                throw new TokenResolverException(TokenResolverException.SidecarBadAnswer, 200,
                    "resolve: the sidecar's answer cannot be read: " + e.Message, false, null, null, e);
            }
        }

        /// <summary>Forgets <paramref name="session"/> (<c>DELETE /v1/sessions/{id}</c>): call it
        /// when the player leaves. No event follows; forgetting a session the sidecar does not
        /// keep is not an error.</summary>
        /// <exception cref="TokenResolverException">The sidecar refused the id
        /// (<c>invalid_request</c>) or could not be reached.</exception>
        /// <exception cref="OperationCanceledException">The call was cancelled.</exception>
        public async Task ForgetAsync(string session, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (session == null)
            {
                throw new ArgumentNullException("session");
            }
            Answer answer;
            var url = Url("/v1/sessions/" + Uri.EscapeDataString(session));
            using (var request = new HttpRequestMessage(HttpMethod.Delete, url))
            {
                answer = await SendAsync(request, "forget", cancellationToken).ConfigureAwait(false);
            }
            if (answer.Status != 204)
            {
                throw Refusal("forget", answer);
            }
        }

        /// <summary>A follower of the session events, not started: subscribe to its events, then
        /// call <see cref="EventsReader.RunAsync"/>.</summary>
        public EventsReader Events()
        {
            return new EventsReader(this);
        }

        /// <summary>Disposes the HttpClient when this client made it.</summary>
        public void Dispose()
        {
            if (ownsHttp)
            {
                http.Dispose();
            }
        }

        /// <summary>An answer as it came: the status, the body, <c>Retry-After</c>.</summary>
        struct Answer
        {
            internal int Status;
            internal string Body;
            internal TimeSpan? RetryAfter;
        }

        /// <summary>Sends <paramref name="request"/> and reads the whole answer within
        /// <see cref="RequestTimeout"/>, at most <see cref="MaxAnswerBytes"/> of it: the body is
        /// read here with that bound, whatever the HttpClient's own buffer limit (a caller's
        /// HttpClient has 2 GB). An answer past it is <c>sidecar_bad_answer</c>.</summary>
        async Task<Answer> SendAsync(HttpRequestMessage request, string what, CancellationToken cancellationToken)
        {
            using (var bounded = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
            {
                bounded.CancelAfter(RequestTimeout);
                try
                {
                    using (var response = await http.SendAsync(request, HttpCompletionOption.ResponseHeadersRead, bounded.Token).ConfigureAwait(false))
                    // Mono does not stop a body's read when its token is cancelled: closing the
                    // answer does.
                    using (bounded.Token.Register(response.Dispose))
                    {
                        var status = (int)response.StatusCode;
                        var bytes = await ReadBoundedAsync(response.Content, what, status, bounded.Token).ConfigureAwait(false);
                        var retryAfter = response.Headers.RetryAfter;
                        return new Answer
                        {
                            Status = status,
                            Body = new UTF8Encoding(false, true).GetString(bytes),
                            RetryAfter = retryAfter == null ? null : retryAfter.Delta,
                        };
                    }
                }
                catch (TokenResolverException)
                {
                    throw;
                }
                catch (DecoderFallbackException e)
                {
                    throw new TokenResolverException(TokenResolverException.SidecarBadAnswer, 0,
                        what + ": the sidecar's answer is not UTF-8", false, null, null, e);
                }
                catch (Exception e) when (bounded.IsCancellationRequested)
                {
                    // Cancelled or out of time, whether the wait or the read (ended by closing
                    // the answer) noticed first.
                    if (cancellationToken.IsCancellationRequested)
                    {
                        throw e as OperationCanceledException ?? new OperationCanceledException(cancellationToken);
                    }
                    throw Unavailable(what, "the sidecar did not answer within " + Seconds(RequestTimeout), e);
                }
                catch (OperationCanceledException e)
                {
                    // The Timeout of a caller's HttpClient, shorter than RequestTimeout.
                    throw Unavailable(what, "the sidecar did not answer within the HttpClient's Timeout", e);
                }
                catch (HttpRequestException e)
                {
                    throw Unavailable(what, "the sidecar could not be reached", e);
                }
                catch (IOException e)
                {
                    throw Unavailable(what, "the connection to the sidecar broke", e);
                }
                catch (WebException e)
                {
                    throw Unavailable(what, "the sidecar could not be reached", e);
                }
            }
        }

        /// <summary>The body of an answer, read up to <see cref="MaxAnswerBytes"/>.</summary>
        /// <exception cref="TokenResolverException"><c>sidecar_bad_answer</c>: the body is
        /// longer, by its <c>Content-Length</c> or as it is read.</exception>
        static async Task<byte[]> ReadBoundedAsync(HttpContent content, string what, int status, CancellationToken cancellationToken)
        {
            var declared = content.Headers.ContentLength;
            if (declared > MaxAnswerBytes)
            {
                throw TooLong(what, status);
            }
            var body = new MemoryStream(declared.HasValue ? (int)declared.Value : 1024);
            var chunk = new byte[8192];
            using (var stream = await content.ReadAsStreamAsync().ConfigureAwait(false))
            {
                for (;;)
                {
                    var n = await stream.ReadAsync(chunk, 0, chunk.Length, cancellationToken).ConfigureAwait(false);
                    if (n == 0)
                    {
                        return body.ToArray();
                    }
                    if (body.Length + n > MaxAnswerBytes)
                    {
                        throw TooLong(what, status);
                    }
                    body.Write(chunk, 0, n);
                }
            }
        }

        static TokenResolverException TooLong(string what, int status)
        {
            return new TokenResolverException(TokenResolverException.SidecarBadAnswer, status,
                what + ": the sidecar's answer is longer than " + MaxAnswerBytes.ToString(CultureInfo.InvariantCulture) + " bytes",
                false, null, null, null);
        }

        static string Seconds(TimeSpan span)
        {
            return span.TotalSeconds.ToString("0.###", CultureInfo.InvariantCulture) + " s";
        }

        static TokenResolverException Unavailable(string what, string why, Exception inner)
        {
            return new TokenResolverException(TokenResolverException.SidecarUnavailable, 0,
                what + ": " + why, true, null, null, inner);
        }

        /// <summary>The error a refusal's body names: <c>{"error", "message", "retryable"?,
        /// "field"?}</c>.</summary>
        static TokenResolverException Refusal(string what, Answer answer)
        {
            Dictionary<string, object> body = null;
            try
            {
                body = Json.Parse(answer.Body) as Dictionary<string, object>;
            }
            catch (FormatException)
            {
            }
            object code, message, retryable, field;
            var status = answer.Status.ToString(CultureInfo.InvariantCulture);
            if (body == null || !body.TryGetValue("error", out code) || !(code is string))
            {
                return new TokenResolverException(TokenResolverException.SidecarBadAnswer, answer.Status,
                    what + ": the sidecar answered " + status + " without an error code",
                    answer.Status == 503, answer.RetryAfter, null, null);
            }
            body.TryGetValue("message", out message);
            body.TryGetValue("field", out field);
            bool isRetryable = body.TryGetValue("retryable", out retryable) && retryable is bool
                ? (bool)retryable
                : answer.Status == 503;
            return new TokenResolverException((string)code, answer.Status,
                what + ": " + (string)code + " (" + status + ")" + (message is string ? ": " + (string)message : ""),
                isRetryable, answer.RetryAfter, field as string, null);
        }
    }

    /// <summary>A session was ended: close the player of <see cref="Session"/>.</summary>
    public sealed class RevokedEventArgs : EventArgs
    {
        internal RevokedEventArgs(string eventId, string session, long userId, string reason)
        {
            EventId = eventId;
            Session = session;
            UserId = userId;
            Reason = reason;
        }

        /// <summary>The event's id (opaque).</summary>
        public string EventId { get; private set; }

        /// <summary>The session, as the resolve named it.</summary>
        public string Session { get; private set; }

        /// <summary>Whose session it was.</summary>
        public long UserId { get; private set; }

        /// <summary><c>revoked</c> (a ban, a logout, an invalidation), <c>session_expired</c> (its
        /// token expired and no new one came in time), or the code of a re-check that got no
        /// answer for too long.</summary>
        public string Reason { get; private set; }
    }

    /// <summary>A session's token expired: resolve the session again with a fresh token within
    /// <see cref="Within"/>, or it is revoked.</summary>
    public sealed class ReauthRequiredEventArgs : EventArgs
    {
        internal ReauthRequiredEventArgs(string eventId, string session, TimeSpan within)
        {
            EventId = eventId;
            Session = session;
            Within = within;
        }

        /// <summary>The event's id (opaque).</summary>
        public string EventId { get; private set; }

        /// <summary>The session, as the resolve named it.</summary>
        public string Session { get; private set; }

        /// <summary>How long the session has for a resolve of a new token.</summary>
        public TimeSpan Within { get; private set; }
    }

    /// <summary>What happened to the sessions is not known (the sidecar restarted, the stream
    /// was away longer than the sidecar remembers, or an event could not be read): resolve
    /// every session held again, with its session id, and close those refused.</summary>
    public sealed class ResyncEventArgs : EventArgs
    {
        internal ResyncEventArgs(string eventId)
        {
            EventId = eventId;
        }

        /// <summary>The event's id (opaque); null when this client raised it itself for an
        /// event it could not read.</summary>
        public string EventId { get; private set; }
    }

    /// <summary>The event stream broke or could not be opened; the reader tries again after
    /// <see cref="RetryIn"/>.</summary>
    public sealed class DisconnectedEventArgs : EventArgs
    {
        internal DisconnectedEventArgs(string reason, TimeSpan retryIn)
        {
            Reason = reason;
            RetryIn = retryIn;
        }

        /// <summary>What happened, for a log line.</summary>
        public string Reason { get; private set; }

        /// <summary>When the reader opens the stream again.</summary>
        public TimeSpan RetryIn { get; private set; }
    }

    /// <summary>A handler of the reader's events threw; the reader goes on.</summary>
    public sealed class HandlerFailedEventArgs : EventArgs
    {
        internal HandlerFailedEventArgs(Exception exception)
        {
            Exception = exception;
        }

        /// <summary>What the handler threw.</summary>
        public Exception Exception { get; private set; }
    }

    /// <summary>Follows <c>GET /v1/events</c> (Server-Sent Events) and raises
    /// <see cref="Revoked"/>, <see cref="ReauthRequired"/> and <see cref="Resync"/> for the
    /// sessions named in resolves. A broken stream is opened again with <c>Last-Event-ID</c>, so
    /// that the sidecar sends what was missed, or <c>resync</c> when it cannot (it restarted);
    /// attempts are spaced by exponential backoff with jitter, from
    /// <see cref="InitialBackoff"/> to <see cref="MaxBackoff"/>, and start again from the
    /// shortest once a stream is heard.
    ///
    /// Events are raised one at a time, in the stream's order, on the reader's thread (a
    /// thread-pool thread), or posted to <see cref="SynchronizationContext"/> when it is set
    /// (Unity's main thread, for one).</summary>
    public sealed class EventsReader
    {
        readonly TokenResolverClient client;
        readonly Random random = new Random();
        int running;
        /// <summary>Whether the stream under way sent an id: it was heard.</summary>
        bool heard;

        internal EventsReader(TokenResolverClient client)
        {
            this.client = client;
            InitialBackoff = TimeSpan.FromMilliseconds(250);
            MaxBackoff = TimeSpan.FromSeconds(10);
            IdleTimeout = TimeSpan.FromSeconds(45);
        }

        /// <summary>A session ended: close its player.</summary>
        public event EventHandler<RevokedEventArgs> Revoked;

        /// <summary>A session's token expired: ask its player for a new one.</summary>
        public event EventHandler<ReauthRequiredEventArgs> ReauthRequired;

        /// <summary>Resolve every session held again.</summary>
        public event EventHandler<ResyncEventArgs> Resync;

        /// <summary>A stream opened (the sidecar answered 200).</summary>
        public event EventHandler Connected;

        /// <summary>A stream broke or could not be opened; another attempt follows.</summary>
        public event EventHandler<DisconnectedEventArgs> Disconnected;

        /// <summary>A handler threw. Without a subscriber, the exception goes to
        /// <c>System.Diagnostics.Trace</c>.</summary>
        public event EventHandler<HandlerFailedEventArgs> HandlerFailed;

        /// <summary>The id of the last event read, sent as <c>Last-Event-ID</c> when the stream
        /// opens again; opaque. Null until the first stream is heard.</summary>
        public string LastEventId { get; set; }

        /// <summary>The first pause before opening a broken stream again. Default 250 ms.</summary>
        public TimeSpan InitialBackoff { get; set; }

        /// <summary>The longest pause between attempts. Default 10 s.</summary>
        public TimeSpan MaxBackoff { get; set; }

        /// <summary>How long a stream may be silent before it is taken as lost: the sidecar sends
        /// a comment every 15 s. Default 45 s.</summary>
        public TimeSpan IdleTimeout { get; set; }

        /// <summary>Where events are raised; null (the default) for the reader's own
        /// thread.</summary>
        public SynchronizationContext SynchronizationContext { get; set; }

        /// <summary>Follows the stream until <paramref name="cancellationToken"/> is cancelled,
        /// then completes. Runs on the thread pool; one run at a time.</summary>
        /// <exception cref="InvalidOperationException">The reader is already running.</exception>
        public Task RunAsync(CancellationToken cancellationToken)
        {
            if (Interlocked.Exchange(ref running, 1) == 1)
            {
                throw new InvalidOperationException("this events reader is already running");
            }
            return Task.Run(() => FollowAsync(cancellationToken));
        }

        async Task FollowAsync(CancellationToken cancellationToken)
        {
            try
            {
                int failures = 0;
                while (!cancellationToken.IsCancellationRequested)
                {
                    string reason;
                    heard = false;
                    try
                    {
                        await FollowOnceAsync(cancellationToken).ConfigureAwait(false);
                        reason = "the sidecar ended the stream";
                    }
                    catch (Exception e)
                    {
                        if (cancellationToken.IsCancellationRequested)
                        {
                            break;
                        }
                        reason = Describe(e);
                        if (e is StreamTooLongException)
                        {
                            // Whatever it held is lost: the sessions are resolved again, and
                            // the stream comes back without the id before it, which would make
                            // the sidecar send the same again. (A stream opened without an id
                            // is sent what no stream was sent yet.)
                            LastEventId = null;
                            Raise(Resync, new ResyncEventArgs(null));
                        }
                    }
                    failures = heard ? 1 : failures + 1;
                    var delay = Backoff(failures);
                    Raise(Disconnected, new DisconnectedEventArgs(reason, delay));
                    try
                    {
                        await Task.Delay(delay, cancellationToken).ConfigureAwait(false);
                    }
                    catch (OperationCanceledException)
                    {
                        break;
                    }
                }
            }
            finally
            {
                Interlocked.Exchange(ref running, 0);
            }
        }

        /// <summary>The pause before attempt <paramref name="failures"/> + 1: the backoff doubles
        /// from <see cref="InitialBackoff"/> up to <see cref="MaxBackoff"/>, and a random half of
        /// it is taken off, so that game servers cut off together do not come back
        /// together.</summary>
        TimeSpan Backoff(int failures)
        {
            double ceiling = Math.Max(MaxBackoff.TotalMilliseconds, 1);
            double backoff = Math.Min(ceiling, Math.Max(InitialBackoff.TotalMilliseconds, 1) * Math.Pow(2, Math.Min(failures - 1, 30)));
            double jitter;
            lock (random)
            {
                jitter = random.NextDouble();
            }
            return TimeSpan.FromMilliseconds(backoff / 2 + jitter * backoff / 2);
        }

        static string Describe(Exception e)
        {
            var inner = e;
            while (inner.InnerException != null && (inner is HttpRequestException || inner is AggregateException))
            {
                inner = inner.InnerException;
            }
            return inner.GetType().Name + ": " + inner.Message;
        }

        /// <summary>Opens one stream and reads it until it ends, breaks or goes silent.</summary>
        async Task FollowOnceAsync(CancellationToken cancellationToken)
        {
            using (var request = new HttpRequestMessage(HttpMethod.Get, client.Url("/v1/events")))
            {
                request.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("text/event-stream"));
                var last = LastEventId;
                if (last != null)
                {
                    request.Headers.TryAddWithoutValidation("Last-Event-ID", last);
                }
                HttpResponseMessage response;
                using (var opening = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
                {
                    opening.CancelAfter(client.RequestTimeout);
                    response = await client.Http.SendAsync(request, HttpCompletionOption.ResponseHeadersRead, opening.Token).ConfigureAwait(false);
                }
                using (response)
                using (cancellationToken.Register(response.Dispose))
                {
                    var status = (int)response.StatusCode;
                    var type = response.Content.Headers.ContentType;
                    if (status != 200 || type == null || type.MediaType != "text/event-stream")
                    {
                        throw new TokenResolverException(TokenResolverException.SidecarBadAnswer, status,
                            "events: the sidecar answered " + status.ToString(CultureInfo.InvariantCulture)
                            + " without an event stream", status == 503, null, null, null);
                    }
                    Raise(Connected, EventArgs.Empty);
                    using (var stream = await response.Content.ReadAsStreamAsync().ConfigureAwait(false))
                    {
                        var reader = new EventLineReader(stream, TokenResolverClient.MaxAnswerBytes);
                        await ReadEventsAsync(reader, response, cancellationToken).ConfigureAwait(false);
                    }
                }
            }
        }

        /// <summary>Reads the stream's records (SSE: <c>id</c>, <c>event</c>, <c>data</c>
        /// fields, comments, a blank line ending each) and dispatches each. A line or an event's
        /// data past <see cref="TokenResolverClient.MaxAnswerBytes"/> ends the stream as lost
        /// (<see cref="StreamTooLongException"/>).</summary>
        async Task ReadEventsAsync(EventLineReader reader, HttpResponseMessage response, CancellationToken cancellationToken)
        {
            string idBuffer = null;
            string eventType = null;
            var data = new StringBuilder();
            bool hasData = false;
            for (;;)
            {
                var line = await ReadLineAsync(reader, response, cancellationToken).ConfigureAwait(false);
                if (line == null)
                {
                    return;
                }
                if (line.Length == 0)
                {
                    if (idBuffer != null)
                    {
                        LastEventId = idBuffer;
                        heard = true;
                    }
                    if (hasData)
                    {
                        Dispatch(eventType ?? "message", data.ToString(), idBuffer);
                    }
                    eventType = null;
                    data.Clear();
                    hasData = false;
                    continue;
                }
                if (line[0] == ':')
                {
                    continue;
                }
                var colon = line.IndexOf(':');
                var field = colon < 0 ? line : line.Substring(0, colon);
                var value = colon < 0 ? "" : line.Substring(colon + 1);
                if (value.Length > 0 && value[0] == ' ')
                {
                    value = value.Substring(1);
                }
                switch (field)
                {
                    case "id":
                        if (value.IndexOf('\0') < 0)
                        {
                            idBuffer = value;
                        }
                        break;
                    case "event":
                        eventType = value;
                        break;
                    case "data":
                        if (data.Length + value.Length + 1 > TokenResolverClient.MaxAnswerBytes)
                        {
                            throw new StreamTooLongException("an event's data longer than "
                                + TokenResolverClient.MaxAnswerBytes.ToString(CultureInfo.InvariantCulture) + " characters");
                        }
                        if (hasData)
                        {
                            data.Append('\n');
                        }
                        data.Append(value);
                        hasData = true;
                        break;
                }
            }
        }

        /// <summary>The next line, or null at the end of the stream; a stream silent for
        /// <see cref="IdleTimeout"/> is closed and taken as lost.</summary>
        async Task<string> ReadLineAsync(EventLineReader reader, HttpResponseMessage response, CancellationToken cancellationToken)
        {
            var read = reader.ReadLineAsync();
            using (var idle = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
            {
                var silence = Task.Delay(IdleTimeout, idle.Token);
                var first = await Task.WhenAny(read, silence).ConfigureAwait(false);
                idle.Cancel();
                if (first == read)
                {
                    return await read.ConfigureAwait(false);
                }
            }
            // Closing the answer ends the read under way; its failure is expected.
            response.Dispose();
            Observe(read);
            cancellationToken.ThrowIfCancellationRequested();
            throw new TimeoutException("the event stream was silent for " + IdleTimeout.TotalSeconds.ToString(CultureInfo.InvariantCulture) + " s");
        }

        /// <summary>Marks the failure of <paramref name="abandoned"/> as seen, so that it is not
        /// reported as unobserved.</summary>
        static void Observe(Task abandoned)
        {
            abandoned.ContinueWith(t => t.Exception, TaskContinuationOptions.OnlyOnFaulted);
        }

        /// <summary>Raises the event <paramref name="type"/> names. One this client cannot read
        /// is taken as a resync: something happened to a session, and it is not known
        /// which.</summary>
        void Dispatch(string type, string data, string id)
        {
            try
            {
                switch (type)
                {
                    case "revoked":
                    {
                        var body = Json.Object(Json.Parse(data));
                        Raise(Revoked, new RevokedEventArgs(id, Json.String(Json.Field(body, "session")),
                            Json.Integer(Json.Field(body, "user_id")), Json.String(Json.Field(body, "reason"))));
                        return;
                    }
                    case "reauth_required":
                    {
                        var body = Json.Object(Json.Parse(data));
                        Raise(ReauthRequired, new ReauthRequiredEventArgs(id, Json.String(Json.Field(body, "session")),
                            TimeSpan.FromMilliseconds(Json.Integer(Json.Field(body, "within_ms")))));
                        return;
                    }
                    case "resync":
                        Raise(Resync, new ResyncEventArgs(id));
                        return;
                    default:
                        // A kind this client does not know: a later sidecar's, for another client.
                        return;
                }
            }
            catch (FormatException)
            {
                Raise(Resync, new ResyncEventArgs(null));
            }
        }

        void Raise<T>(EventHandler<T> handler, T args) where T : EventArgs
        {
            if (handler == null)
            {
                return;
            }
            var context = SynchronizationContext;
            if (context == null)
            {
                Invoke(() => handler(this, args));
            }
            else
            {
                context.Post(_ => Invoke(() => handler(this, args)), null);
            }
        }

        void Raise(EventHandler handler, EventArgs args)
        {
            if (handler != null)
            {
                Raise<EventArgs>((sender, e) => handler(sender, e), args);
            }
        }

        void Invoke(Action raise)
        {
            try
            {
                raise();
            }
            catch (Exception e)
            {
                var failed = HandlerFailed;
                if (failed == null)
                {
                    System.Diagnostics.Trace.TraceError("token-resolver events: a handler threw " + e);
                    return;
                }
                try
                {
                    failed(this, new HandlerFailedEventArgs(e));
                }
                catch (Exception)
                {
                    // The reader goes on whatever its handlers do.
                }
            }
        }
    }

    /// <summary>An event stream past this client's bound (a line, or an event's data, longer
    /// than 64 KiB): taken as lost, with a <c>Resync</c>.</summary>
    sealed class StreamTooLongException : Exception
    {
        internal StreamTooLongException(string message)
            : base(message)
        {
        }
    }

    /// <summary>Reads the lines of an event stream (ended by CRLF, LF or CR) through a buffer of
    /// a fixed size, so that a stream without a line end cannot make the client hold more than
    /// that (<c>StreamReader.ReadLine</c> reads a whole line, however long).</summary>
    sealed class EventLineReader
    {
        static readonly UTF8Encoding Utf8 = new UTF8Encoding(false);
        readonly Stream stream;
        readonly int maxLine;
        /// <summary>The line being read and what came after it: at most maxLine bytes and the
        /// line end.</summary>
        readonly byte[] buffer;
        /// <summary>The bytes not returned yet are buffer[start, end).</summary>
        int start, end;
        /// <summary>Where to look for the line end next: the bytes before it have none.</summary>
        int scanned;
        /// <summary>The last line ended with CR: an LF right after it belongs to it.</summary>
        bool afterCarriageReturn;

        internal EventLineReader(Stream stream, int maxLine)
        {
            this.stream = stream;
            this.maxLine = maxLine;
            buffer = new byte[maxLine + 1];
        }

        /// <summary>The next line without its end, or null at the end of the stream (a last
        /// line without an end is dropped, as SSE drops an event not ended).</summary>
        /// <exception cref="StreamTooLongException">More than maxLine bytes came without a
        /// line end.</exception>
        internal async Task<string> ReadLineAsync()
        {
            for (;;)
            {
                if (afterCarriageReturn && start < end)
                {
                    afterCarriageReturn = false;
                    if (buffer[start] == (byte)'\n')
                    {
                        start++;
                        scanned = Math.Max(scanned, start);
                    }
                }
                for (int i = scanned; i < end; i++)
                {
                    var b = buffer[i];
                    if (b == (byte)'\n' || b == (byte)'\r')
                    {
                        // UTF-8 never has these bytes inside a character: the line is whole.
                        var line = Utf8.GetString(buffer, start, i - start);
                        afterCarriageReturn = b == (byte)'\r';
                        start = scanned = i + 1;
                        return line;
                    }
                }
                scanned = end;
                if (end - start > maxLine)
                {
                    throw new StreamTooLongException("an event stream line longer than "
                        + maxLine.ToString(CultureInfo.InvariantCulture) + " bytes");
                }
                if (end == buffer.Length)
                {
                    // Room for the rest of the line: what was returned is dropped.
                    Buffer.BlockCopy(buffer, start, buffer, 0, end - start);
                    end -= start;
                    scanned = end;
                    start = 0;
                }
                int n = await stream.ReadAsync(buffer, end, buffer.Length - end).ConfigureAwait(false);
                if (n == 0)
                {
                    return null;
                }
                end += n;
            }
        }
    }

    /// <summary>A small strict JSON reader (RFC 8259: objects, arrays, strings with escapes,
    /// numbers, true, false, null; nothing after the value; duplicate keys refused) and a writer
    /// of JSON strings. Objects read as <c>Dictionary&lt;string, object&gt;</c>, arrays as
    /// <c>List&lt;object&gt;</c>, integers as <c>long</c>, other numbers as <c>double</c>.
    /// Errors are <see cref="FormatException"/>s naming the offset, never the text.</summary>
    public static class Json
    {
        const int MaxDepth = 64;

        /// <summary>The value <paramref name="text"/> holds.</summary>
        /// <exception cref="FormatException">It is not one JSON value.</exception>
        public static object Parse(string text)
        {
            if (text == null)
            {
                throw new FormatException("no JSON");
            }
            var reader = new Reader(text);
            reader.SkipSpace();
            var value = reader.Value(0);
            reader.SkipSpace();
            if (reader.Position != text.Length)
            {
                throw reader.Error("text after the value");
            }
            return value;
        }

        /// <summary>Appends <paramref name="value"/> as a JSON string.</summary>
        public static void WriteString(StringBuilder into, string value)
        {
            into.Append('"');
            foreach (var c in value)
            {
                switch (c)
                {
                    case '"': into.Append("\\\""); break;
                    case '\\': into.Append("\\\\"); break;
                    case '\n': into.Append("\\n"); break;
                    case '\r': into.Append("\\r"); break;
                    case '\t': into.Append("\\t"); break;
                    default:
                        if (c < 0x20 || c == '\u2028' || c == '\u2029')
                        {
                            into.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        }
                        else
                        {
                            into.Append(c);
                        }
                        break;
                }
            }
            into.Append('"');
        }

        /// <summary><paramref name="value"/> as a JSON string.</summary>
        public static string Quote(string value)
        {
            var into = new StringBuilder(value.Length + 2);
            WriteString(into, value);
            return into.ToString();
        }

        internal static Dictionary<string, object> Object(object value)
        {
            var found = value as Dictionary<string, object>;
            if (found == null)
            {
                throw new FormatException("an object was expected");
            }
            return found;
        }

        internal static object Field(Dictionary<string, object> from, string name)
        {
            object value;
            if (!from.TryGetValue(name, out value))
            {
                throw new FormatException("no field " + name);
            }
            return value;
        }

        internal static string String(object value)
        {
            var found = value as string;
            if (found == null)
            {
                throw new FormatException("a string was expected");
            }
            return found;
        }

        internal static long Integer(object value)
        {
            if (!(value is long))
            {
                throw new FormatException("an integer was expected");
            }
            return (long)value;
        }

        internal static bool Bool(object value)
        {
            if (!(value is bool))
            {
                throw new FormatException("true or false was expected");
            }
            return (bool)value;
        }

        sealed class Reader
        {
            readonly string text;
            internal int Position;

            internal Reader(string text)
            {
                this.text = text;
            }

            internal FormatException Error(string what)
            {
                return new FormatException("JSON: " + what + " at offset " + Position.ToString(CultureInfo.InvariantCulture));
            }

            internal void SkipSpace()
            {
                while (Position < text.Length)
                {
                    var c = text[Position];
                    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
                    {
                        return;
                    }
                    Position++;
                }
            }

            char Peek()
            {
                if (Position >= text.Length)
                {
                    throw Error("unexpected end");
                }
                return text[Position];
            }

            void Expect(char c)
            {
                if (Peek() != c)
                {
                    throw Error("'" + c + "' expected");
                }
                Position++;
            }

            void Literal(string word)
            {
                if (string.CompareOrdinal(text, Position, word, 0, word.Length) != 0)
                {
                    throw Error("unknown literal");
                }
                Position += word.Length;
            }

            internal object Value(int depth)
            {
                if (depth > MaxDepth)
                {
                    throw Error("nesting too deep");
                }
                switch (Peek())
                {
                    case '{': return ObjectValue(depth);
                    case '[': return ArrayValue(depth);
                    case '"': return StringValue();
                    case 't': Literal("true"); return true;
                    case 'f': Literal("false"); return false;
                    case 'n': Literal("null"); return null;
                    default: return Number();
                }
            }

            Dictionary<string, object> ObjectValue(int depth)
            {
                Expect('{');
                var result = new Dictionary<string, object>(StringComparer.Ordinal);
                SkipSpace();
                if (Peek() == '}')
                {
                    Position++;
                    return result;
                }
                for (;;)
                {
                    SkipSpace();
                    if (Peek() != '"')
                    {
                        throw Error("a key expected");
                    }
                    var key = StringValue();
                    SkipSpace();
                    Expect(':');
                    SkipSpace();
                    var value = Value(depth + 1);
                    if (result.ContainsKey(key))
                    {
                        throw Error("duplicate key");
                    }
                    result.Add(key, value);
                    SkipSpace();
                    if (Peek() == ',')
                    {
                        Position++;
                        continue;
                    }
                    Expect('}');
                    return result;
                }
            }

            List<object> ArrayValue(int depth)
            {
                Expect('[');
                var result = new List<object>();
                SkipSpace();
                if (Peek() == ']')
                {
                    Position++;
                    return result;
                }
                for (;;)
                {
                    SkipSpace();
                    result.Add(Value(depth + 1));
                    SkipSpace();
                    if (Peek() == ',')
                    {
                        Position++;
                        continue;
                    }
                    Expect(']');
                    return result;
                }
            }

            string StringValue()
            {
                Expect('"');
                var result = new StringBuilder();
                for (;;)
                {
                    var c = Peek();
                    Position++;
                    if (c == '"')
                    {
                        return result.ToString();
                    }
                    if (c < 0x20)
                    {
                        throw Error("a control character in a string");
                    }
                    if (c != '\\')
                    {
                        result.Append(c);
                        continue;
                    }
                    var escape = Peek();
                    Position++;
                    switch (escape)
                    {
                        case '"': result.Append('"'); break;
                        case '\\': result.Append('\\'); break;
                        case '/': result.Append('/'); break;
                        case 'b': result.Append('\b'); break;
                        case 'f': result.Append('\f'); break;
                        case 'n': result.Append('\n'); break;
                        case 'r': result.Append('\r'); break;
                        case 't': result.Append('\t'); break;
                        case 'u': result.Append(Hex4()); break;
                        default: throw Error("an unknown escape");
                    }
                }
            }

            char Hex4()
            {
                if (Position + 4 > text.Length)
                {
                    throw Error("unexpected end");
                }
                int code = 0;
                for (int i = 0; i < 4; i++)
                {
                    var c = text[Position++];
                    int digit = c >= '0' && c <= '9' ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                        : -1;
                    if (digit < 0)
                    {
                        throw Error("a bad \\u escape");
                    }
                    code = code * 16 + digit;
                }
                return (char)code;
            }

            object Number()
            {
                int start = Position;
                if (Position < text.Length && text[Position] == '-')
                {
                    Position++;
                }
                if (Peek() == '0')
                {
                    Position++;
                }
                else if (!Digits())
                {
                    throw Error("a value expected");
                }
                bool integral = true;
                if (Position < text.Length && text[Position] == '.')
                {
                    Position++;
                    integral = false;
                    if (!Digits())
                    {
                        throw Error("digits expected after '.'");
                    }
                }
                if (Position < text.Length && (text[Position] == 'e' || text[Position] == 'E'))
                {
                    Position++;
                    integral = false;
                    if (Position < text.Length && (text[Position] == '+' || text[Position] == '-'))
                    {
                        Position++;
                    }
                    if (!Digits())
                    {
                        throw Error("digits expected in the exponent");
                    }
                }
                var literal = text.Substring(start, Position - start);
                long whole;
                if (integral && long.TryParse(literal, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out whole))
                {
                    return whole;
                }
                try
                {
                    return double.Parse(literal, NumberStyles.Float, CultureInfo.InvariantCulture);
                }
                catch (OverflowException)
                {
                    // Mono's answer to 1e400, where .NET's is infinity.
                    throw Error("a number out of range");
                }
            }

            bool Digits()
            {
                int start = Position;
                while (Position < text.Length && text[Position] >= '0' && text[Position] <= '9')
                {
                    Position++;
                }
                return Position > start;
            }
        }
    }
}
