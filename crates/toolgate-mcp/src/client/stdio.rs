//! The transport to a stdio upstream: its program, started as a child process, with every
//! line it writes to stdout bounded.
//!
//! rmcp's own child-process transport drops a line over its limit and reads on, so a call
//! whose answer was that line waits out its whole deadline, though the answer is gone.
//! Here the line ends the connection instead, at once: every request in flight on it may
//! have lost its answer (a line says nothing readable about whom it was for), and the
//! [`Oversized`] mark of the connection lets the calls that were waiting say why.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{AsyncRwTransport, DEFAULT_MAX_LINE_LENGTH};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

/// The longest line read from a stdio upstream: rmcp's limit, which is also what its HTTP
/// client reads of one message, so an answer acceptable over HTTP is acceptable here.
pub(crate) const MAX_MESSAGE_BYTES: usize = DEFAULT_MAX_LINE_LENGTH;

/// How long a closed upstream may take to exit once its stdin is closed, before it is
/// killed.
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
    child: Child,
    generation: u64,
    oversized: Arc<Oversized>,
    transport: AsyncRwTransport<RoleClient, BoundedLines<ChildStdout>, ChildStdin>,
}

impl StdioUpstream {
    /// Starts `command` with piped stdin, stdout and stderr; the connection it will be is
    /// `generation`, marked in `oversized` if it ends on a line too long to read. The
    /// program is killed when the transport is dropped.
    pub(crate) fn start(
        mut command: Command,
        generation: u64,
        oversized: Arc<Oversized>,
    ) -> io::Result<(Self, Option<ChildStderr>)> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other(
                "the program's stdin or stdout is not piped",
            ));
        };
        let stderr = child.stderr.take();
        let stdout = BoundedLines {
            inner: stdout,
            line: 0,
            generation,
            oversized: Arc::clone(&oversized),
        };
        let transport = AsyncRwTransport::new_client(stdout, stdin);
        let upstream = StdioUpstream {
            child,
            generation,
            oversized,
            transport,
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
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    /// Closes the program's stdin (the MCP way to end a stdio server), waits a little for
    /// it to exit, then kills it. A program that wrote a line too long to read is killed
    /// at once: it is likely still writing it, into a pipe nobody reads, and the calls
    /// waiting on the connection are answered only once it is closed.
    async fn close(&mut self) -> Result<(), Self::Error> {
        if self.oversized.ended(self.generation) {
            return self.child.kill().await;
        }
        self.transport.close().await?;
        if tokio::time::timeout(EXIT_GRACE, self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// A stdout that fails once a line (its line feed included) grows past
/// [`MAX_MESSAGE_BYTES`], before rmcp would skip it: nothing past the limit is handed on,
/// and the connection is marked.
pub(crate) struct BoundedLines<R> {
    inner: R,
    /// Bytes of the current line handed on so far.
    line: usize,
    generation: u64,
    oversized: Arc<Oversized>,
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.line >= MAX_MESSAGE_BYTES {
            return Poll::Ready(Err(too_long()));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let read = &buf.filled()[before..];
        // Follow the lines read. One that cannot end within the limit is handed on short
        // of it, and the next read fails.
        let mut line = this.line;
        let mut at = 0;
        while at < read.len() {
            let rest = &read[at..];
            match rest.iter().position(|b| *b == b'\n') {
                Some(end) if line + end < MAX_MESSAGE_BYTES => {
                    line = 0;
                    at += end + 1;
                }
                None if line + rest.len() < MAX_MESSAGE_BYTES => {
                    line += rest.len();
                    at = read.len();
                }
                _ => {
                    // Marked before rmcp can see the connection end, so a call that
                    // finds it ended finds the mark too.
                    this.oversized.mark(this.generation);
                    this.line = MAX_MESSAGE_BYTES;
                    let cut = at + (MAX_MESSAGE_BYTES - 1 - line);
                    if cut == 0 {
                        // Nothing to hand on: an empty read would read as the end.
                        return Poll::Ready(Err(too_long()));
                    }
                    buf.set_filled(before + cut);
                    return Poll::Ready(Ok(()));
                }
            }
        }
        this.line = line;
        Poll::Ready(Ok(()))
    }
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

    #[tokio::test]
    async fn a_line_past_the_limit_fails_the_read_and_marks_its_connection() {
        let oversized = Arc::new(Oversized::default());
        let mut text = b"{\"a\":1}\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10));
        text.push(b'\n');
        let mut lines = BoundedLines {
            inner: text.as_slice(),
            line: 0,
            generation: 7,
            oversized: Arc::clone(&oversized),
        };
        let mut read = Vec::new();
        let error = lines.read_to_end(&mut read).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(oversized.ended(7) && !oversized.ended(6));
        assert_eq!(
            read.len(),
            8 + MAX_MESSAGE_BYTES - 1,
            "nothing past the limit"
        );
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_whole() {
        let oversized = Arc::new(Oversized::default());
        let line = [vec![b'y'; MAX_MESSAGE_BYTES / 2], vec![b'\n']].concat();
        let text = line.repeat(4);
        let mut lines = BoundedLines {
            inner: text.as_slice(),
            line: 0,
            generation: 1,
            oversized: Arc::clone(&oversized),
        };
        let mut read = Vec::new();
        lines.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, text);
        assert!(!oversized.ended(1));
    }
}
