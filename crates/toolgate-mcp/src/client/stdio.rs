//! The transport to a stdio upstream: its program, started as a child process, with every
//! line it writes to stdout bounded.
//!
//! rmcp's own child-process transport drops a line over its limit and reads on, so a call
//! whose answer was that line waits out its whole deadline, though the answer is gone.
//! Here an answer too long to read whose start or end names its request's `id` is answered
//! in its place with an error, and only that call fails: one caller asking for a huge
//! answer does not fail the calls of others on the same connection. A request or
//! notification of the upstream's too long to read (a log message carrying a caller's huge
//! input, say) is dropped, logged, and the connection goes on: it is nobody's answer. Any
//! other line too long to read ends the connection: every request in flight on it may have
//! lost its answer (such a line says nothing readable about whom it was for), and the
//! [`Oversized`] mark of the connection lets the calls that were waiting say why.
//!
//! A line within the limit is read as a message once ([`Messages`]); an answer that does
//! not read (a number too large, half a surrogate pair, nested too deep, an error of the
//! wrong shape) whose `id` it names is answered in its place with an error saying why, as
//! an answer too long is.
//!
//! An upstream that stops reading its stdin ends its connection too, once a write to it
//! has waited out the call timeout ([`StalledInput`]).
//!
//! The program leads a process group of its own ([`ProcessGroup`]), and what is left of
//! the group is ended with the connection: a launcher's child goes with the launcher.
//!
//! The connection ends when the program exits, even while something it started still
//! holds its stdout open ([`ProgramOutput`]): otherwise the connection would look alive,
//! its calls waiting out their deadlines, and never be made again.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, Empty, ReadBuf};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

use super::message_head::{Head, MAX_MESSAGE_BYTES, scan_head};
use super::process_group::{self, LeaderExit, ProcessGroup};
use super::relay::Routes;
use super::stdio_input::StalledInput;
use super::stdio_output::{Messages, Next};

/// How long a closed upstream (and what it started) may take to exit once its stdin is
/// closed, before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// Which connection of a channel, by generation, last ended on a line over
/// [`MAX_MESSAGE_BYTES`] (0: none).
#[derive(Debug, Default)]
pub(crate) struct Oversized(AtomicU64);

impl Oversized {
    /// Whether the connection of `generation` ended on an oversized line.
    pub(crate) fn ended(&self, generation: u64) -> bool {
        generation != 0 && self.0.load(Ordering::Acquire) == generation
    }

    fn mark(&self, generation: u64) {
        self.0.store(generation, Ordering::Release);
    }
}

/// A started stdio upstream, as an rmcp transport.
pub(crate) struct StdioUpstream {
    /// Before `child`, so dropped first: the group is killed before the child is handed
    /// to tokio to kill and reap, after which its id may no longer be the group's. For
    /// the same reason `child` is waited for by the group alone ([`ProcessGroup::end`]).
    group: ProcessGroup,
    child: Child,
    generation: u64,
    oversized: Arc<Oversized>,
    /// Cancelled once the program stopped reading its stdin.
    stalled: CancellationToken,
    /// rmcp's transport, for writing to the program's stdin only: what it writes is
    /// read by `output`, which reads each line once and answers in place of an answer
    /// that cannot be read ([`Messages`]).
    input: AsyncRwTransport<RoleClient, Empty, StalledInput<ChildStdin>>,
    output: Messages<BoundedLines<ProgramOutput>>,
}

impl StdioUpstream {
    /// Starts `command` with piped stdin, stdout and stderr; the connection it will be is
    /// `generation`, marked in `oversized` if it ends on a line too long to read, and
    /// ended if a write to its stdin waits longer than `stall_limit`; what it writes that
    /// cannot be read is counted in `routes`. The program leads a process group of its
    /// own; the group is killed when the transport is dropped.
    pub(crate) fn start(
        mut command: Command,
        generation: u64,
        oversized: Arc<Oversized>,
        stall_limit: Duration,
        routes: Arc<Routes>,
    ) -> io::Result<(Self, Option<ChildStderr>)> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        process_group::lead_own_group(&mut command);
        let mut child = process_group::spawn_tied_to_host(command)?;
        let group = ProcessGroup::of(&child);
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other(
                "the program's stdin or stdout is not piped",
            ));
        };
        let stderr = child.stderr.take();
        let stdout = ProgramOutput::new(stdout, group.watch_leader());
        let stdout = BoundedLines::new(stdout, generation, Arc::clone(&oversized));
        let stalled = CancellationToken::new();
        let stdin = StalledInput::new(stdin, stall_limit, stalled.clone());
        let upstream = StdioUpstream {
            group,
            child,
            generation,
            oversized,
            stalled,
            input: AsyncRwTransport::new_client(tokio::io::empty(), stdin),
            output: Messages::new(stdout, routes),
        };
        Ok((upstream, stderr))
    }
}

impl Transport<RoleClient> for StdioUpstream {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.input.send(item)
    }

    /// The program's next message; none (the connection's end) once it stopped reading
    /// its stdin, or once it exited and what it wrote before was read
    /// ([`ProgramOutput`]).
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let next = tokio::select! {
                biased;
                () = self.stalled.cancelled() => return None,
                next = self.output.next() => next?,
            };
            match next {
                Next::Message(message) => return Some(message),
                Next::Refuse(refusal) => {
                    // Written before reading on, as rmcp does: an upstream that floods
                    // such lines without reading its stdin is held back, not queued for.
                    // Should the receive be given up meanwhile, the refusal (which names
                    // no request) may be lost; it is never written in part.
                    if let Err(e) = self.input.send(refusal).await {
                        tracing::debug!("cannot refuse an MCP server's message: {e}");
                    }
                }
            }
        }
    }

    /// Closes the program's stdin (the MCP way to end a stdio server), waits a little for
    /// it to exit, then kills it. A program that wrote a line too long to read is killed
    /// at once: it is likely still writing it, into a pipe nobody reads, and the calls
    /// waiting on the connection are answered only once it is closed. So is a program
    /// that stopped reading its stdin: it would not read that it was closed.
    ///
    /// What the program started in its process group goes with it: killed with it, or,
    /// when the program exited in time, asked to stop (`SIGTERM`) and killed once the
    /// grace is over.
    async fn close(&mut self) -> Result<(), Self::Error> {
        if self.oversized.ended(self.generation) || self.stalled.is_cancelled() {
            self.group.kill();
            return self.child.kill().await;
        }
        let deadline = tokio::time::Instant::now() + EXIT_GRACE;
        if self.group.leader_exited() {
            // The program reads nothing more, and what it left behind may hold its stdin
            // unread: a write waiting on that full pipe holds the transport's writer — and
            // the connection, whose calls wait on its close — until the stall limit. What
            // is left of the group is ended first; its stdin's last reader gone, the write
            // fails, and the stdin is closed at once.
            let ended = self.group.end(&mut self.child, deadline).await;
            self.input.close().await?;
            return ended;
        }
        self.input.close().await?;
        self.group.end(&mut self.child, deadline).await
    }
}

/// The longest what is already in the stdout of a program that exited is read, before the
/// connection ends: a process it left behind holding its stdout may write on.
const DRAIN: Duration = Duration::from_secs(1);

/// The most of the stdout of a program that exited read before the connection ends: what
/// the program wrote before it exited is in the pipe, which holds far less.
const MOST_DRAINED: usize = MAX_MESSAGE_BYTES;

/// A program's stdout, which ends when the program exits.
///
/// A process the program started may inherit its stdout and hold it open after the
/// program exited, so the pipe would never end. Once the program was seen to have exited
/// ([`LeaderExit`], which leaves it unreaped for [`ProcessGroup::end`]), everything it
/// wrote is in the pipe: it is read without waiting for more (read from the pipe itself,
/// as the runtime may not have seen it become readable yet), until the pipe is empty, or
/// for [`DRAIN`] or [`MOST_DRAINED`] bytes at most, and then the stream ends. A last
/// answer written just before the program exited reaches its caller; whatever a process
/// left behind writes later is not read.
pub(crate) struct ProgramOutput {
    stdout: ChildStdout,
    exit: LeaderExit,
    /// Once the program exited: until when, and how many more bytes, the pipe is read.
    draining: Option<(tokio::time::Instant, usize)>,
}

impl ProgramOutput {
    fn new(stdout: ChildStdout, exit: LeaderExit) -> Self {
        ProgramOutput {
            stdout,
            exit,
            draining: None,
        }
    }

    /// Reads what is in the pipe into `buf` without waiting: nothing (the stream's end)
    /// once the pipe is empty or the drain is over.
    fn drain(&mut self, buf: &mut ReadBuf<'_>) -> io::Result<()> {
        let Some((until, left)) = self.draining.as_mut() else {
            return Ok(());
        };
        if *left == 0 || tokio::time::Instant::now() >= *until {
            *left = 0;
            return Ok(());
        }
        #[cfg(unix)]
        loop {
            use nix::errno::Errno;

            let unfilled = buf.initialize_unfilled();
            let at_most = unfilled.len().min(*left);
            // The pipe is non-blocking (the runtime's): an empty one fails with `EAGAIN`.
            match nix::unistd::read(&self.stdout, &mut unfilled[..at_most]) {
                Ok(read) => {
                    buf.advance(read);
                    *left = if read == 0 { 0 } else { *left - read };
                    return Ok(());
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    *left = 0;
                    return Ok(());
                }
                Err(error) => return Err(error.into()),
            }
        }
        #[cfg(not(unix))]
        {
            // The program's exit is not watched here.
            let _ = buf;
            *left = 0;
            Ok(())
        }
    }
}

impl AsyncRead for ProgramOutput {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.draining.is_none() {
            if let Poll::Ready(read) = Pin::new(&mut this.stdout).poll_read(cx, buf) {
                return Poll::Ready(read);
            }
            std::task::ready!(this.exit.poll_exited(cx));
            tracing::debug!(
                "an MCP server's program exited: its connection ends once what it wrote is read"
            );
            this.draining = Some((tokio::time::Instant::now() + DRAIN, MOST_DRAINED));
        }
        Poll::Ready(this.drain(buf))
    }
}

/// The most of the start and of the end of a line kept to find whom an oversized answer
/// was for: a response names its `id` before its `result` (the Python SDK, rmcp) or after
/// it (the TypeScript SDK).
const HEAD_BYTES: usize = 512;

/// The most of one line read past before the connection ends: a line that does not end
/// is not read forever.
const MOST_SKIPPED: u64 = 16 * MAX_MESSAGE_BYTES as u64;

/// A stdout whose lines are bounded by [`MAX_MESSAGE_BYTES`] (its line feed included).
///
/// A line that grows past the limit is handed on cut short and ended, exactly
/// [`MAX_MESSAGE_BYTES`] long with its line feed, so that it is read as the unreadable
/// message it is and dropped ([`Messages`] answers in place of no line so long: this does),
/// and the rest of it is read past, not handed on. When the line is an answer whose top-level `id` its start or its end names
/// (`{"jsonrpc": "2.0", "id": 7, "result": …` or `{"result": …, "jsonrpc": "2.0", "id":
/// 7}`), that request alone is answered in its place, with an error saying why: the other
/// calls on the connection go on. A line whose start names a `method` and no `result` or
/// `error` (a request or notification of the upstream's: every SDK writes `method` before
/// `params`) is dropped, logged, and the connection goes on; a request so dropped is left
/// for the upstream to time out, as the line cannot be read for what to answer. Any other
/// line too long to read — an answer whose `id` is neither near its start nor at its end,
/// or named twice, or a line whose start says neither — says nothing readable about whom
/// it concerns: the connection then ends and is marked, so that every call waiting on it
/// can say why.
pub(crate) struct BoundedLines<R> {
    inner: R,
    /// Bytes of the current line handed on so far ([`MAX_MESSAGE_BYTES`] once the
    /// connection ended on a line).
    line: usize,
    /// The start of the current line, up to [`HEAD_BYTES`].
    head: Vec<u8>,
    /// The end of what was handed on of the current line, up to [`HEAD_BYTES`]: the
    /// start of the end of a line cut short, which may have been handed on before its cut
    /// (all of it but its last byte, for a line one byte too long).
    end: Vec<u8>,
    /// While an oversized line is read past: its last bytes, those handed on before its
    /// cut and those read past since (up to [`HEAD_BYTES`]), and how many were read past.
    skipping: Option<(Vec<u8>, u64)>,
    /// Bytes to hand on before reading more, and how many of them were.
    pending: (Vec<u8>, usize),
    generation: u64,
    oversized: Arc<Oversized>,
}

impl<R> BoundedLines<R> {
    fn new(inner: R, generation: u64, oversized: Arc<Oversized>) -> Self {
        BoundedLines {
            inner,
            line: 0,
            head: Vec::with_capacity(HEAD_BYTES),
            end: Vec::with_capacity(HEAD_BYTES),
            skipping: None,
            pending: (Vec::new(), 0),
            generation,
            oversized,
        }
    }

    /// Follows the lines of `read`, handed on: `Some(at)` when the line under way grows
    /// past the limit at `at` (what is before `at` keeps it within the limit, its line
    /// feed to come included).
    fn follow(&mut self, read: &[u8]) -> Option<usize> {
        let mut at = 0;
        while at < read.len() {
            let rest = &read[at..];
            let keep = (HEAD_BYTES - self.head.len().min(HEAD_BYTES)).min(rest.len());
            match memchr::memchr(b'\n', rest) {
                Some(end) if self.line + end < MAX_MESSAGE_BYTES => {
                    self.line = 0;
                    self.head.clear();
                    self.end.clear();
                    at += end + 1;
                }
                None if self.line + rest.len() < MAX_MESSAGE_BYTES => {
                    self.head.extend_from_slice(&rest[..keep]);
                    keep_last(&mut self.end, rest);
                    self.line += rest.len();
                    at = read.len();
                }
                _ => {
                    self.head.extend_from_slice(&rest[..keep]);
                    let cut = MAX_MESSAGE_BYTES - 1 - self.line;
                    keep_last(&mut self.end, &rest[..cut]);
                    return Some(at + cut);
                }
            }
        }
        None
    }

    /// Reads past the rest of an oversized line in `read`: once its end is there, the
    /// error answer in its place and what follows the end are to be handed on — or, when
    /// the line names no request to answer, the connection ends.
    fn skip(&mut self, read: &[u8]) {
        let Some((tail, skipped)) = self.skipping.as_mut() else {
            return;
        };
        let end = memchr::memchr(b'\n', read);
        let part = &read[..end.unwrap_or(read.len())];
        keep_last(tail, part);
        *skipped += part.len() as u64;
        let Some(end) = end else {
            if *skipped > MOST_SKIPPED {
                self.skipping = None;
                self.end_connection();
            }
            return;
        };
        let (tail, _) = self.skipping.take().expect("skipping a line");
        let answer = match scan_head(&self.head) {
            Some(Head {
                method: Some(method),
                response: false,
                ..
            }) => {
                tracing::warn!(
                    limit = MAX_MESSAGE_BYTES,
                    method = ?method,
                    "an MCP server sent a request or notification too long to read: it is dropped, the connection goes on"
                );
                Vec::new()
            }
            _ => {
                let Some(answer) = answer_in_place_of(&self.head, &tail) else {
                    self.end_connection();
                    return;
                };
                tracing::warn!(
                    limit = MAX_MESSAGE_BYTES,
                    "an MCP server's answer is too long to read: its request is answered with an error, the connection goes on"
                );
                answer
            }
        };
        self.line = 0;
        self.head.clear();
        self.end.clear();
        let after = &read[end + 1..];
        let (pending, handed) = &mut self.pending;
        pending.drain(..*handed);
        *handed = 0;
        pending.extend_from_slice(&answer);
        // What follows is lines like any: the rest of a read is far shorter than the limit,
        // but should a line in it be too long, it is cut there as any.
        match self.follow(after) {
            Some(cut) => self.cut_pending(after, cut),
            None => self.pending.0.extend_from_slice(after),
        }
    }

    /// `bytes` went past the limit at `cut`: what is before it is handed on, ended, and
    /// the line is read past (or the connection ends).
    fn cut_pending(&mut self, bytes: &[u8], cut: usize) {
        self.pending.0.extend_from_slice(&bytes[..cut]);
        self.pending.0.push(b'\n');
        self.oversized_line(&bytes[cut..]);
    }

    /// The line under way grew past the limit; `rest` is what was read of it past the cut.
    /// A line whose start shows it is an answer, or a message of the upstream's own, is read
    /// past, to its end; any other ends the connection at once.
    fn oversized_line(&mut self, rest: &[u8]) {
        if scan_head(&self.head).is_some_and(|head| head.response != head.method.is_some()) {
            // The line's end starts with what was handed on of it: the part read past may
            // be a byte or two, too little to read an `id`, or the object's end, from.
            let end = std::mem::replace(&mut self.end, Vec::with_capacity(HEAD_BYTES));
            self.skipping = Some((end, 0));
            self.skip(rest);
        } else {
            self.end_connection();
        }
    }

    /// Ends the connection on a line too long to read that names no request to answer.
    /// Marked before rmcp can see the connection end, so a call that finds it ended finds
    /// the mark too.
    fn end_connection(&mut self) {
        self.oversized.mark(self.generation);
        self.line = MAX_MESSAGE_BYTES;
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            let (pending, handed) = &mut this.pending;
            if *handed < pending.len() {
                let n = buf.remaining().min(pending.len() - *handed);
                buf.put_slice(&pending[*handed..*handed + n]);
                *handed += n;
                if *handed == pending.len() {
                    pending.clear();
                    *handed = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.line >= MAX_MESSAGE_BYTES {
                return Poll::Ready(Err(too_long()));
            }
            let before = buf.filled().len();
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            if buf.filled().len() == before {
                // The end of the stream.
                return Poll::Ready(Ok(()));
            }
            if this.skipping.is_some() {
                // Nothing of an oversized line is handed on.
                let read = buf.filled()[before..].to_owned();
                buf.set_filled(before);
                this.skip(&read);
                continue;
            }
            let Some(cut) = this.follow(&buf.filled()[before..]) else {
                return Poll::Ready(Ok(()));
            };
            // The line is handed on short of the limit and ended there: it is read as
            // unreadable and dropped.
            let rest = buf.filled()[before + cut..].to_owned();
            buf.set_filled(before + cut);
            buf.put_slice(b"\n");
            this.oversized_line(&rest);
            if this.line >= MAX_MESSAGE_BYTES && cut == 0 {
                // Nothing of the line to hand on but its end: the connection ends now.
                buf.set_filled(before);
                return Poll::Ready(Err(too_long()));
            }
            return Poll::Ready(Ok(()));
        }
    }
}

/// Keeps in `last` its last bytes followed by `bytes`, [`HEAD_BYTES`] of them at most.
fn keep_last(last: &mut Vec<u8>, bytes: &[u8]) {
    let bytes = &bytes[bytes.len().saturating_sub(HEAD_BYTES)..];
    let excess = (last.len() + bytes.len()).saturating_sub(HEAD_BYTES);
    last.drain(..excess.min(last.len()));
    last.extend_from_slice(bytes);
}

/// The error answer to hand on in place of an answer too long to read, which starts with
/// `head` and ends with `tail`: `None` unless it is a response (`result` or `error`, no
/// `method`) whose top-level `id` one of them holds whole, and only one.
fn answer_in_place_of(head: &[u8], tail: &[u8]) -> Option<Vec<u8>> {
    let head = scan_head(head)?;
    if !head.response || head.method.is_some() {
        return None;
    }
    let id = match (head.id, id_at_end(tail)?) {
        (Some(id), None) | (None, Some(id)) => id,
        _ => return None,
    };
    if !(id.is_number() || id.is_string()) {
        return None;
    }
    let message = format!(
        "the answer was more than {} MiB, more than toolgate reads from an MCP server: ask for less",
        MAX_MESSAGE_BYTES / (1024 * 1024)
    );
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": message,
            "data": { OVERSIZED_ANSWER: MAX_MESSAGE_BYTES },
        },
    });
    let mut line = serde_json::to_vec(&answer).ok()?;
    line.push(b'\n');
    Some(line)
}

/// The key of the `data` of an error toolgate answers in place of an answer too long to
/// read.
pub(crate) const OVERSIZED_ANSWER: &str = "io.toolgate/oversizedAnswer";

/// The top-level `id` that `tail`, the end of a message that is one JSON object, names
/// among the keys after its last object or array value: `Some(None)` when it names none,
/// `None` when it cannot be read so (it names `id` twice, or `method`, or is no object's
/// end).
fn id_at_end(tail: &[u8]) -> Option<Option<serde_json::Value>> {
    let back_space = |mut at: usize| {
        while at > 0 && tail[at - 1].is_ascii_whitespace() {
            at -= 1;
        }
        at
    };
    // `at` is the end (exclusive) of what is left to read, backwards.
    let mut at = back_space(tail.len());
    if at == 0 || tail[at - 1] != b'}' {
        return None;
    }
    at -= 1;
    let mut id = None;
    loop {
        at = back_space(at);
        let value_end = at;
        let value_start = match tail.get(at.checked_sub(1)?)? {
            b'"' => string_start(tail, at - 1)?,
            // The answer's result or error: the keys after it were all read.
            b'}' | b']' => return Some(id),
            _ => {
                let mut start = at;
                while start > 0
                    && (tail[start - 1].is_ascii_alphanumeric()
                        || matches!(tail[start - 1], b'.' | b'+' | b'-'))
                {
                    start -= 1;
                }
                start
            }
        };
        at = back_space(value_start);
        if at == 0 || tail[at - 1] != b':' {
            return None;
        }
        at = back_space(at - 1);
        if at == 0 || tail[at - 1] != b'"' {
            return None;
        }
        let key_start = string_start(tail, at - 1)?;
        match &tail[key_start..at] {
            b"\"id\"" if id.is_some() => return None,
            b"\"id\"" => id = Some(serde_json::from_slice(&tail[value_start..value_end]).ok()?),
            b"\"method\"" => return None,
            _ => {}
        }
        at = back_space(key_start);
        if at == 0 || tail[at - 1] != b',' {
            // The object's start, or not a message's end.
            return None;
        }
        at -= 1;
    }
}

/// Where the string whose closing quote is at `close` starts (its opening quote), if it
/// does in `text`: a quote after an odd number of backslashes is escaped.
fn string_start(text: &[u8], close: usize) -> Option<usize> {
    let mut i = close;
    while i > 0 {
        i -= 1;
        if text[i] == b'"' {
            let backslashes = text[..i].iter().rev().take_while(|b| **b == b'\\').count();
            if backslashes % 2 == 0 {
                return Some(i);
            }
        }
    }
    None
}

fn too_long() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the MCP server sent a message of more than {MAX_MESSAGE_BYTES} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// A reader that hands on at most `at_most` bytes a read, as a pipe does.
    struct Pipe<'a> {
        text: &'a [u8],
        at_most: usize,
    }

    impl AsyncRead for Pipe<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = self.text.len().min(self.at_most).min(buf.remaining());
            buf.put_slice(&self.text[..n]);
            self.text = &self.text[n..];
            Poll::Ready(Ok(()))
        }
    }

    async fn read_all(
        text: &[u8],
        generation: u64,
        oversized: &Arc<Oversized>,
    ) -> (Vec<u8>, io::Result<usize>) {
        let pipe = Pipe {
            text,
            at_most: 8191,
        };
        let mut lines = BoundedLines::new(pipe, generation, Arc::clone(oversized));
        let mut read = Vec::new();
        let result = lines.read_to_end(&mut read).await;
        (read, result)
    }

    #[tokio::test]
    async fn a_line_past_the_limit_that_names_no_request_ends_the_connection_and_marks_it() {
        let oversized = Arc::new(Oversized::default());
        let mut text = b"{\"a\":1}\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10));
        text.push(b'\n');
        let (read, result) = read_all(&text, 7, &oversized).await;
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(oversized.ended(7) && !oversized.ended(6));
        assert_eq!(
            read.len(),
            8 + MAX_MESSAGE_BYTES,
            "nothing past the limit: the line cut short of it and ended"
        );
    }

    #[tokio::test]
    async fn an_answer_past_the_limit_is_answered_with_an_error_in_its_place_and_the_lines_after_it_pass()
     {
        let oversized = Arc::new(Oversized::default());
        let mut text =
            b"{\"a\":1}\n{\"jsonrpc\": \"2.0\", \"id\": \"call-7\", \"result\": {\"text\": \""
                .to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10_000));
        text.extend_from_slice(b"\"}}\n{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n");
        let (read, result) = read_all(&text, 3, &oversized).await;
        result.unwrap();
        assert!(!oversized.ended(3), "the connection goes on");
        let lines: Vec<&[u8]> = read.split(|b| *b == b'\n').collect();
        assert_eq!(lines.len(), 5, "four lines and the end");
        assert_eq!(lines[0], b"{\"a\":1}");
        assert_eq!(
            lines[1].len(),
            MAX_MESSAGE_BYTES - 1,
            "cut short of the limit"
        );
        let answer: serde_json::Value = serde_json::from_slice(lines[2]).unwrap();
        assert_eq!(answer["id"], "call-7");
        assert_eq!(answer["error"]["data"][OVERSIZED_ANSWER], MAX_MESSAGE_BYTES);
        assert_eq!(lines[3], b"{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}");
        assert_eq!(lines[4], b"");
    }

    #[tokio::test]
    async fn an_answer_past_the_limit_is_answered_in_its_place_once_not_again_as_unreadable() {
        use rmcp::model::{JsonRpcMessage, RequestId};

        let text = oversized_then_an_answer(
            b"{\"jsonrpc\": \"2.0\", \"id\": 7, \"result\": {\"text\": \"",
            b"\"}}",
        );
        let pipe = Pipe {
            text: &text,
            at_most: 8191,
        };
        let lines = BoundedLines::new(pipe, 3, Arc::new(Oversized::default()));
        let mut messages = Messages::new(lines, Arc::new(Routes::new("x")));
        let mut read = Vec::new();
        while let Some(next) = messages.next().await {
            let Next::Message(message) = next else {
                panic!("nothing refused");
            };
            read.push(message);
        }
        assert_eq!(
            read.len(),
            2,
            "the answer in place, and the answer after it"
        );
        let JsonRpcMessage::Error(error) = &read[0] else {
            panic!("an error in place of the answer: {:?}", read[0]);
        };
        assert_eq!(error.id, Some(RequestId::Number(7)));
        let data = error.error.data.as_ref().expect("data");
        assert_eq!(data[OVERSIZED_ANSWER], MAX_MESSAGE_BYTES);
        assert!(matches!(&read[1], JsonRpcMessage::Response(r) if r.id == RequestId::Number(42)));
    }

    /// The `id` an answer in place of the message of `head` … `tail` would carry.
    fn answered_id(head: &str, tail: &str) -> Option<serde_json::Value> {
        let answer = answer_in_place_of(head.as_bytes(), tail.as_bytes())?;
        let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        Some(answer["id"].clone())
    }

    #[tokio::test]
    async fn an_answer_past_the_limit_that_names_its_id_at_its_end_is_answered_too() {
        let oversized = Arc::new(Oversized::default());
        let mut text = b"{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10_000));
        text.extend_from_slice(b"\"}]},\"jsonrpc\":\"2.0\",\"id\":41}\n{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}\n");
        let (read, result) = read_all(&text, 5, &oversized).await;
        result.unwrap();
        assert!(!oversized.ended(5), "the connection goes on");
        let lines: Vec<&[u8]> = read.split(|b| *b == b'\n').collect();
        let answer: serde_json::Value = serde_json::from_slice(lines[1]).unwrap();
        assert_eq!(answer["id"], 41);
        assert_eq!(lines[2], b"{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}");
    }

    /// `head`, `MAX_MESSAGE_BYTES + 10_000` bytes of `x`, then `tail`, a line feed, and a
    /// short answer after it.
    fn oversized_then_an_answer(head: &[u8], tail: &[u8]) -> Vec<u8> {
        let mut text = head.to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10_000));
        text.extend_from_slice(tail);
        text.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}\n");
        text
    }

    #[tokio::test]
    async fn a_request_or_notification_past_the_limit_is_dropped_and_the_lines_after_it_pass() {
        let notification = oversized_then_an_answer(
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":""#,
            br#""}}"#,
        );
        // The TypeScript SDK's order, and a request of the upstream's with its id.
        let request = oversized_then_an_answer(
            br#"{"method":"sampling/createMessage","params":{"messages":[{"text":""#,
            br#""}]},"jsonrpc":"2.0","id":5}"#,
        );
        for text in [notification, request] {
            let oversized = Arc::new(Oversized::default());
            let (read, result) = read_all(&text, 4, &oversized).await;
            result.unwrap();
            assert!(!oversized.ended(4), "the connection goes on");
            let lines: Vec<&[u8]> = read.split(|b| *b == b'\n').collect();
            assert_eq!(lines.len(), 3, "the line cut short, the answer, the end");
            assert_eq!(lines[0].len(), MAX_MESSAGE_BYTES - 1);
            assert_eq!(lines[1], b"{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}");
        }
    }

    #[tokio::test]
    async fn a_line_past_the_limit_that_names_both_a_method_and_a_result_ends_the_connection() {
        let oversized = Arc::new(Oversized::default());
        let text = oversized_then_an_answer(
            br#"{"jsonrpc":"2.0","id":3,"method":"x","result":{"text":""#,
            br#""}}"#,
        );
        let (_, result) = read_all(&text, 9, &oversized).await;
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(oversized.ended(9));
    }

    #[tokio::test]
    async fn a_line_past_the_limit_that_never_ends_is_not_read_forever() {
        let oversized = Arc::new(Oversized::default());
        let mut text = b"{\"result\":\"".to_vec();
        text.extend(std::iter::repeat_n(
            b'x',
            MAX_MESSAGE_BYTES + MOST_SKIPPED as usize + 10,
        ));
        let (_, result) = read_all(&text, 2, &oversized).await;
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(oversized.ended(2));
    }

    #[test]
    fn only_a_response_whose_start_or_end_names_its_id_once_is_answered_in_its_place() {
        // Python's SDK and rmcp: the id first.
        let start = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"#;
        assert_eq!(answered_id(start, r#"xx"}]}}"#), Some(7.into()));
        assert_eq!(
            answered_id(r#" { "id" : "a\"b" , "error": {"code""#, "x}}"),
            Some("a\"b".into())
        );
        // The TypeScript SDK: the id last.
        let start = r#"{"result":{"content":[{"type":"text","text":"xxxx"#;
        assert_eq!(
            answered_id(start, r#"xxx"}]},"jsonrpc":"2.0","id":9}"#),
            Some(9.into())
        );
        assert_eq!(
            answered_id(
                start,
                "xx\\\"\"}]},\"id\":\"q\\\"\" , \"jsonrpc\":\"2.0\" }\n"
            ),
            Some("q\"".into())
        );
        // An `id` inside the result is not the answer's.
        assert_eq!(answered_id(start, r#"x","id":3}]},"jsonrpc":"2.0"}"#), None);
        assert_eq!(
            answered_id(r#"{"result":{"id":3,"text":"xxxxx"#, r#"xx"}}"#),
            None
        );
        // Named twice, at the start and at the end: whose it is cannot be told.
        assert_eq!(
            answered_id(r#"{"id":1,"result":"xx"#, r#"xx","id":2}"#),
            None
        );
        assert_eq!(
            answered_id(r#"{"id":1,"id":2,"result":"xx"#, r#"xx"}"#),
            None
        );
        // Requests and notifications of the upstream's, and what is no message.
        assert_eq!(
            answered_id(
                r#"{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{"#,
                "}}"
            ),
            None
        );
        assert_eq!(
            answered_id(
                r#"{"params":{"x":"xxx"#,
                r#"xx"},"method":"notifications/message","id":4}"#
            ),
            None
        );
        assert_eq!(
            answered_id(
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"#,
                "}}"
            ),
            None
        );
        assert_eq!(answered_id(r#"{"id":null,"result":"#, "x\"}"), None);
        assert_eq!(answered_id("xxxxxxxx", "xxxx"), None);
        assert_eq!(
            answered_id(r#"{"result":"xx"#, "xx\""),
            None,
            "no object's end"
        );
    }

    /// A program, leading its own group, that leaves `sleep 1000` behind holding its
    /// stdout, writes the sleep's id and `last`, and exits; its stdout, ended by its exit.
    #[cfg(target_os = "linux")]
    fn leaving_a_process_behind() -> (Child, ProcessGroup, ProgramOutput) {
        let mut command = Command::new("sh");
        command
            .args(["-c", "sleep 1000 & echo $!; echo last; exit 0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        process_group::lead_own_group(&mut command);
        let mut child = command.spawn().expect("sh starts");
        let group = ProcessGroup::of(&child);
        let stdout = child.stdout.take().expect("piped");
        let output = ProgramOutput::new(stdout, group.watch_leader());
        (child, group, output)
    }

    /// Reads `output` to its end (10 s at most), then ends the group; the lines read, and
    /// whether the process left behind is still running after.
    #[cfg(target_os = "linux")]
    async fn read_then_end(
        (mut child, mut group, mut output): (Child, ProcessGroup, ProgramOutput),
    ) -> (Vec<String>, bool) {
        let mut read = String::new();
        tokio::time::timeout(Duration::from_secs(10), output.read_to_string(&mut read))
            .await
            .expect("the output ends once the program exited")
            .expect("read");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        group.end(&mut child, deadline).await.expect("ended");
        let lines: Vec<String> = read.lines().map(str::to_owned).collect();
        let left = lines.first().expect("the sleep's id");
        let running = std::fs::read_to_string(format!("/proc/{left}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "));
        (lines, running)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_programs_output_ends_when_it_exits_though_a_process_it_left_holds_it() {
        let (lines, running) = read_then_end(leaving_a_process_behind()).await;
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[1], "last");
        assert!(!running, "the process left behind ends with the group");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn what_a_program_wrote_before_it_exited_is_read_from_the_pipe_itself() {
        let (child, group, mut output) = leaving_a_process_behind();
        // The output is not read before the program is seen to have exited: all it wrote
        // is read from the pipe directly, whether or not the runtime saw it readable.
        let mut exit = group.watch_leader();
        tokio::time::timeout(
            Duration::from_secs(10),
            std::future::poll_fn(|cx| exit.poll_exited(cx)),
        )
        .await
        .expect("the program exits");
        output.draining = Some((tokio::time::Instant::now() + DRAIN, MOST_DRAINED));
        let (lines, running) = read_then_end((child, group, output)).await;
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[1], "last");
        assert!(!running, "the process left behind ends with the group");
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_whole() {
        let oversized = Arc::new(Oversized::default());
        let line = [vec![b'y'; MAX_MESSAGE_BYTES / 2], vec![b'\n']].concat();
        let text = line.repeat(4);
        let (read, result) = read_all(&text, 1, &oversized).await;
        result.unwrap();
        assert_eq!(read, text);
        assert!(!oversized.ended(1));
    }

    /// A reader that hands on `text` in reads of [`CHUNK`] bytes, also ending a read at
    /// each offset of `splits`: where a line's end, or its cut, falls is chosen.
    struct SplitPipe<'a> {
        text: &'a [u8],
        at: usize,
        splits: Vec<usize>,
    }

    /// An odd size, so that reads do not line up with the limit by themselves.
    const CHUNK: usize = 1024 * 1024 + 3;

    impl AsyncRead for SplitPipe<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let at = self.at;
            let next_split = self.splits.iter().copied().find(|split| *split > at);
            let end = next_split
                .unwrap_or(usize::MAX)
                .min(at + CHUNK)
                .min(self.text.len())
                .min(at + buf.remaining());
            buf.put_slice(&self.text[at..end]);
            self.at = end;
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_line_at_the_limit_is_read_and_one_past_it_is_answered_in_place_wherever_reads_split_it()
     {
        const BEFORE: &[u8] = b"{\"a\":1}\n";
        const AFTER: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}\n";
        // rmcp's and Python's order (the id first), and TypeScript's (the id last).
        let shapes: [(&[u8], &[u8]); 2] = [
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"",
                b"\"}]}}",
            ),
            (
                b"{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"",
                b"\"}]},\"jsonrpc\":\"2.0\",\"id\":7}",
            ),
        ];
        for (head, tail) in shapes {
            // The line's length, its line feed included.
            for length in MAX_MESSAGE_BYTES - 1..=MAX_MESSAGE_BYTES + 2 {
                let mut text = BEFORE.to_vec();
                text.extend_from_slice(head);
                text.resize(BEFORE.len() + length - 1 - tail.len(), b'x');
                text.extend_from_slice(tail);
                text.push(b'\n');
                text.extend_from_slice(AFTER);
                let line_feed = BEFORE.len() + length - 1;
                let cut = BEFORE.len() + MAX_MESSAGE_BYTES - 1;
                // No chosen split; the line feed read alone, and with the byte before
                // it; a read ending at the cut, and just past it.
                let splits = [
                    vec![],
                    vec![line_feed, line_feed + 1],
                    vec![line_feed - 1],
                    vec![cut],
                    vec![cut + 1],
                    vec![cut, line_feed],
                ];
                for splits in splits {
                    let case = format!(
                        "a line of {length} bytes (the limit {MAX_MESSAGE_BYTES}), reads split at {splits:?}, id {}",
                        if head.starts_with(b"{\"jsonrpc\"") {
                            "first"
                        } else {
                            "last"
                        }
                    );
                    let oversized = Arc::new(Oversized::default());
                    let pipe = SplitPipe {
                        text: &text,
                        at: 0,
                        splits,
                    };
                    let mut lines = BoundedLines::new(pipe, 1, Arc::clone(&oversized));
                    let mut read = Vec::new();
                    let result = lines.read_to_end(&mut read).await;
                    assert!(result.is_ok(), "{case}: {result:?}");
                    assert!(!oversized.ended(1), "{case}: the connection goes on");
                    if length <= MAX_MESSAGE_BYTES {
                        assert!(read == text, "{case}: read whole");
                        continue;
                    }
                    let after_cut = BEFORE.len() + MAX_MESSAGE_BYTES;
                    assert_eq!(read[..after_cut - 1], text[..after_cut - 1], "{case}");
                    assert_eq!(read[after_cut - 1], b'\n', "{case}: cut short and ended");
                    let rest = &read[after_cut..];
                    let answer_end = memchr::memchr(b'\n', rest).expect("an answer in place");
                    let answer: serde_json::Value =
                        serde_json::from_slice(&rest[..answer_end]).expect("JSON");
                    assert_eq!(answer["id"], 7, "{case}");
                    assert_eq!(
                        answer["error"]["data"][OVERSIZED_ANSWER], MAX_MESSAGE_BYTES,
                        "{case}"
                    );
                    assert_eq!(&rest[answer_end + 1..], AFTER, "{case}: the line after");
                }
            }
        }
    }
}
