//! A stdio upstream's stderr, relayed into the log.

mod lines;

use tokio::time::Instant;
use toolgate_hooks::secrets::Scrubber;

use lines::{StderrLine, StderrLines};

/// The longest line of a stdio upstream's stderr that is relayed; a longer one is left out
/// (its place is logged), and the lines after it are relayed.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// How many lines of a stdio upstream's stderr are logged at once, at most: a burst, at
/// the start or after a quiet while.
const BURST: u32 = 200;

/// How many lines a second are logged after a burst, at most: the rest are read and left
/// out, so that a program that writes its stderr without end neither fills the gateway's
/// log (and its disk) nor drowns the gateway's own lines.
const LINES_PER_SECOND: u32 = 50;

/// Relays a stdio upstream's stderr into the log, one event per line (target
/// `toolgate_mcp::upstream`, level `info`), with the upstream's credentials scrubbed: a
/// program that prints its token on failure does not get it into the log. At most
/// [`BURST`] lines at once and [`LINES_PER_SECOND`] after are logged; how many were left
/// out is logged with the next line that is, and at the end.
pub(super) async fn relay_stderr(
    server: String,
    scrubber: Scrubber,
    stderr: tokio::process::ChildStderr,
) {
    use futures::StreamExt;
    use tokio_util::codec::FramedRead;

    // Read to the end, whatever the lines hold: a pipe dropped early would fail the
    // upstream's next write to its stderr (`EPIPE`, or `SIGPIPE` kills it).
    let mut lines = FramedRead::new(stderr, StderrLines::new(MAX_STDERR_LINE));
    let mut allowance = Allowance::new();
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(StderrLine::Text(line)) => Some(line),
            Ok(StderrLine::TooLong) => None,
            Err(_) => break,
        };
        let Some(left_out) = allowance.take() else {
            continue;
        };
        if left_out > 0 {
            tracing::warn!(target: "toolgate_mcp::upstream", %server, left_out, "{left_out} lines of the MCP server's stderr were left out: it wrote more than {LINES_PER_SECOND} a second");
        }
        match line {
            Some(mut line) => {
                scrubber.scrub_string(&mut line);
                tracing::info!(target: "toolgate_mcp::upstream", %server, "{line}");
            }
            None => {
                tracing::info!(target: "toolgate_mcp::upstream", %server, "(a line of more than {MAX_STDERR_LINE} bytes was left out)");
            }
        }
    }
    let left_out = allowance.left_out;
    if left_out > 0 {
        tracing::warn!(target: "toolgate_mcp::upstream", %server, left_out, "{left_out} lines of the MCP server's stderr were left out: it wrote more than {LINES_PER_SECOND} a second");
    }
}

/// How many lines may be logged now: a bucket of [`BURST`] lines, filled again at
/// [`LINES_PER_SECOND`].
struct Allowance {
    lines: f64,
    at: Instant,
    /// Lines left out since the last one logged.
    left_out: u64,
}

impl Allowance {
    fn new() -> Self {
        Allowance {
            lines: f64::from(BURST),
            at: Instant::now(),
            left_out: 0,
        }
    }

    /// Takes one line's allowance: `Some` with how many lines were left out before this
    /// one when it may be logged, `None` (it is left out) when not.
    fn take(&mut self) -> Option<u64> {
        let now = Instant::now();
        let refilled = now.duration_since(self.at).as_secs_f64() * f64::from(LINES_PER_SECOND);
        self.lines = (self.lines + refilled).min(f64::from(BURST));
        self.at = now;
        if self.lines < 1.0 {
            self.left_out += 1;
            return None;
        }
        self.lines -= 1.0;
        Some(std::mem::take(&mut self.left_out))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use std::time::Duration;

    use tracing::span;

    use super::*;

    /// How long a quiet program takes to earn a whole burst back.
    const REFILL: Duration = Duration::from_secs((BURST / LINES_PER_SECOND) as u64);

    /// Counts the events of target `toolgate_mcp::upstream`, and keeps their messages.
    #[derive(Default)]
    struct Counting {
        events: AtomicUsize,
        messages: std::sync::Mutex<Vec<String>>,
    }

    struct Message<'a>(&'a mut String);

    impl tracing::field::Visit for Message<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                *self.0 = format!("{value:?}");
            }
        }
    }

    /// The subscriber, counting into what it holds.
    struct Counter(Arc<Counting>);

    impl tracing::Subscriber for Counter {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            if event.metadata().target() == "toolgate_mcp::upstream" {
                self.0.events.fetch_add(1, Ordering::SeqCst);
                let mut message = String::new();
                event.record(&mut Message(&mut message));
                self.0.messages.lock().unwrap().push(message);
            }
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    /// What a program writing `script` (POSIX shell) to its stderr gets logged.
    async fn logged(script: &str) -> Arc<Counting> {
        logged_and_exit(script).await.0
    }

    /// What a program writing `script` (POSIX shell) to its stderr gets logged, and how
    /// it ended.
    async fn logged_and_exit(script: &str) -> (Arc<Counting>, std::process::ExitStatus) {
        let counting = Arc::new(Counting::default());
        let _default = tracing::subscriber::set_default(Counter(Arc::clone(&counting)));
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("sh starts");
        let stderr = child.stderr.take().expect("piped");
        let relayed = relay_stderr("flood".to_owned(), Scrubber::default(), stderr);
        tokio::time::timeout(Duration::from_secs(60), relayed)
            .await
            .expect("the program's stderr ends");
        let status = child.wait().await.expect("reaped");
        (counting, status)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_program_that_floods_its_stderr_gets_a_bounded_number_of_lines_logged() {
        // 200 000 lines in far less than the minute it would take to earn them.
        let counting = logged("yes 'a line of the flood' | head -n 200000 >&2").await;
        let events = counting.events.load(Ordering::SeqCst);
        assert!(
            events < 5_000,
            "{events} log lines for one program's stderr"
        );
        let messages = counting.messages.lock().unwrap();
        assert_eq!(messages[0], "a line of the flood");
        let last = messages.last().expect("a line");
        assert!(
            last.contains("lines of the MCP server's stderr were left out"),
            "{last}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_program_that_writes_a_few_lines_gets_every_one_logged() {
        let counting = logged("for i in $(seq 1 150); do echo line $i >&2; done").await;
        let messages = counting.messages.lock().unwrap();
        assert_eq!(messages.len(), 150);
        assert_eq!(messages[149], "line 150");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_line_too_long_is_left_out_and_the_pipe_is_read_to_its_end() {
        // After the long line, more than a pipe holds: the program writes it all only if
        // the pipe is still read, and dies of SIGPIPE if it was closed.
        let script = "head -c 9000 /dev/zero | tr '\\0' x >&2; echo >&2
            i=0; while [ $i -lt 50 ]; do i=$((i + 1)); printf '%04000d\\n' $i >&2; done
            echo 'after the long line' >&2";
        let (counting, status) = logged_and_exit(script).await;
        assert!(status.success(), "the program ended with {status}");
        let messages = counting.messages.lock().unwrap();
        assert_eq!(
            messages[0],
            format!("(a line of more than {MAX_STDERR_LINE} bytes was left out)")
        );
        assert_eq!(messages.len(), 52, "every other line is logged");
        assert_eq!(messages[51], "after the long line");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_flood_of_stderr_without_line_ends_is_read_to_its_end() {
        let (counting, status) =
            logged_and_exit("head -c 50000000 /dev/zero >&2; echo >&2; echo done >&2").await;
        assert!(status.success(), "the program ended with {status}");
        let messages = counting.messages.lock().unwrap();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert_eq!(messages[1], "done");
    }

    #[tokio::test(start_paused = true)]
    async fn the_allowance_comes_back_at_its_rate_after_a_burst() {
        let mut allowance = Allowance::new();
        for _ in 0..BURST {
            assert_eq!(allowance.take(), Some(0));
        }
        assert_eq!(allowance.take(), None);
        assert_eq!(allowance.take(), None);
        // A line and a half.
        tokio::time::advance(Duration::from_secs(3) / (2 * LINES_PER_SECOND)).await;
        assert_eq!(allowance.take(), Some(2), "two left out before it");
        assert_eq!(allowance.take(), None);
        tokio::time::advance(REFILL).await;
        for _ in 0..BURST {
            assert!(allowance.take().is_some());
        }
    }
}
