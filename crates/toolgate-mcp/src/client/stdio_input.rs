//! A stdio upstream's stdin, which the upstream must keep reading.
//!
//! Every request of every caller on the connection is written to one pipe. A program that
//! stops reading it (wedged, or deadlocked writing a stderr nobody drains) fills the pipe,
//! and from then on every write waits: each call times out at its deadline, but the
//! connection looks alive, so it is never made again, and every later call queues another
//! write, holding its arguments, behind the ones that never finish. Here a write that has
//! made no progress for the stall limit fails, as does every write after it, and the
//! connection is marked stalled, for the transport to end it and kill the program: the
//! next call starts it again.
//!
//! The limit is the upstream's call timeout: once a write has waited that long, every call
//! whose request went out before it has passed its deadline, and no call queued behind it
//! can be answered, so ending the connection loses no answer a caller could still get.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

/// A writer whose writes fail once one has waited [`limit`](Self::limit) without
/// progress; `stalled` is cancelled then.
pub(crate) struct StalledInput<W> {
    inner: W,
    limit: Duration,
    /// Running while a write waits: when it ends, the upstream has stalled.
    waiting: Option<Pin<Box<Sleep>>>,
    stalled: CancellationToken,
}

impl<W> StalledInput<W> {
    pub(crate) fn new(inner: W, limit: Duration, stalled: CancellationToken) -> Self {
        StalledInput {
            inner,
            limit,
            waiting: None,
            stalled,
        }
    }

    /// What `poll` of the inner writer gave, failed once it has waited past the limit.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut W>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>>
    where
        W: Unpin,
    {
        if self.stalled.is_cancelled() {
            return Poll::Ready(Err(self.stall()));
        }
        if let Poll::Ready(done) = poll(Pin::new(&mut self.inner), cx) {
            self.waiting = None;
            return Poll::Ready(done);
        }
        let limit = self.limit;
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if waiting.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.waiting = None;
        self.stalled.cancel();
        tracing::warn!(
            waited_ms = limit.as_millis() as u64,
            "an MCP server has stopped reading its input: its connection is closed and the program stopped"
        );
        Poll::Ready(Err(self.stall()))
    }

    fn stall(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the MCP server read none of its input for {} ms; it is started again for the next call",
                self.limit.as_millis()
            ),
        )
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for StalledInput<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.bounded(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.bounded(cx, |inner, cx| inner.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.bounded(cx, |inner, cx| inner.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_waits_past_the_limit_fails_and_so_does_every_write_after_it() {
        // A pipe of 16 bytes that nobody reads.
        let (writer, _unread) = tokio::io::duplex(16);
        let stalled = CancellationToken::new();
        let mut input = StalledInput::new(writer, Duration::from_secs(5), stalled.clone());
        input.write_all(&[b'x'; 10]).await.expect("fits the pipe");
        let started = tokio::time::Instant::now();
        let error = input.write_all(&[b'x'; 10]).await.expect_err("stalls");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(stalled.is_cancelled());
        let error = input.write_all(b"y").await.expect_err("stalled for good");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5), "at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_progress_within_the_limit_goes_on() {
        let (writer, mut reader) = tokio::io::duplex(16);
        let stalled = CancellationToken::new();
        let mut input = StalledInput::new(writer, Duration::from_secs(5), stalled.clone());
        let slow_reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut read = Vec::new();
            let mut chunk = [0; 8];
            while read.len() < 64 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                let n = reader.read(&mut chunk).await.expect("read");
                read.extend_from_slice(&chunk[..n]);
            }
            read
        });
        input.write_all(&[b'z'; 64]).await.expect("never waits 5 s");
        assert_eq!(slow_reader.await.expect("joined"), vec![b'z'; 64]);
        assert!(!stalled.is_cancelled());
    }
}
