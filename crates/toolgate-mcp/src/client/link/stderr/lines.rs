//! The lines of a stdio upstream's stderr, read to its end whatever they hold.
//!
//! tokio-util's `LinesCodec` is not enough: it reports a line over its limit (or one that
//! is not UTF-8) as an error, and a `FramedRead` ends after any error of its decoder. The
//! relay would then drop the pipe, and the upstream's next write to its stderr would fail
//! with `EPIPE` (or kill it by `SIGPIPE`). Here neither is an error: a long line is a
//! [`StderrLine::TooLong`] and the reading goes on; bytes that are not UTF-8 are replaced.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// One line of an upstream's stderr.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StderrLine {
    /// A line, without its end (`\n` or `\r\n`), with what is not UTF-8 replaced by `�`.
    Text(String),
    /// A line longer than the limit: it is read past without being kept.
    TooLong,
}

/// Splits a byte stream into [`StderrLine`]s of at most `max` bytes: never holds more
/// than `max + 1` bytes of a line, and never fails but for the stream's own errors.
pub(super) struct StderrLines {
    max: usize,
    /// How far the buffer was searched for a line end already.
    searched: usize,
    /// Whether the rest of a line reported [`StderrLine::TooLong`] is being read past.
    skipping: bool,
}

impl StderrLines {
    /// Lines of at most `max` bytes (without their end); longer ones are
    /// [`StderrLine::TooLong`].
    pub(super) fn new(max: usize) -> Self {
        StderrLines {
            max,
            searched: 0,
            skipping: false,
        }
    }
}

impl Decoder for StderrLines {
    type Item = StderrLine;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<StderrLine>, std::io::Error> {
        if self.skipping {
            let Some(end) = buf.iter().position(|b| *b == b'\n') else {
                buf.clear();
                return Ok(None);
            };
            buf.advance(end + 1);
            self.skipping = false;
        }
        let window = buf.len().min(self.max + 1);
        let found = buf[self.searched..window].iter().position(|b| *b == b'\n');
        match found {
            Some(offset) => {
                let line = buf.split_to(self.searched + offset + 1);
                self.searched = 0;
                Ok(Some(StderrLine::Text(text(&line))))
            }
            None if buf.len() > self.max => {
                self.searched = 0;
                self.skipping = true;
                Ok(Some(StderrLine::TooLong))
            }
            None => {
                self.searched = buf.len();
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<StderrLine>, std::io::Error> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        self.searched = 0;
        if self.skipping || buf.is_empty() {
            self.skipping = false;
            buf.clear();
            return Ok(None);
        }
        // The last line, without an end.
        let line = buf.split();
        Ok(Some(StderrLine::Text(text(&line))))
    }
}

/// `line` without its end, as text.
fn text(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(line).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line `input` decodes to, fed in pieces of `piece` bytes, then ended.
    fn lines(input: &[u8], max: usize, piece: usize) -> Vec<StderrLine> {
        let mut codec = StderrLines::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            buf.extend_from_slice(chunk);
            while let Some(line) = codec.decode(&mut buf).unwrap() {
                out.push(line);
            }
            assert!(buf.len() <= max + 1, "{} bytes held", buf.len());
        }
        while let Some(line) = codec.decode_eof(&mut buf).unwrap() {
            out.push(line);
        }
        out
    }

    fn shown(line: &str) -> StderrLine {
        StderrLine::Text(line.to_owned())
    }

    #[test]
    fn a_long_line_is_reported_once_and_the_lines_after_it_are_read() {
        let mut input = b"before\n".to_vec();
        input.extend(std::iter::repeat_n(b'a', 100));
        input.extend_from_slice(b"\nafter\r\nlast");
        for piece in [1, 7, 16, 1000] {
            assert_eq!(
                lines(&input, 16, piece),
                [
                    shown("before"),
                    StderrLine::TooLong,
                    shown("after"),
                    shown("last")
                ],
                "read {piece} bytes at a time"
            );
        }
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_kept_and_one_byte_more_is_not() {
        assert_eq!(
            lines(b"0123456789abcdef\n", 16, 5),
            [shown("0123456789abcdef")]
        );
        assert_eq!(
            lines(b"0123456789abcdefg\nok\n", 16, 5),
            [StderrLine::TooLong, shown("ok")]
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_and_the_reading_goes_on() {
        assert_eq!(
            lines(b"caf\xe9\nnext\n", 16, 3),
            [shown("caf\u{fffd}"), shown("next")]
        );
    }

    #[test]
    fn a_long_line_cut_off_by_the_end_is_reported_once() {
        assert_eq!(lines(&[b'a'; 50], 16, 8), [StderrLine::TooLong]);
    }
}
