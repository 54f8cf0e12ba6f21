// ClientChecks.cs: checks of TokenResolverClient.cs through its public API, run by
// crates/cli/tests/it/csharp.rs under mono against a real sidecar (TOKEN_RESOLVER_URL) whose
// default authUrl issued ALICE_TOKEN: the JSON reader's strictness, the sidecar's answers and
// error codes, the bounds of a call (its time, and the size of an answer, through the client's
// HttpClient or the caller's), and the events reader's parsing, bounds, idle timeout, backoff and
// stop. Two small servers of its own on loopback stand for a sidecar that does not answer and
// one that sends a scripted answer. Prints "ok NAME" per check, or "FAIL NAME: why" and exits 1.
//
//   mcs -r:System.Net.Http.dll -r:TokenResolverClient.dll -out:ClientChecks.exe ClientChecks.cs

using System;
using System.Collections.Generic;
using System.IO;
using System.Net;
using System.Net.Http;
using System.Net.Sockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using TokenResolver;

static class ClientChecks
{
    static readonly TimeSpan Bound = TimeSpan.FromSeconds(10);
    static int failures;

    static int Main()
    {
        var url = Environment.GetEnvironmentVariable("TOKEN_RESOLVER_URL");
        var token = Environment.GetEnvironmentVariable("ALICE_TOKEN");
        Check("json_accepts", JsonAccepts);
        Check("json_refuses", JsonRefuses);
        Check("json_quote_round_trips", JsonQuoteRoundTrips);
        Check("resolve_answers_the_user", () => ResolveAnswersTheUser(url, token));
        Check("resolve_through_the_callers_http_client", () => ResolveThroughTheCallersHttpClient(url, token));
        Check("resolve_with_a_session_then_its_refresh", () => ResolveWithASessionThenItsRefresh(url, token));
        Check("a_refused_token_carries_the_code_and_not_the_token", () => ARefusedTokenCarriesTheCode(url));
        Check("a_bad_session_names_the_field", () => ABadSessionNamesTheField(url, token));
        Check("forget_escapes_the_session", () => ForgetEscapesTheSession(url));
        Check("no_sidecar_is_sidecar_unavailable", NoSidecarIsUnavailable);
        Check("a_silent_sidecar_is_bounded_by_request_timeout", ASilentSidecarIsBounded);
        Check("an_answer_past_the_bound_is_sidecar_bad_answer", AnAnswerPastTheBoundIsABadAnswer);
        Check("events_stop_on_cancel_and_run_again", () => EventsStopOnCancel(url));
        Check("events_parse_the_stream_and_resync_on_what_they_cannot_read", EventsParseTheStream);
        Check("a_silent_stream_is_lost_and_tried_again_with_backoff", ASilentStreamIsLost);
        Check("a_stream_past_the_bound_is_lost_with_a_resync", AStreamPastTheBoundIsLost);
        return failures == 0 ? 0 : 1;
    }

    static void Check(string name, Action check)
    {
        try
        {
            check();
            Console.WriteLine("ok " + name);
        }
        catch (Exception e)
        {
            failures++;
            Console.WriteLine("FAIL " + name + ": " + e);
        }
    }

    static void Assert(bool holds, string what)
    {
        if (!holds)
        {
            throw new Exception("expected " + what);
        }
    }

    static T Await<T>(Task<T> task)
    {
        Assert(task.Wait(Bound), "an answer within the bound");
        return task.Result;
    }

    static TokenResolverException Refusal(Func<Task> call)
    {
        try
        {
            call().Wait(Bound);
        }
        catch (AggregateException e)
        {
            var refused = e.InnerException as TokenResolverException;
            Assert(refused != null, "a TokenResolverException, not " + e.InnerException);
            return refused;
        }
        throw new Exception("expected the call to fail");
    }

    static void JsonAccepts()
    {
        var root = (Dictionary<string, object>)Json.Parse(
            " {\"user\": {\"id\": 1, \"name\": \"Al\\u00e9 \\ud83d\\ude00\\n\\\"\\\\\\/\"}, \"expires_at\": null,"
            + " \"list\": [-0, 2.5e3, true, false, -9223372036854775808, 1E-2, []], \"empty\": {}} ");
        var user = (Dictionary<string, object>)root["user"];
        Assert(user["id"] is long && (long)user["id"] == 1, "id 1 as a long");
        Assert((string)user["name"] == "Al\u00e9 \U0001F600\n\"\\/", "the escapes decoded");
        Assert(root.ContainsKey("expires_at") && root["expires_at"] == null, "null kept");
        var list = (List<object>)root["list"];
        Assert((long)list[0] == 0 && (double)list[1] == 2500.0 && (bool)list[2] && !(bool)list[3], "numbers and booleans");
        Assert((long)list[4] == long.MinValue && (double)list[5] == 0.01 && ((List<object>)list[6]).Count == 0, "the edges");
        Assert(((Dictionary<string, object>)root["empty"]).Count == 0, "an empty object");
    }

    static void JsonRefuses()
    {
        string[] bad =
        {
            "", " ", "{", "}", "{\"a\":1,}", "[1,]", "[1 2]", "01", "1.", ".5", "+1", "-", "1e", "1e400",
            "{\"a\":1,\"a\":2}", "\"a\\x\"", "\"\\u12\"", "\"tab\there\"", "\"abc", "tru", "nul", "True",
            "{} x", "{a:1}", "{'a':1}", "[" + new string('[', 70) + new string(']', 71),
        };
        foreach (var text in bad)
        {
            try
            {
                Json.Parse(text);
            }
            catch (FormatException e)
            {
                Assert(text.Length < 3 || !e.Message.Contains(text), "no text in the error");
                continue;
            }
            throw new Exception("refused: " + Json.Quote(text));
        }
    }

    static void JsonQuoteRoundTrips()
    {
        foreach (var text in new[] { "", "plain", "q\"b\\s/", "\u0000\u0001\u001f\t\r\n", "\u2028\u2029 \U0001F600 \u00e9" })
        {
            var quoted = Json.Quote(text);
            Assert((string)Json.Parse(quoted) == text, "a round trip of " + quoted);
            foreach (var c in quoted)
            {
                Assert(c >= 0x20 && c != '\u2028' && c != '\u2029', "no control character in " + quoted);
            }
        }
    }

    static void ResolveAnswersTheUser(string url, string token)
    {
        using (var client = new TokenResolverClient(url))
        {
            var user = Await(client.ResolveAsync(token));
            Assert(user.UserId == 1 && user.UserName == "Alice", "Alice, not " + user);
            Assert(user.ExpiresAt.HasValue && user.ExpiresAt.Value > DateTimeOffset.UtcNow, "an expiry ahead");
            Assert(user.Refreshed == null, "no refresh without a session");
            Assert(!user.ToString().Contains(token), "no token in ToString");
        }
    }

    static void ResolveThroughTheCallersHttpClient(string url, string token)
    {
        using (var http = new HttpClient())
        {
            using (var client = new TokenResolverClient(url, http))
            {
                var user = Await(client.ResolveAsync(token));
                Assert(user.UserId == 1 && user.UserName == "Alice", "Alice, not " + user);
            }
            // The caller's HttpClient is the caller's: disposing the client leaves it usable.
            using (var client = new TokenResolverClient(url, http))
            {
                Assert(Await(client.ResolveAsync(token)).UserId == 1, "Alice again");
            }
        }
    }

    static void ResolveWithASessionThenItsRefresh(string url, string token)
    {
        using (var client = new TokenResolverClient(url))
        {
            var first = Await(client.ResolveAsync(token, null, "checks-session"));
            Assert(first.Refreshed == false, "a new session");
            var again = Await(client.ResolveAsync(token, session: "checks-session"));
            Assert(again.Refreshed == true, "the refresh of the session");
            Assert(client.ForgetAsync("checks-session").Wait(Bound), "forgotten");
            var anew = Await(client.ResolveAsync(token, session: "checks-session"));
            Assert(anew.Refreshed == false, "a new session once forgotten");
            Assert(client.ForgetAsync("checks-session").Wait(Bound), "forgotten");
        }
    }

    static void ARefusedTokenCarriesTheCode(string url)
    {
        const string secret = "not-issued-token-of-the-checks";
        using (var client = new TokenResolverClient(url))
        {
            var e = Refusal(() => client.ResolveAsync(secret));
            Assert(e.Code == "token_rejected" && e.Status == 401, "token_rejected (401), not " + e.Code + " " + e.Status);
            Assert(e.IsRefused && !e.IsRetryable, "refused, not retryable");
            Assert(!e.ToString().Contains(secret), "no token in the exception");
            var wrongUrl = Refusal(() => client.ResolveAsync(secret, "http://integrator.invalid"));
            Assert(wrongUrl.Code == "auth_url_not_allowed" && wrongUrl.Status == 403 && wrongUrl.IsRefused,
                "auth_url_not_allowed (403), not " + wrongUrl.Code + " " + wrongUrl.Status);
        }
    }

    static void ABadSessionNamesTheField(string url, string token)
    {
        using (var client = new TokenResolverClient(url))
        {
            var e = Refusal(() => client.ResolveAsync(token, session: "has a space"));
            Assert(e.Code == "invalid_request" && e.Status == 400 && e.Field == "session",
                "invalid_request on session, not " + e.Code + " " + e.Field);
        }
    }

    static void ForgetEscapesTheSession(string url)
    {
        using (var client = new TokenResolverClient(url))
        {
            Assert(client.ForgetAsync("never-kept").Wait(Bound), "204 for a session not kept");
            // Escaped, the space reaches the sidecar as part of the id, which it refuses; a
            // slash stays in the id rather than making another path.
            var space = Refusal(() => client.ForgetAsync("has space"));
            Assert(space.Code == "invalid_request" && space.Status == 400, "invalid_request, not " + space.Code);
            Assert(client.ForgetAsync("a/b?c#d").Wait(Bound), "204 for an id with / ? #");
        }
    }

    static void NoSidecarIsUnavailable()
    {
        var port = FreePort();
        using (var client = new TokenResolverClient("http://127.0.0.1:" + port))
        {
            var e = Refusal(() => client.ResolveAsync("any-token"));
            Assert(e.Code == TokenResolverException.SidecarUnavailable && e.Status == 0 && e.IsRetryable,
                "sidecar_unavailable, not " + e.Code);
        }
    }

    static void ASilentSidecarIsBounded()
    {
        using (var silent = new Silent())
        using (var client = new TokenResolverClient(silent.Url))
        {
            client.RequestTimeout = TimeSpan.FromMilliseconds(300);
            var started = DateTime.UtcNow;
            var e = Refusal(() => client.ResolveAsync("any-token"));
            var took = DateTime.UtcNow - started;
            Assert(e.Code == TokenResolverException.SidecarUnavailable && e.IsRetryable, "sidecar_unavailable, not " + e.Code);
            Assert(took < TimeSpan.FromSeconds(5), "within the timeout, not " + took);
            using (var cancel = new CancellationTokenSource(200))
            {
                try
                {
                    client.RequestTimeout = TimeSpan.FromSeconds(30);
                    client.ResolveAsync("any-token", cancellationToken: cancel.Token).Wait(Bound);
                    throw new Exception("expected a cancellation");
                }
                catch (AggregateException cancelled)
                {
                    Assert(cancelled.InnerException is OperationCanceledException, "cancelled, not " + cancelled.InnerException);
                }
            }
        }
    }

    /// <summary>The largest answer the client reads (TokenResolverClient.MaxAnswerBytes).</summary>
    const int MaxAnswerBytes = 64 * 1024;

    static void AnAnswerPastTheBoundIsABadAnswer()
    {
        // One that says its length, and one that never ends: neither is read past the bound,
        // through the client's own HttpClient or the caller's (whose buffer limit is 2 GB).
        var declared = Encoding.ASCII.GetBytes("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + (MaxAnswerBytes + 1) + "\r\n\r\n" + new string(' ', MaxAnswerBytes + 1));
        var answers = new Dictionary<string, Func<Stream, Task>>
        {
            { "declared", stream => stream.WriteAsync(declared, 0, declared.Length) },
            { "endless", Endless },
        };
        foreach (var answer in answers)
        {
            for (int own = 0; own < 2; own++)
            {
                var which = answer.Key + (own == 1 ? " through the client's HttpClient" : " through the caller's");
                using (var sidecar = new Scripted(answer.Value))
                using (var http = new HttpClient())
                using (var client = own == 1 ? new TokenResolverClient(sidecar.Url) : new TokenResolverClient(sidecar.Url, http))
                {
                    // Longer than the check's bound: only the size may end the call in time.
                    client.RequestTimeout = TimeSpan.FromSeconds(30);
                    var e = Refusal(() => client.ResolveAsync("any-token"));
                    Assert(e.Code == TokenResolverException.SidecarBadAnswer && e.Status == 200 && !e.IsRetryable,
                        "sidecar_bad_answer (200), not retryable, " + which + ", not " + e.Code + " " + e.Status + " " + e.IsRetryable);
                    Assert(e.Message.Contains("longer than " + MaxAnswerBytes), "the bound named, " + which + ", not " + e.Message);
                }
            }
        }
    }

    /// <summary>A 200 whose chunked body never ends, until the client goes away.</summary>
    static async Task Endless(Stream stream)
    {
        var head = Encoding.ASCII.GetBytes("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
        await stream.WriteAsync(head, 0, head.Length);
        var chunk = Encoding.ASCII.GetBytes("2000\r\n" + new string(' ', 0x2000) + "\r\n");
        for (;;)
        {
            await stream.WriteAsync(chunk, 0, chunk.Length);
        }
    }

    static void EventsStopOnCancel(string url)
    {
        using (var client = new TokenResolverClient(url))
        {
            var events = client.Events();
            var connected = new SemaphoreSlim(0);
            events.Connected += (s, e) => connected.Release();
            for (int run = 0; run < 2; run++)
            {
                using (var stop = new CancellationTokenSource())
                {
                    var running = events.RunAsync(stop.Token);
                    Assert(connected.Wait(Bound), "a stream opened");
                    try
                    {
                        events.RunAsync(stop.Token);
                        throw new Exception("expected a second run to be refused");
                    }
                    catch (InvalidOperationException)
                    {
                    }
                    var deadline = DateTime.UtcNow + Bound;
                    while (events.LastEventId == null && DateTime.UtcNow < deadline)
                    {
                        Thread.Sleep(10);
                    }
                    Assert(events.LastEventId != null, "the id the sidecar sends when a stream opens");
                    stop.Cancel();
                    Assert(running.Wait(Bound) && running.Status == TaskStatus.RanToCompletion, "the run ended on cancel");
                }
            }
        }
    }

    static void EventsParseTheStream()
    {
        var script =
            ": a comment\r\n"
            + "id: e-1\r\n\r\n"
            + "id: e-2\nevent: revoked\ndata: {\"type\":\"revoked\",\"session\":\"s1\",\"user_id\":7,\"reason\":\"revoked\"}\n\n"
            + "id: e-3\nevent: reauth_required\ndata:{\"type\":\"reauth_required\",\n"
            + "data: \"session\":\"s2\",\"within_ms\":1500}\n\n"
            + "id: e-4\nevent: something_new\ndata: {}\n\n"
            + "id: e-5\nevent: revoked\ndata: {\"session\":\"s3\"}\n\n"
            + "id: e-5b\revent: revoked\rdata: {\"type\":\"revoked\",\"session\":\"s5\",\"user_id\":9,\"reason\":\"revoked\"}\r\r"
            + "id: e-6\nevent: resync\ndata: {\"type\":\"resync\"}\n\n"
            + "event: revoked\ndata: {\"type\":\"revoked\",\"session\":\"s4\",\"user_id\":8,\"reason\":\"session_expired\"}\n";
        using (var sidecar = new Scripted(script))
        using (var client = new TokenResolverClient(sidecar.Url))
        using (var stop = new CancellationTokenSource())
        {
            var seen = new List<string>();
            var done = new ManualResetEventSlim();
            var events = client.Events();
            events.Revoked += (s, e) => seen.Add("revoked " + e.Session + " " + e.UserId + " " + e.Reason + " " + e.EventId);
            events.ReauthRequired += (s, e) => seen.Add("reauth " + e.Session + " " + (long)e.Within.TotalMilliseconds + " " + e.EventId);
            events.Resync += (s, e) =>
            {
                seen.Add("resync " + (e.EventId ?? "none"));
                if (e.EventId == "e-6")
                {
                    done.Set();
                }
            };
            var running = events.RunAsync(stop.Token);
            Assert(done.Wait(Bound), "the stream read to its resync");
            stop.Cancel();
            Assert(running.Wait(Bound), "stopped");
            var expected = new[] { "revoked s1 7 revoked e-2", "reauth s2 1500 e-3", "resync none", "revoked s5 9 revoked e-5b", "resync e-6" };
            Assert(string.Join("|", seen) == string.Join("|", expected), string.Join("|", expected) + ", not " + string.Join("|", seen));
            Assert(events.LastEventId == "e-6", "the last id read, not " + events.LastEventId);
        }
    }

    static void ASilentStreamIsLost()
    {
        using (var sidecar = new Scripted(": opened\n\n"))
        using (var client = new TokenResolverClient(sidecar.Url))
        using (var stop = new CancellationTokenSource())
        {
            var events = client.Events();
            events.IdleTimeout = TimeSpan.FromMilliseconds(300);
            events.InitialBackoff = TimeSpan.FromMilliseconds(100);
            events.MaxBackoff = TimeSpan.FromMilliseconds(400);
            var pauses = new List<TimeSpan>();
            var reasons = new List<string>();
            var enough = new ManualResetEventSlim();
            events.Disconnected += (s, e) =>
            {
                lock (pauses)
                {
                    pauses.Add(e.RetryIn);
                    reasons.Add(e.Reason);
                    if (pauses.Count == 5)
                    {
                        enough.Set();
                    }
                }
            };
            var running = events.RunAsync(stop.Token);
            Assert(enough.Wait(Bound), "five streams lost");
            stop.Cancel();
            Assert(running.Wait(Bound), "stopped");
            lock (pauses)
            {
                Assert(reasons[0].Contains("silent"), "lost for its silence, not " + reasons[0]);
                // Doubling from 100 ms, capped at 400 ms, each with up to half taken off.
                double[] ceilings = { 100, 200, 400, 400, 400 };
                for (int i = 0; i < 5; i++)
                {
                    var ms = pauses[i].TotalMilliseconds;
                    Assert(ms >= ceilings[i] / 2 && ms <= ceilings[i], "pause " + i + " in [" + ceilings[i] / 2 + ", " + ceilings[i] + "], not " + ms);
                }
                Assert(sidecar.Requests >= 5, "a stream opened each time");
            }
        }
    }

    static void AStreamPastTheBoundIsLost()
    {
        // A line that does not end, and an event whose data lines together pass the bound; the
        // idle timeout is longer than the check's bound, so only the size may end the stream.
        var bigEvent = new StringBuilder("id: e-1\n\nid: e-2\nevent: revoked\n");
        for (int i = 0; i < 70; i++)
        {
            bigEvent.Append("data: ").Append('y', 1000).Append('\n');
        }
        bigEvent.Append('\n');
        var scripts = new Dictionary<string, string>
        {
            { "a line", "id: e-1\n\ndata: " + new string('x', 2 * MaxAnswerBytes) },
            { "an event", bigEvent.ToString() },
        };
        foreach (var script in scripts)
        {
            using (var sidecar = new Scripted(script.Value))
            using (var client = new TokenResolverClient(sidecar.Url))
            using (var stop = new CancellationTokenSource())
            {
                var events = client.Events();
                events.LastEventId = "e-0";
                events.IdleTimeout = TimeSpan.FromSeconds(30);
                events.InitialBackoff = TimeSpan.FromMilliseconds(50);
                var seen = new List<string>();
                var lost = new ManualResetEventSlim();
                events.Resync += (s, e) =>
                {
                    lock (seen)
                    {
                        seen.Add("resync " + (e.EventId ?? "none"));
                    }
                };
                events.Disconnected += (s, e) =>
                {
                    lock (seen)
                    {
                        seen.Add("lost " + e.Reason);
                    }
                    lost.Set();
                };
                var running = events.RunAsync(stop.Token);
                Assert(lost.Wait(Bound), script.Key + ": the stream lost");
                var deadline = DateTime.UtcNow + Bound;
                while (sidecar.Requests < 2 && DateTime.UtcNow < deadline)
                {
                    Thread.Sleep(10);
                }
                stop.Cancel();
                Assert(running.Wait(Bound), "stopped");
                lock (seen)
                {
                    Assert(seen.Count >= 2 && seen[0] == "resync none" && seen[1].StartsWith("lost StreamTooLongException")
                        && seen[1].Contains("longer than " + MaxAnswerBytes),
                        script.Key + ": a Resync, then the stream lost for its size, not " + string.Join(" | ", seen));
                }
                var ids = sidecar.LastEventIds;
                Assert(ids.Count >= 2 && ids[0] == "e-0" && ids[1] == null,
                    script.Key + ": opened with e-0, then again without an id, not " + string.Join(", ", ids.ConvertAll(i => i ?? "none")));
            }
        }
    }

    static int FreePort()
    {
        var probe = new TcpListener(IPAddress.Loopback, 0);
        probe.Start();
        var port = ((IPEndPoint)probe.LocalEndpoint).Port;
        probe.Stop();
        return port;
    }

    /// <summary>A server on loopback that accepts and never answers.</summary>
    sealed class Silent : IDisposable
    {
        readonly TcpListener listener = new TcpListener(IPAddress.Loopback, 0);
        readonly List<TcpClient> held = new List<TcpClient>();

        internal Silent()
        {
            listener.Start();
            Accept();
        }

        internal string Url
        {
            get { return "http://127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port; }
        }

        async void Accept()
        {
            try
            {
                for (;;)
                {
                    var client = await listener.AcceptTcpClientAsync();
                    lock (held)
                    {
                        held.Add(client);
                    }
                }
            }
            catch (Exception)
            {
                // Stopped.
            }
        }

        public void Dispose()
        {
            listener.Stop();
            lock (held)
            {
                held.ForEach(c => c.Close());
            }
        }
    }

    /// <summary>A server on loopback that answers every request as it is told (by default
    /// with an event stream of <c>script</c>, then stays silent with the stream open), and
    /// keeps the <c>Last-Event-ID</c> of each.</summary>
    sealed class Scripted : IDisposable
    {
        readonly TcpListener listener = new TcpListener(IPAddress.Loopback, 0);
        readonly Func<Stream, Task> answer;
        readonly List<TcpClient> held = new List<TcpClient>();
        readonly List<string> lastEventIds = new List<string>();

        internal Scripted(string script)
            : this(stream => EventStream(stream, script))
        {
        }

        internal Scripted(Func<Stream, Task> answer)
        {
            this.answer = answer;
            listener.Start();
            Accept();
        }

        internal string Url
        {
            get { return "http://127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port; }
        }

        internal int Requests
        {
            get { return LastEventIds.Count; }
        }

        /// <summary>The <c>Last-Event-ID</c> of each request so far, null where there was
        /// none.</summary>
        internal List<string> LastEventIds
        {
            get
            {
                lock (lastEventIds)
                {
                    return new List<string>(lastEventIds);
                }
            }
        }

        static Task EventStream(Stream stream, string script)
        {
            var body = Encoding.UTF8.GetBytes(script);
            var head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + body.Length.ToString("x") + "\r\n";
            var bytes = new List<byte>(Encoding.ASCII.GetBytes(head));
            bytes.AddRange(body);
            bytes.AddRange(Encoding.ASCII.GetBytes("\r\n"));
            return stream.WriteAsync(bytes.ToArray(), 0, bytes.Count);
        }

        async void Accept()
        {
            try
            {
                for (;;)
                {
                    var client = await listener.AcceptTcpClientAsync();
                    lock (held)
                    {
                        held.Add(client);
                    }
                    Serve(client);
                }
            }
            catch (Exception)
            {
                // Stopped.
            }
        }

        async void Serve(TcpClient client)
        {
            try
            {
                var stream = client.GetStream();
                var reader = new StreamReader(stream, Encoding.ASCII);
                // The request's head, up to its blank line; its body, if any, is not read.
                string lastEventId = null;
                for (;;)
                {
                    var line = await reader.ReadLineAsync();
                    if (string.IsNullOrEmpty(line))
                    {
                        break;
                    }
                    if (line.StartsWith("Last-Event-ID:", StringComparison.OrdinalIgnoreCase))
                    {
                        lastEventId = line.Substring("Last-Event-ID:".Length).Trim();
                    }
                }
                lock (lastEventIds)
                {
                    lastEventIds.Add(lastEventId);
                }
                await answer(stream);
            }
            catch (Exception)
            {
                // The client went away.
            }
        }

        public void Dispose()
        {
            listener.Stop();
            lock (held)
            {
                held.ForEach(c => c.Close());
            }
        }
    }
}
