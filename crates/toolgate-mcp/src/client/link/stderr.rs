//! A stdio upstream's stderr, relayed into the log.

use toolgate_hooks::secrets::Scrubber;

/// The longest line of a stdio upstream's stderr relayed whole; longer ones are cut.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// Relays a stdio upstream's stderr into the log, one event per line (target
/// `toolgate_mcp::upstream`, level `info`), with the upstream's credentials scrubbed: a
/// program that prints its token on failure does not get it into the log.
pub(super) async fn relay_stderr(
    server: String,
    scrubber: Scrubber,
    stderr: tokio::process::ChildStderr,
) {
    use futures::StreamExt;
    use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(MAX_STDERR_LINE));
    while let Some(line) = lines.next().await {
        match line {
            Ok(mut line) => {
                scrubber.scrub_string(&mut line);
                tracing::info!(target: "toolgate_mcp::upstream", %server, "{line}");
            }
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                tracing::info!(target: "toolgate_mcp::upstream", %server, "(a line of more than {MAX_STDERR_LINE} bytes was left out)");
            }
            Err(LinesCodecError::Io(_)) => break,
        }
    }
}
