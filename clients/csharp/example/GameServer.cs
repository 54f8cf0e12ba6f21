// GameServer.cs: a small game server in C# (Mono, .NET) that resolves its players through the
// token-resolver sidecar with TokenResolverClient.cs, as examples/node-game-server does in Node.js.
//
// Players connect over TCP and send JSON lines, as to the Rust game server:
//   {"type":"connect","access_token":"..."}  ->  {"type":"connected","user":{"id":..,"name":..}}
// Players are untrusted: a line is read into a buffer of MaxLine bytes (16 KiB) and one longer
// is answered {"type":"error","error":"line_too_long",..} and closed, and a connection not
// admitted within LOGIN_TIMEOUT_MS (10000) of being accepted is answered
// {"type":"error","error":"login_timeout",..} and closed, as the Rust game server does.
// Each connection is a sidecar session named by a fresh id. The server follows the sidecar's
// events: on Revoked it tells the player {"type":"revoked","reason":..} and closes the socket; on
// ReauthRequired it asks the player for a new token (sent as another connect: the sidecar's
// refresh); on Resync it resolves every player again, 8 at a time, within RESYNC_WITHIN_MS,
// closing those refused and those it could not check by then. A player who leaves is forgotten
// (DELETE /v1/sessions/{id}).
//
// It prints one line per thing that happens (never a token), which the test reads:
//   csharp game server listening on 127.0.0.1:PORT
//   events: connected
//   connected session=S user=ID name=NAME
//   closed session=S user=ID reason=R
//   closed session=S reason=line_too_long|login_timeout
//   left session=S forgotten
//   reauth_required session=S within_ms=N
//   resync: checking N players
//   resync: done, K kept, C closed
//
//   mcs -r:System.Net.Http.dll -out:GameServer.exe ../TokenResolverClient.cs GameServer.cs
//   TOKEN_RESOLVER_URL=http://127.0.0.1:7360 PORT=7350 mono GameServer.exe

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using TokenResolver;

/// <summary>One player's connection: its session id, its socket, and once resolved its user and
/// the token it was resolved with (kept to resolve it again on a resync).</summary>
sealed class Connection
{
    internal readonly string Session = Guid.NewGuid().ToString("N");
    internal readonly TcpClient Tcp;
    internal readonly StreamWriter Writer;
    internal string Token;
    internal long UserId;

    /// <summary>Whether a connect was accepted: the login timeout no longer applies.</summary>
    internal bool Admitted;

    internal Connection(TcpClient tcp)
    {
        Tcp = tcp;
        Writer = new StreamWriter(tcp.GetStream(), new UTF8Encoding(false)) { AutoFlush = true, NewLine = "\n" };
    }

    /// <summary>Sends one JSON line; a player already gone is not an error.</summary>
    internal void Send(string json)
    {
        lock (Writer)
        {
            try
            {
                Writer.WriteLine(json);
            }
            catch (IOException)
            {
            }
            catch (ObjectDisposedException)
            {
            }
        }
    }

    /// <summary>Closes our side after what was sent, then discards what the player is still
    /// sending (at most 64 KiB, for at most 500 ms) before closing: a socket closed with unread
    /// input makes the kernel send a reset, which can destroy the error before the player reads
    /// it.</summary>
    internal async Task LingerAsync()
    {
        try
        {
            Tcp.Client.Shutdown(SocketShutdown.Send);
            var stream = Tcp.GetStream();
            var discard = new byte[4096];
            var until = DateTime.UtcNow + TimeSpan.FromMilliseconds(500);
            for (int discarded = 0; discarded < 64 * 1024;)
            {
                var left = until - DateTime.UtcNow;
                var read = stream.ReadAsync(discard, 0, discard.Length);
                if (left <= TimeSpan.Zero || await Task.WhenAny(read, Task.Delay(left)).ConfigureAwait(false) != read)
                {
                    LineReader.Observe(read);
                    break;
                }
                var n = await read.ConfigureAwait(false);
                if (n == 0)
                {
                    break;
                }
                discarded += n;
            }
        }
        catch (Exception)
        {
            // Gone already (or closed meanwhile by a Revoked): nothing to linger for.
        }
    }

    /// <summary>Closes the socket after what was sent.</summary>
    internal void Close()
    {
        lock (Writer)
        {
            try
            {
                Tcp.Client.Shutdown(SocketShutdown.Both);
            }
            catch (SocketException)
            {
            }
            catch (ObjectDisposedException)
            {
            }
            Tcp.Close();
        }
    }
}

/// <summary>Reads a player's lines through a buffer of a fixed size: a line is looked for in
/// the bytes as they come, and one longer than the buffer is refused before the newline comes,
/// so that a player cannot make the server hold more than that. (<c>StreamReader.ReadLine</c>
/// reads the whole line, however long, before its length can be checked.)</summary>
sealed class LineReader
{
    readonly Stream stream;
    readonly int maxLine;
    /// <summary>The line being read and what came after it: at most maxLine bytes and the
    /// newline.</summary>
    readonly byte[] buffer;
    /// <summary>The bytes not returned yet are buffer[start, end).</summary>
    int start, end;
    /// <summary>Where to look for the newline next: the bytes before it have none.</summary>
    int scanned;

    internal LineReader(Stream stream, int maxLine)
    {
        this.stream = stream;
        this.maxLine = maxLine;
        buffer = new byte[maxLine + 1];
    }

    /// <summary>The next line, without its "\n" (nor a "\r" before it), as the bytes were:
    /// null at the end of the stream (a last line without a newline is dropped).</summary>
    /// <exception cref="InvalidDataException">More than maxLine bytes came without a newline:
    /// close the connection.</exception>
    internal async Task<byte[]> ReadLineAsync()
    {
        for (;;)
        {
            int newline = Array.IndexOf(buffer, (byte)'\n', scanned, end - scanned);
            if (newline >= 0)
            {
                int length = newline - start;
                if (length > 0 && buffer[newline - 1] == (byte)'\r')
                {
                    length--;
                }
                var line = new byte[length];
                Buffer.BlockCopy(buffer, start, line, 0, length);
                start = scanned = newline + 1;
                return line;
            }
            scanned = end;
            if (end - start > maxLine)
            {
                throw new InvalidDataException("a line longer than " + maxLine.ToString(CultureInfo.InvariantCulture) + " bytes");
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

    /// <summary>Marks the failure of <paramref name="abandoned"/> as seen, so that it is not
    /// reported as unobserved.</summary>
    internal static void Observe(Task abandoned)
    {
        abandoned.ContinueWith(t => t.Exception, TaskContinuationOptions.OnlyOnFaulted);
    }
}

static class GameServer
{
    /// <summary>The longest line a player may send, in bytes without its newline: past it the
    /// connection is closed with line_too_long.</summary>
    const int MaxLine = 16 * 1024;

    /// <summary>Resolves under way at once during a resync.</summary>
    const int ResyncParallel = 8;

    static TokenResolverClient sidecar;

    /// <summary>Players admitted, by session id.</summary>
    static readonly ConcurrentDictionary<string, Connection> players = new ConcurrentDictionary<string, Connection>();

    /// <summary>How long a resync may take: a player not confirmed by then is closed.</summary>
    static TimeSpan resyncWithin;

    /// <summary>How long a connection has from its accept to its admission: past it, it is
    /// closed with login_timeout. Lines that do not admit it do not extend it.</summary>
    static TimeSpan loginTimeout;

    /// <summary>The resync under way: a newer one replaces it.</summary>
    static int resyncs;

    static readonly object printing = new object();

    /// <summary>Strict UTF-8: a line that is not is a bad request.</summary>
    static readonly UTF8Encoding Utf8 = new UTF8Encoding(false, true);

    static int Main()
    {
        MainAsync().GetAwaiter().GetResult();
        return 0;
    }

    static string Setting(string name, string otherwise)
    {
        var value = Environment.GetEnvironmentVariable(name);
        return string.IsNullOrEmpty(value) ? otherwise : value;
    }

    static async Task MainAsync()
    {
        sidecar = TokenResolverClient.FromEnvironment();
        var port = int.Parse(Setting("PORT", "7350"), CultureInfo.InvariantCulture);
        resyncWithin = TimeSpan.FromMilliseconds(double.Parse(Setting("RESYNC_WITHIN_MS", "30000"), CultureInfo.InvariantCulture));
        loginTimeout = TimeSpan.FromMilliseconds(double.Parse(Setting("LOGIN_TIMEOUT_MS", "10000"), CultureInfo.InvariantCulture));
        var listener = new TcpListener(IPAddress.Loopback, port);
        listener.Start();
        Print("csharp game server listening on 127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port.ToString(CultureInfo.InvariantCulture));

        var events = sidecar.Events();
        events.Connected += (sender, e) => Print("events: connected");
        events.Disconnected += (sender, e) =>
            Console.Error.WriteLine("events: " + e.Reason + "; again in " + (int)e.RetryIn.TotalMilliseconds + " ms");
        events.Revoked += (sender, e) => Close(e.Session, e.Reason);
        events.ReauthRequired += (sender, e) =>
        {
            Connection player;
            if (players.TryGetValue(e.Session, out player))
            {
                var within = ((long)e.Within.TotalMilliseconds).ToString(CultureInfo.InvariantCulture);
                player.Send("{\"type\":\"reauth_required\",\"within_ms\":" + within + "}");
                Print("reauth_required session=" + e.Session + " within_ms=" + within);
            }
        };
        // Not on the reader's thread: the resync's resolves take a while, and events keep coming.
        events.Resync += (sender, e) => Background(ResyncAsync());
        events.HandlerFailed += (sender, e) => Console.Error.WriteLine("an event handler failed: " + e.Exception);
        Background(events.RunAsync(CancellationToken.None));

        for (;;)
        {
            var tcp = await listener.AcceptTcpClientAsync().ConfigureAwait(false);
            Background(ServeAsync(new Connection(tcp)));
        }
    }

    /// <summary>Runs <paramref name="task"/> on its own, logging how it failed.</summary>
    static void Background(Task task)
    {
        task.ContinueWith(t => Console.Error.WriteLine("failed: " + t.Exception), TaskContinuationOptions.OnlyOnFaulted);
    }

    static void Print(string line)
    {
        lock (printing)
        {
            Console.Out.WriteLine(line);
            Console.Out.Flush();
        }
    }

    /// <summary>Reads a player's lines until they leave, then forgets their session. A line
    /// past MaxLine, or no admission within the login timeout, closes the connection with an
    /// error saying which.</summary>
    static async Task ServeAsync(Connection connection)
    {
        var loginBy = DateTime.UtcNow + loginTimeout;
        string refused = null;
        try
        {
            var lines = new LineReader(connection.Tcp.GetStream(), MaxLine);
            for (;;)
            {
                var read = lines.ReadLineAsync();
                if (!connection.Admitted && !await WithinAsync(read, loginBy - DateTime.UtcNow).ConfigureAwait(false))
                {
                    LineReader.Observe(read);
                    refused = "login_timeout";
                    connection.Send("{\"type\":\"error\",\"error\":\"login_timeout\",\"message\":"
                        + Json.Quote("no connect within " + Milliseconds(loginTimeout) + " ms of connecting; closing") + "}");
                    break;
                }
                byte[] line;
                try
                {
                    line = await read.ConfigureAwait(false);
                }
                catch (InvalidDataException)
                {
                    refused = "line_too_long";
                    connection.Send("{\"type\":\"error\",\"error\":\"line_too_long\",\"message\":"
                        + Json.Quote("a message is longer than " + MaxLine.ToString(CultureInfo.InvariantCulture) + " bytes; closing") + "}");
                    await connection.LingerAsync().ConfigureAwait(false);
                    break;
                }
                if (line == null || !await OnLineAsync(connection, line).ConfigureAwait(false))
                {
                    break;
                }
            }
        }
        catch (IOException)
        {
        }
        catch (ObjectDisposedException)
        {
        }
        finally
        {
            connection.Close();
            if (refused != null)
            {
                Print("closed session=" + connection.Session + " reason=" + refused);
            }
            Connection gone;
            if (players.TryRemove(connection.Session, out gone))
            {
                await ForgetAsync(connection.Session).ConfigureAwait(false);
            }
        }
    }

    /// <summary>Whether <paramref name="task"/> ended within <paramref name="left"/>.</summary>
    static async Task<bool> WithinAsync(Task task, TimeSpan left)
    {
        if (task.IsCompleted)
        {
            return true;
        }
        if (left <= TimeSpan.Zero)
        {
            return false;
        }
        using (var timer = new CancellationTokenSource())
        {
            var first = await Task.WhenAny(task, Task.Delay(left, timer.Token)).ConfigureAwait(false);
            timer.Cancel();
            return first == task;
        }
    }

    static string Milliseconds(TimeSpan span)
    {
        return ((long)span.TotalMilliseconds).ToString(CultureInfo.InvariantCulture);
    }

    static async Task ForgetAsync(string session)
    {
        try
        {
            await sidecar.ForgetAsync(session).ConfigureAwait(false);
            Print("left session=" + session + " forgotten");
        }
        catch (TokenResolverException e)
        {
            Print("left session=" + session + " not forgotten: " + e.Code);
        }
    }

    /// <summary>Handles one line of a player; false when the connection is to close.</summary>
    static async Task<bool> OnLineAsync(Connection connection, byte[] line)
    {
        Dictionary<string, object> message = null;
        try
        {
            message = Json.Parse(Utf8.GetString(line)) as Dictionary<string, object>;
        }
        catch (FormatException)
        {
            // Not JSON.
        }
        catch (DecoderFallbackException)
        {
            // Not UTF-8.
        }
        object type, token;
        if (message == null || !message.TryGetValue("type", out type) || !"connect".Equals(type)
            || !message.TryGetValue("access_token", out token) || !(token is string))
        {
            connection.Send("{\"type\":\"error\",\"error\":\"bad_request\"}");
            return true;
        }
        ResolveResult user;
        try
        {
            user = await sidecar.ResolveAsync((string)token, session: connection.Session).ConfigureAwait(false);
        }
        catch (TokenResolverException e)
        {
            // The sidecar's code says why: token_rejected, refresh_mismatch, auth_unavailable...
            connection.Send("{\"type\":\"error\",\"error\":" + Json.Quote(e.Code) + "}");
            return !(e.Status == 401 || e.Status == 409);
        }
        if (!connection.Tcp.Connected)
        {
            // Gone while it was resolved: the sidecar must not keep it.
            await ForgetAsync(connection.Session).ConfigureAwait(false);
            return false;
        }
        connection.Token = (string)token;
        connection.UserId = user.UserId;
        connection.Admitted = true;
        players[connection.Session] = connection;
        var id = user.UserId.ToString(CultureInfo.InvariantCulture);
        connection.Send("{\"type\":\"connected\",\"user\":{\"id\":" + id + ",\"name\":" + Json.Quote(user.UserName) + "}}");
        Print("connected session=" + connection.Session + " user=" + id + " name=" + user.UserName
            + (user.Refreshed == true ? " (refreshed)" : ""));
        return true;
    }

    /// <summary>Tells the player of <paramref name="session"/> why and closes it, once.</summary>
    static bool Close(string session, string reason)
    {
        Connection player;
        if (!players.TryRemove(session, out player))
        {
            return false;
        }
        player.Send("{\"type\":\"revoked\",\"reason\":" + Json.Quote(reason) + "}");
        player.Close();
        Print("closed session=" + session + " user=" + player.UserId.ToString(CultureInfo.InvariantCulture) + " reason=" + reason);
        return true;
    }

    /// <summary>Resolves every player held again, with its session, as the sidecar asks after a
    /// resync: those refused are closed, and so is any not confirmed within RESYNC_WITHIN_MS (the
    /// sidecar or the integrator unreachable that long).</summary>
    static async Task ResyncAsync()
    {
        int generation = Interlocked.Increment(ref resyncs);
        var deadline = DateTime.UtcNow + resyncWithin;
        var pending = new ConcurrentQueue<Connection>(players.Values);
        Print("resync: checking " + pending.Count.ToString(CultureInfo.InvariantCulture) + " players");
        int kept = 0, closed = 0;
        Func<Task> worker = async () =>
        {
            Connection player;
            while (generation == Volatile.Read(ref resyncs) && pending.TryDequeue(out player))
            {
                Connection now;
                if (!players.TryGetValue(player.Session, out now) || now != player)
                {
                    continue; // gone or replaced meanwhile
                }
                var left = deadline - DateTime.UtcNow;
                if (left <= TimeSpan.Zero)
                {
                    if (Close(player.Session, "unverified"))
                    {
                        Interlocked.Increment(ref closed);
                    }
                    continue;
                }
                try
                {
                    await sidecar.ResolveAsync(player.Token, session: player.Session).ConfigureAwait(false);
                    Interlocked.Increment(ref kept);
                }
                catch (TokenResolverException e)
                {
                    if (e.IsRefused)
                    {
                        if (Close(player.Session, "revoked"))
                        {
                            Interlocked.Increment(ref closed);
                        }
                        continue;
                    }
                    // Not answered: again, within the deadline.
                    pending.Enqueue(player);
                    var pause = e.RetryAfter ?? TimeSpan.FromSeconds(1);
                    await Task.Delay(pause < left ? pause : left).ConfigureAwait(false);
                }
            }
        };
        var workers = new List<Task>();
        for (int i = 0; i < ResyncParallel; i++)
        {
            workers.Add(worker());
        }
        await Task.WhenAll(workers).ConfigureAwait(false);
        if (generation == Volatile.Read(ref resyncs))
        {
            Print("resync: done, " + kept.ToString(CultureInfo.InvariantCulture) + " kept, "
                + closed.ToString(CultureInfo.InvariantCulture) + " closed");
        }
    }
}
