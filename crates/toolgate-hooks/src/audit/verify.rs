//! Checking a chained audit file: what `toolgate audit verify` runs.
//!
//! A [`Verifier`] reads the files in the order given (give a rotated series oldest first),
//! a line at a time, follows each chain by its `seq` and `prev`, and checks each
//! checkpoint against the record it names and, with a public key, its signature. It
//! reports the first problem by file and line: a changed record, a missing one, one out of
//! order, records cut before a checkpoint that signed them, a bad signature, a record or
//! checkpoint copied (and a record deleted where a copy took its place), a file (or its
//! start) given or copied twice, a blank line, or a line that is not a record (cut short,
//! not JSON, or longer than [`MAX_LINE_BYTES`]). [`verify`] does the same for files
//! already in memory.
//!
//! A chain whose records start past seq 1 at the top of a file is an excerpt of it (a
//! rotated-out segment, or lines handed to an auditor), not a break (further down a file,
//! its first records are missing: lines spliced from another chain): every link from its first record
//! here on is checked, and it is listed in [`Verified::excerpts`] with the hash its first
//! record names for the one before. That first link is checked against a checkpoint of
//! the record before it standing just before the first record (an excerpt cut to keep
//! it), else taken on trust: give the file that holds the record before first to check
//! it. A record moved, removed or copied within the excerpt is reported as in any chain,
//! and one that belongs before its first record is [`Problem::BeforeStart`].
//!
//! Records the gateway itself had to drop (its file took no writes while 16 MiB waited:
//! a full disk) are not a break: the sink declared them by a [gap marker](super::Gap)
//! linked into the chain where they would have been, and they are listed in
//! [`Verified::gaps`]. A marker is checked as a record is (its link, the checkpoints
//! after it), and also for what only the gateway writes: a marker with a field too many
//! or too few, numbers that do not add up, or as a chain's first record is
//! [`Problem::ForgedGap`].
//!
//! With a key, a record is shown to be the gateway's only when a checkpoint of its chain
//! with a valid signature covers it: one at its seq or after, whose hash is the chain's.
//! Anyone can rewrite every record and recompute the hashes, or add records or whole
//! chains, and delete the checkpoints after them; so the records after a chain's last
//! signed checkpoint (or of a chain with none) are listed in [`Verified::unsigned`], not
//! called intact. A running gateway has such a tail legitimately (the records since its
//! last checkpoint, signed within `checkpoint_after`); a file of a gateway that stopped
//! cleanly ends each chain with a checkpoint.
//!
//! What it cannot see: records cut from the end of a chain together with every
//! checkpoint after them, or a whole chain removed. The last checkpoint is also logged
//! (target `toolgate::audit`); compare its seq with the file's to detect that.
//!
//! # Examples
//!
//! ```
//! use toolgate_hooks::audit::verify::{verify, AuditFile};
//!
//! let file = AuditFile::new("audit.jsonl", br#"{"seq":1,"chain":"c1","prev":"genesis","tool":"ping"}
//! "#.to_vec());
//! let verified = verify(&[file], None).unwrap();
//! assert_eq!((verified.chains, verified.records), (1, 1));
//! // Without a key nothing is signed; with one, this record would be listed as unsigned.
//! assert!(verified.unsigned.is_empty());
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io::BufRead;

use serde::Deserialize;
use serde_json::Value;
use toolgate_core::error::{hides_text, in_json_words};

use super::chain::{CheckpointPublicKey, GENESIS, checkpoint_message, line_hash};

/// The longest line a [`Verifier`] reads: 64 MiB. The gateway writes one record a line,
/// far shorter; a longer line (or a file with no newline, such as `/dev/zero`) is reported
/// rather than read into memory.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// One audit file's name (for reports) and contents.
#[derive(Clone, Debug)]
pub struct AuditFile {
    name: String,
    contents: Vec<u8>,
}

impl AuditFile {
    /// The file `name` holding `contents`.
    pub fn new(name: impl Into<String>, contents: Vec<u8>) -> Self {
        AuditFile {
            name: name.into(),
            contents,
        }
    }
}

/// What a set of files holds when no record was found changed, missing or out of order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Chains.
    pub chains: usize,
    /// Records.
    pub records: u64,
    /// Checkpoints (their signatures checked when `signatures_checked`).
    pub checkpoints: u64,
    /// Whether a public key checked the checkpoints' signatures.
    pub signatures_checked: bool,
    /// With a key, the records no checkpoint with a valid signature covers, a run per
    /// chain: nothing shows that the gateway wrote them. Empty without a key.
    pub unsigned: Vec<Unsigned>,
    /// The gaps the gateway declared: records it could not write, in file order. Their
    /// markers count among [`records`](Self::records).
    pub gaps: Vec<DeclaredGap>,
    /// The chains whose records here start past seq 1 (a rotated-out segment, or lines
    /// handed on): every link from their first record here on is checked, the link of that
    /// first record to the one before it only against a checkpoint just before it, if
    /// there is one. In file order.
    pub excerpts: Vec<Excerpt>,
}

impl Verified {
    /// How many records [`unsigned`](Self::unsigned) holds.
    pub fn unsigned_records(&self) -> u64 {
        self.unsigned
            .iter()
            .map(|u| u.last_seq - u.first_seq + 1)
            .sum()
    }
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.records == 0 {
            return f
                .write_str("no records: the files hold no audit record, so nothing was verified");
        }
        if !self.excerpts.is_empty() {
            write!(
                f,
                "excerpt: {} chain(s) start past seq 1 here, so their earlier records are not in \
                 these files; every link from each chain's first record here on was checked:",
                self.excerpts.len()
            )?;
            for excerpt in &self.excerpts {
                write!(f, "\n  {excerpt}")?;
            }
            if self.excerpts.iter().any(|e| e.anchor.is_none()) {
                f.write_str(
                    "\nTo check a first link taken on trust, verify again with the file that \
                     holds the record before it given first (a rotated series oldest first: \
                     `audit.jsonl.* audit.jsonl`), or compare the hash above with the `hash` of \
                     the gateway's `audit checkpoint signed` log line of that chain and seq (a \
                     rotated file ends with a checkpoint of its last record).",
                )?;
            }
            f.write_str(
                "\nWhether records before a chain's first one here were removed is beyond what \
                 these files can show.\n",
            )?;
        }
        if !self.gaps.is_empty() {
            let lost: u64 = self.gaps.iter().map(|g| g.gap.records).sum();
            write!(
                f,
                "gaps the gateway declared: {lost} record(s) lost in {} gap(s), each declared by \
                 a marker the gateway linked into its chain where the records would have been \
                 (not tampering):",
                self.gaps.len()
            )?;
            for gap in &self.gaps {
                write!(f, "\n  {gap}")?;
            }
            f.write_str(
                "\nThe gateway could not write these records (its file took no writes while \
                 16 MiB of records waited in memory) and declared them when it could write \
                 again. A record deleted, changed or added, or a marker edited, is reported as \
                 tampering instead.\nApart from them, ",
            )?;
        }
        let markers = match self.gaps.len() {
            0 => String::new(),
            n => format!(" ({n} of them gap marker(s))"),
        };
        let counts = format!(
            "{} chain(s), {} record(s){markers}, {} checkpoint(s)",
            self.chains, self.records, self.checkpoints
        );
        if !self.signatures_checked {
            return write!(
                f,
                "the hashes link up: {counts}; signatures were not checked (give --key to check \
                 them): anyone can recompute a hash, so this does not show that the gateway wrote \
                 these records"
            );
        }
        if self.unsigned.is_empty() {
            return write!(
                f,
                "intact: {counts}, every signature valid, every record covered by a signed checkpoint"
            );
        }
        let checkpoints = match self.checkpoints {
            0 => "there is no checkpoint".to_owned(),
            n => format!("the {n} checkpoint(s) there have valid signatures"),
        };
        write!(
            f,
            "not all signed: {} of {} record(s) covered by no signed checkpoint, so nothing \
             shows that the gateway wrote them ({} chain(s); the hashes link up and \
             {checkpoints}):",
            self.unsigned_records(),
            self.records,
            self.chains,
        )?;
        for unsigned in &self.unsigned {
            write!(f, "\n  {unsigned}")?;
        }
        f.write_str(
            "\nA running gateway signs its latest records within `checkpoint_after` (default 60s) \
             or `checkpoint_every` records, and one that stopped cleanly (shutdown, reload, \
             rotation) ends each chain with a checkpoint. Other unsigned records were added, or \
             their checkpoint removed, after the gateway wrote the file, unless it was killed \
             (SIGKILL) before signing them; compare with the last `audit checkpoint signed` of \
             each chain in the gateway's log.",
        )
    }
}

/// Records of one chain that no checkpoint with a valid signature covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsigned {
    /// The chain, as reports show it: its control, bidirectional and invisible
    /// characters escaped (`\u{a}`), which the gateway's ids never have.
    pub chain: String,
    /// The first record not covered.
    pub first_seq: u64,
    /// The last (the chain's last record).
    pub last_seq: u64,
    /// The file and line of the first.
    pub from: (String, usize),
    /// The file and line of the last.
    pub to: (String, usize),
    /// The seq the chain's last signed checkpoint covers, if it has one.
    pub signed_through: Option<u64>,
}

impl fmt::Display for Unsigned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chain {} ", self.chain)?;
        if self.first_seq == self.last_seq {
            write!(f, "seq {}", self.first_seq)?;
        } else {
            write!(f, "seq {} to {}", self.first_seq, self.last_seq)?;
        }
        let ((from_file, from_line), (to_file, to_line)) = (&self.from, &self.to);
        if from_file != to_file {
            write!(
                f,
                ", file {from_file} line {from_line} to file {to_file} line {to_line}"
            )?;
        } else if from_line == to_line {
            write!(f, ", file {from_file} line {from_line}")?;
        } else {
            write!(f, ", file {from_file} lines {from_line} to {to_line}")?;
        }
        match self.signed_through {
            Some(seq) => write!(
                f,
                ": after the chain's last signed checkpoint, of seq {seq}"
            ),
            None => f.write_str(": the chain has no signed checkpoint"),
        }
    }
}

/// A chain whose records here start past seq 1: an excerpt of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excerpt {
    /// The chain, as reports show it (see [`Unsigned::chain`]).
    pub chain: String,
    /// The seq of its first record here.
    pub first_seq: u64,
    /// That record's `prev`: the hash of the record before it (seq `first_seq - 1`), as
    /// reports show it.
    pub prev: String,
    /// The file and line of the first record.
    pub at: (String, usize),
    /// The file and line of the checkpoint of seq `first_seq - 1` just before the first
    /// record, whose hash its `prev` matches: the first link checked against it. `None`
    /// when there is no such checkpoint: the first link is taken on trust.
    pub anchor: Option<(String, usize)>,
    /// With a key, whether the anchor's signature was checked (it is valid, or the files
    /// would not have verified).
    pub signatures_checked: bool,
}

impl fmt::Display for Excerpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let before = self.first_seq - 1;
        write!(
            f,
            "chain {} starts at seq {}, file {} line {}: ",
            self.chain, self.first_seq, self.at.0, self.at.1
        )?;
        match &self.anchor {
            None => write!(
                f,
                "the record before it, seq {before} with hash {}, is not in these files, so the \
                 link to it is taken on trust",
                self.prev
            ),
            Some((file, line)) => {
                write!(
                    f,
                    "its link to seq {before} (hash {}) was checked against the checkpoint of \
                     seq {before} at file {file} line {line}",
                    self.prev
                )?;
                if self.signatures_checked {
                    f.write_str(", whose signature is valid")
                } else {
                    f.write_str(
                        ", whose signature was not checked (give --key): anyone can write a \
                         checkpoint without one",
                    )
                }
            }
        }
    }
}

/// Records the gateway declared lost: a gap marker its sink linked into the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredGap {
    /// The chain, as reports show it (see [`Unsigned::chain`]).
    pub chain: String,
    /// The marker's seq.
    pub seq: u64,
    /// The marker's file and line.
    pub at: (String, usize),
    /// What it declares.
    pub gap: super::Gap,
    /// With a key, whether a checkpoint with a valid signature covers the marker (when it
    /// does not, the marker is among [`Verified::unsigned`] too).
    pub signed: Option<bool>,
}

impl fmt::Display for DeclaredGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use super::gap::{size, utc};
        let gap = &self.gap;
        write!(
            f,
            "chain {} seq {}, file {} line {}: {} record(s) ({}) lost to {} between {} and {} ({})",
            self.chain,
            self.seq,
            self.at.0,
            self.at.1,
            gap.records,
            size(gap.bytes),
            gap.reason,
            utc(gap.from_ms),
            utc(gap.to_ms),
            shown(&gap.error),
        )?;
        match self.signed {
            Some(true) => f.write_str("; a signed checkpoint covers the marker"),
            Some(false) => f.write_str("; no signed checkpoint covers the marker (see below)"),
            None => Ok(()),
        }
    }
}

/// The first problem found, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("file {file} line {line}: {problem}")]
pub struct Tampering {
    /// The file's name.
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// What is wrong.
    pub problem: Problem,
}

/// What is wrong with an audit file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// The record's bytes are not those the chain linked.
    #[error("record seq {seq} of chain {chain} was changed")]
    Changed {
        /// The chain.
        chain: String,
        /// The record.
        seq: u64,
    },
    /// A record is not there.
    #[error(
        "record seq {expected} of chain {chain} is missing (expected seq {expected}, found {found})"
    )]
    Missing {
        /// The chain.
        chain: String,
        /// The seq that should come next.
        expected: u64,
        /// The seq that came.
        found: u64,
    },
    /// A record comes before one it should follow.
    #[error("record seq {seq} of chain {chain} is out of order (expected seq {expected})")]
    OutOfOrder {
        /// The chain.
        chain: String,
        /// The record.
        seq: u64,
        /// The seq that should come here.
        expected: u64,
    },
    /// A checkpoint signed records that are no longer there.
    #[error(
        "chain {chain} goes no further than seq {last} here but a checkpoint signed seq {signed}: records were cut (truncated)"
    )]
    Truncated {
        /// The chain.
        chain: String,
        /// The last record present.
        last: u64,
        /// The seq the checkpoint signed.
        signed: u64,
    },
    /// A checkpoint's signature does not verify under the key.
    #[error("the checkpoint of seq {seq} of chain {chain} has a bad signature")]
    BadSignature {
        /// The chain.
        chain: String,
        /// The seq it claims to sign.
        seq: u64,
    },
    /// A checkpoint stands after later records than the one it signs.
    #[error("the checkpoint of seq {seq} of chain {chain} stands after seq {after}: it was moved")]
    CheckpointMoved {
        /// The chain.
        chain: String,
        /// The seq it signs.
        seq: u64,
        /// The last record before it.
        after: u64,
    },
    /// A checkpoint stands before the record it signs, with that record (or the ones
    /// before it) still to come: it was moved up, not the records cut.
    #[error(
        "the checkpoint of seq {seq} of chain {chain} stands before seq {before}, ahead of the record it signs: it was moved"
    )]
    CheckpointAhead {
        /// The chain.
        chain: String,
        /// The seq it signs.
        seq: u64,
        /// The first record after it.
        before: u64,
    },
    /// A record comes a second time, the same bytes as where it first stood.
    #[error(
        "record seq {seq} of chain {chain} is there a second time (first at file {first_file} line {first_line}): the gateway writes each record once, so the line was copied"
    )]
    DuplicateRecord {
        /// The chain.
        chain: String,
        /// The record.
        seq: u64,
        /// The file of the first.
        first_file: String,
        /// Its line.
        first_line: usize,
    },
    /// A record comes a second time where the chain's records of a file began: the same
    /// records are read twice, from the start of a file (the chain's first record, or the
    /// first one of a later file of a rotated series) on.
    #[error(
        "chain {chain} starts again at seq {seq} after seq {after}: the records from file {first_file} line {first_line} on come twice, so that file (or its start) was given or copied twice; give each file once, oldest first"
    )]
    Repeated {
        /// The chain.
        chain: String,
        /// The record it starts again at.
        seq: u64,
        /// The last record before it started again.
        after: u64,
        /// The file where the records it repeats first stood.
        first_file: String,
        /// The line of the record `seq` there.
        first_line: usize,
    },
    /// A record comes a second time, the same bytes as the one before it, and the record
    /// that should follow is missing: a record was deleted and a copy of the one before put
    /// in its place.
    #[error(
        "record seq {seq} of chain {chain} is there a second time (first at file {first_file} line {first_line}), and record seq {missing} is missing after it (found seq {found}): a record was deleted and a copy of the one before it put in its place"
    )]
    CopiedOverMissing {
        /// The chain.
        chain: String,
        /// The record copied.
        seq: u64,
        /// The file of the first.
        first_file: String,
        /// Its line.
        first_line: usize,
        /// The first record missing.
        missing: u64,
        /// The seq that came after the copy.
        found: u64,
    },
    /// A record comes after records of its chain that it should precede, the chain's
    /// records here having started past seq 1 (an excerpt): a record moved, or segments
    /// given newest first.
    #[error(
        "record seq {seq} of chain {chain} comes after the chain's records from seq {start} on (file {first_file} line {first_line}), which it should precede: a record was moved, or files (or segments of one) were given newer first; give them oldest first"
    )]
    BeforeStart {
        /// The chain.
        chain: String,
        /// The record.
        seq: u64,
        /// The seq of the chain's first record here.
        start: u64,
        /// The file of that first record.
        first_file: String,
        /// Its line.
        first_line: usize,
    },
    /// The first record of an excerpt does not link to the checkpoint just before it,
    /// which signs the record it follows.
    #[error(
        "record seq {seq} of chain {chain} does not link to the checkpoint of seq {signed} just before it (file {file} line {line}): the record or the checkpoint was changed"
    )]
    Unanchored {
        /// The chain.
        chain: String,
        /// The record.
        seq: u64,
        /// The seq the checkpoint signs.
        signed: u64,
        /// The checkpoint's file.
        file: String,
        /// Its line.
        line: usize,
    },
    /// A blank line between a file's lines, or after them: the gateway writes none.
    #[error(
        "the line is blank, and the gateway writes no blank line: a line was added to the file, or a record's text removed from its line, so the file is not as the gateway wrote it; if only blank lines were added (by an editor, say), remove them and verify again"
    )]
    BlankLine,
    /// The line ends with a carriage return: it was edited, or the file's line ends were
    /// converted.
    #[error(
        "the line ends with a carriage return, and the gateway ends its lines with a line feed alone: the line was edited, or the file's line ends were converted (by a copy to Windows or an editor), which changes every record's hash; if they were, convert them back (`dos2unix`) and verify again"
    )]
    LineEnds,
    /// The same checkpoint comes twice: the gateway signs a record once.
    #[error(
        "the checkpoint of seq {seq} of chain {chain} is there a second time (first at file {first_file} line {first_line}): the gateway signs each record once, so the line was copied"
    )]
    DuplicateCheckpoint {
        /// The chain.
        chain: String,
        /// The seq it signs.
        seq: u64,
        /// The file of the first.
        first_file: String,
        /// Its line.
        first_line: usize,
    },
    /// A record that reads as a gap marker is not one the gateway wrote: a field too many
    /// or too few, numbers that do not add up, or the first record of its chain (the
    /// gateway drops records only while it holds earlier ones it could not write).
    #[error("record seq {seq} of chain {chain} is not a gap marker the gateway wrote: {reason}")]
    ForgedGap {
        /// The chain.
        chain: String,
        /// The marker's seq.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The line is neither a chained record nor a checkpoint.
    #[error("{reason}")]
    Unreadable {
        /// Why, in a user's words.
        reason: String,
    },
    /// The line is longer than [`MAX_LINE_BYTES`] (or never ends).
    #[error(
        "the line is longer than {} MiB and was not read: the gateway writes no record that long (is this an audit file?)",
        limit >> 20
    )]
    TooLong {
        /// The limit, in bytes.
        limit: usize,
    },
}

#[derive(Deserialize)]
struct Link {
    seq: u64,
    chain: String,
    prev: String,
    /// Present on a gap marker (an audit record has no `gap`).
    #[serde(default)]
    gap: Option<serde::de::IgnoredAny>,
}

/// A gap marker as the sink writes it: the link and the `gap`, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MarkerLine {
    #[serde(rename = "seq")]
    _seq: serde::de::IgnoredAny,
    #[serde(rename = "chain")]
    _chain: serde::de::IgnoredAny,
    #[serde(rename = "prev")]
    _prev: serde::de::IgnoredAny,
    gap: super::Gap,
}

#[derive(Deserialize)]
struct CheckpointLine {
    checkpoint: Checkpoint,
}

#[derive(Deserialize)]
struct Checkpoint {
    chain: String,
    seq: u64,
    hash: String,
    at_ms: u64,
    signature: String,
}

enum Entry {
    Record {
        link: Link,
        hash: String,
        /// For a gap marker, what it declares, or why it is not one the gateway wrote.
        gap: Option<Result<super::Gap, String>>,
    },
    Checkpoint(Checkpoint),
}

/// A file (its index) and line (from 1).
type Place = (usize, usize);

/// The first problem of a chain, some only known for sure from the lines after it.
enum Found {
    /// Known.
    Known(Place, Problem),
    /// Record `found` came where `expected` should: out of order if `expected` comes
    /// later, else missing.
    Gap {
        at: Place,
        expected: u64,
        found: u64,
    },
    /// Record `seq` at `at` does not link to the one before (`seq - 1`, at `previous`):
    /// it changed if the next record does not link to it either, else the one before did.
    Link {
        at: Place,
        seq: u64,
        hash: String,
        previous: Option<Place>,
    },
    /// Record `seq` at `at` is a copy of the one before it (at `first`): a copy alone if
    /// the next record follows on, else a copy put in place of a record deleted.
    Copy { at: Place, seq: u64, first: Place },
}

/// A chain's id as reports show it: as it is when it is plain text (the gateway's are 32
/// hex digits), else with its control, bidirectional and invisible characters escaped
/// (`\n`, `\u{1b}`, `\u{202e}`), so that an id someone wrote into a file cannot start a
/// line of its own in the report (a forged `intact: …`), move the terminal's cursor, or
/// reorder what is shown after it.
fn shown(id: &str) -> String {
    let mut shown = String::with_capacity(id.len());
    for c in id.chars() {
        if hides_text(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// A checkpoint that stands before the record it signs: the records after it were cut —
/// unless they come after all, and the record it signs with the hash it signed (then the
/// checkpoint was moved up), or with another (then that record was changed).
struct Ahead {
    /// Where the checkpoint stands.
    at: Place,
    /// The seq it signs, and the hash it signs for it.
    seq: u64,
    hash: String,
    /// The first record after it.
    before: Option<u64>,
}

/// Where a chain's records here begin, when past seq 1 ([`Excerpt`]).
struct Start {
    seq: u64,
    /// Its `prev`, as reports show it, and as it is.
    prev: String,
    link: String,
    at: Place,
    /// The checkpoint of `seq - 1` just before, that the first link was checked against.
    anchor: Option<Place>,
}

/// Where one chain stands.
struct ChainState {
    /// The chain's id, as reports show it ([`shown`]).
    id: String,
    last_seq: u64,
    last_hash: String,
    last_at: Option<Place>,
    /// Where the chain's records began in each file that holds some: the seq, hash and
    /// place of the first, to tell a file (or its start) read twice. One per file.
    starts: Vec<(u64, String, Place)>,
    /// A checkpoint that came before the record it signs ([`Ahead`]), while the chain
    /// has not reached that record.
    ahead: Option<Ahead>,
    records: u64,
    checkpoints: u64,
    /// The seq and place of the last checkpoint that passed.
    last_checkpoint: Option<(u64, Place)>,
    /// The first record no checkpoint has covered yet.
    first_unsigned: Option<(u64, Place)>,
    /// The gap markers that passed: seq, place, what they declare.
    gaps: Vec<(u64, Place, super::Gap)>,
    /// Where the chain's records here begin, when past seq 1.
    start: Option<Start>,
    found: Option<Found>,
}

impl ChainState {
    fn new(id: String) -> Self {
        ChainState {
            id,
            last_seq: 0,
            last_hash: GENESIS.to_owned(),
            last_at: None,
            starts: Vec::new(),
            ahead: None,
            records: 0,
            checkpoints: 0,
            last_checkpoint: None,
            first_unsigned: None,
            gaps: Vec::new(),
            start: None,
            found: None,
        }
    }

    fn record(
        &mut self,
        at: Place,
        link: Link,
        hash: String,
        gap: Option<Result<super::Gap, String>>,
        files: &[String],
    ) {
        if let Some(found) = &self.found {
            // Only what settles the problem found matters now.
            self.found = match found {
                Found::Gap {
                    at: gap,
                    expected,
                    found,
                } if link.seq == *expected => Some(Found::Known(
                    *gap,
                    Problem::OutOfOrder {
                        chain: self.id.clone(),
                        seq: *found,
                        expected: *expected,
                    },
                )),
                Found::Link {
                    at: broken,
                    seq,
                    hash: broken_hash,
                    ..
                } if link.prev != *broken_hash => Some(Found::Known(
                    *broken,
                    Problem::Changed {
                        chain: self.id.clone(),
                        seq: *seq,
                    },
                )),
                Found::Link { .. } => Some(self.blame_previous()),
                Found::Copy { at, seq, first } => {
                    let (chain, seq) = (self.id.clone(), *seq);
                    let (first_file, first_line) = (files[first.0].clone(), first.1);
                    let expected = self.last_seq + 1;
                    Some(Found::Known(
                        *at,
                        if link.seq > expected {
                            Problem::CopiedOverMissing {
                                chain,
                                seq,
                                first_file,
                                first_line,
                                missing: expected,
                                found: link.seq,
                            }
                        } else {
                            Problem::DuplicateRecord {
                                chain,
                                seq,
                                first_file,
                                first_line,
                            }
                        },
                    ))
                }
                _ => return,
            };
            return;
        }
        if self.last_at.is_none()
            && link.seq > 1
            && let Some(found) = self.begin_excerpt(at, &link, files)
        {
            self.found = Some(found);
            return;
        }
        let expected = self.last_seq + 1;
        if link.seq > expected {
            self.found = Some(Found::Gap {
                at,
                expected,
                found: link.seq,
            });
            return;
        }
        if link.seq < expected {
            let chain = self.id.clone();
            let seq = link.seq;
            if let Some(first) = self.start.as_ref().filter(|start| seq < start.seq) {
                // The record the chain's first one here follows, right after it: that
                // first one is out of order (two records swapped), as in a whole chain.
                if seq + 1 == first.seq && self.last_seq == first.seq && hash == first.link {
                    let problem = Problem::OutOfOrder {
                        chain,
                        seq: first.seq,
                        expected: seq,
                    };
                    self.found = Some(Found::Known(first.at, problem));
                    return;
                }
                let problem = Problem::BeforeStart {
                    chain,
                    seq,
                    start: first.seq,
                    first_file: files[first.at.0].clone(),
                    first_line: first.at.1,
                };
                self.found = Some(Found::Known(at, problem));
                return;
            }
            // A record where the chain's records of a file began, itself first in its
            // file or not the copy of the line just before: a file read again.
            let new_file = self.last_at.is_none_or(|(file, _)| file != at.0);
            let copy = seq == self.last_seq && hash == self.last_hash;
            let start = self
                .starts
                .iter()
                .find(|(start, start_hash, _)| *start == seq && *start_hash == hash)
                .filter(|_| new_file || !copy);
            let problem = match (start, self.last_at) {
                (Some((_, _, (file, line))), _) => Problem::Repeated {
                    chain,
                    seq,
                    after: self.last_seq,
                    first_file: files[*file].clone(),
                    first_line: *line,
                },
                (None, Some(first)) if copy => {
                    // Settled by the next record: a deletion after the copy is told too.
                    self.found = Some(Found::Copy { at, seq, first });
                    return;
                }
                _ => Problem::OutOfOrder {
                    chain,
                    seq,
                    expected,
                },
            };
            self.found = Some(Found::Known(at, problem));
            return;
        }
        if link.prev != self.last_hash {
            // Either the previous record changed, or this one's link did (then the next
            // record's link does not match this one either).
            self.found = Some(Found::Link {
                at,
                seq: link.seq,
                hash,
                previous: self.last_at,
            });
            return;
        }
        // A marker linked where it stands: is it one the gateway wrote?
        let gap = gap.map(|gap| {
            let gap = gap?;
            if link.seq == 1 {
                return Err(
                    "it is the first record of its chain, and the gateway drops \
                            records only while it holds earlier ones it could not write"
                        .to_owned(),
                );
            }
            gap.inconsistency().map_or(Ok(gap), Err)
        });
        match gap {
            Some(Err(reason)) => {
                let chain = self.id.clone();
                let seq = link.seq;
                self.found = Some(Found::Known(at, Problem::ForgedGap { chain, seq, reason }));
                return;
            }
            Some(Ok(gap)) => self.gaps.push((link.seq, at, gap)),
            None => {}
        }
        if self.last_at.is_none_or(|(file, _)| file != at.0) {
            self.starts.push((link.seq, hash.clone(), at));
        }
        if let Some(ahead) = &mut self.ahead {
            ahead.before.get_or_insert(link.seq);
            if ahead.seq == link.seq {
                let chain = self.id.clone();
                self.found = Some(if ahead.hash == hash {
                    let before = ahead.before.unwrap_or(link.seq);
                    let seq = ahead.seq;
                    Found::Known(ahead.at, Problem::CheckpointAhead { chain, seq, before })
                } else {
                    Found::Known(
                        at,
                        Problem::Changed {
                            chain,
                            seq: link.seq,
                        },
                    )
                });
                return;
            }
        }
        self.last_seq = link.seq;
        self.last_hash = hash;
        self.last_at = Some(at);
        self.records += 1;
        self.first_unsigned.get_or_insert((link.seq, at));
    }

    /// The chain's first record here is `link`, past seq 1: when it begins its file, an
    /// excerpt of the chain, whose first link is checked against a checkpoint of the
    /// record before it standing just before (then counted), or else taken on trust. The
    /// problem, if any. Elsewhere in a file, its earlier records are missing.
    fn begin_excerpt(&mut self, at: Place, link: &Link, files: &[String]) -> Option<Found> {
        let chain = self.id.clone();
        if link.prev == GENESIS {
            // Only a chain's first record links to `genesis`.
            return Some(Found::Known(
                at,
                Problem::Changed {
                    chain,
                    seq: link.seq,
                },
            ));
        }
        // An excerpt begins a file (with the checkpoint before its first record, if kept):
        // a chain that starts past seq 1 further down lost its first records there, as
        // when lines of another replica's chain were spliced in.
        let begins_file = match self.ahead.as_ref().filter(|ahead| ahead.seq < link.seq) {
            Some(ahead) => ahead.at == (at.0, 1) && at.1 == 2,
            None => at.1 == 1,
        };
        if !begins_file {
            return None;
        }
        let mut anchor = None;
        // A checkpoint of an earlier seq before it (one of a later seq is moved, or the
        // records after it cut: told as for any chain).
        if let Some(ahead) = self.ahead.take_if(|ahead| ahead.seq < link.seq) {
            if ahead.seq + 1 < link.seq {
                return Some(Found::Gap {
                    at,
                    expected: ahead.seq + 1,
                    found: link.seq,
                });
            }
            if ahead.hash != link.prev {
                let problem = Problem::Unanchored {
                    chain,
                    seq: link.seq,
                    signed: ahead.seq,
                    file: files[ahead.at.0].clone(),
                    line: ahead.at.1,
                };
                return Some(Found::Known(at, problem));
            }
            self.checkpoints += 1;
            self.last_checkpoint = Some((ahead.seq, ahead.at));
            anchor = Some(ahead.at);
        }
        self.start = Some(Start {
            seq: link.seq,
            prev: shown(&link.prev),
            link: link.prev.clone(),
            at,
            anchor,
        });
        self.last_seq = link.seq - 1;
        self.last_hash = link.prev.clone();
        None
    }

    /// A broken link blamed on the record before it (or on itself when it is the first).
    fn blame_previous(&self) -> Found {
        let Some(Found::Link {
            at, seq, previous, ..
        }) = &self.found
        else {
            unreachable!("only a broken link is blamed")
        };
        match previous {
            Some(previous) => Found::Known(
                *previous,
                Problem::Changed {
                    chain: self.id.clone(),
                    seq: self.last_seq,
                },
            ),
            None => Found::Known(
                *at,
                Problem::Changed {
                    chain: self.id.clone(),
                    seq: *seq,
                },
            ),
        }
    }

    fn checkpoint(
        &mut self,
        at: Place,
        checkpoint: Checkpoint,
        key: Option<&CheckpointPublicKey>,
        files: &[String],
    ) {
        if self.found.is_some() {
            return;
        }
        let chain = || self.id.clone();
        let problem = if key.is_some_and(|key| {
            let message = checkpoint_message(
                &checkpoint.chain,
                checkpoint.seq,
                &checkpoint.hash,
                checkpoint.at_ms,
            );
            !key.verifies(&message, &checkpoint.signature)
        }) {
            Problem::BadSignature {
                chain: chain(),
                seq: checkpoint.seq,
            }
        } else if checkpoint.seq > self.last_seq {
            // Cut records, or a checkpoint moved up: the records after it tell.
            self.ahead.get_or_insert(Ahead {
                at,
                seq: checkpoint.seq,
                hash: checkpoint.hash,
                before: None,
            });
            return;
        } else if checkpoint.seq < self.last_seq {
            Problem::CheckpointMoved {
                chain: chain(),
                seq: checkpoint.seq,
                after: self.last_seq,
            }
        } else if checkpoint.hash != self.last_hash {
            let problem = Problem::Changed {
                chain: chain(),
                seq: self.last_seq,
            };
            self.found = Some(Found::Known(self.last_at.unwrap_or(at), problem));
            return;
        } else if let Some((seq, first)) = self.last_checkpoint
            && seq == checkpoint.seq
        {
            Problem::DuplicateCheckpoint {
                chain: chain(),
                seq,
                first_file: files[first.0].clone(),
                first_line: first.1,
            }
        } else {
            self.checkpoints += 1;
            self.last_checkpoint = Some((checkpoint.seq, at));
            self.first_unsigned = None;
            return;
        };
        self.found = Some(Found::Known(at, problem));
    }

    /// The chain's problem, now that every line has been read.
    fn problem(&self, files: &[String]) -> Option<(Place, Problem)> {
        let Some(found) = &self.found else {
            // The chain never reached the record a checkpoint signed: cut.
            let ahead = self.ahead.as_ref()?;
            let (chain, last, signed) = (self.id.clone(), self.last_seq, ahead.seq);
            return Some((
                ahead.at,
                Problem::Truncated {
                    chain,
                    last,
                    signed,
                },
            ));
        };
        match found {
            Found::Known(at, problem) => Some((*at, problem.clone())),
            Found::Gap {
                at,
                expected,
                found,
            } => Some((
                *at,
                Problem::Missing {
                    chain: self.id.clone(),
                    expected: *expected,
                    found: *found,
                },
            )),
            Found::Link { .. } => match self.blame_previous() {
                Found::Known(at, problem) => Some((at, problem)),
                _ => None,
            },
            Found::Copy { at, seq, first } => Some((
                *at,
                Problem::DuplicateRecord {
                    chain: self.id.clone(),
                    seq: *seq,
                    first_file: files[first.0].clone(),
                    first_line: first.1,
                },
            )),
        }
    }
}

/// Checks audit files read a line at a time: [`read`](Self::read) each file in order,
/// then [`finish`](Self::finish). It keeps a few fields per chain, never a file, so a
/// rotated series of any size verifies in little memory.
pub struct Verifier {
    key: Option<CheckpointPublicKey>,
    files: Vec<String>,
    chains: Vec<ChainState>,
    index: HashMap<String, usize>,
    unreadable: Option<Tampering>,
    /// The first blank line of a file that holds records or checkpoints too.
    blank: Option<Place>,
}

impl Verifier {
    /// A verifier that, with `key`, checks the checkpoints' signatures too.
    pub fn new(key: Option<&CheckpointPublicKey>) -> Self {
        Verifier {
            key: key.cloned(),
            files: Vec::new(),
            chains: Vec::new(),
            index: HashMap::new(),
            unreadable: None,
            blank: None,
        }
    }

    /// Reads the file `name` from `reader`, line by line (none longer than
    /// [`MAX_LINE_BYTES`]). After a line that is not a record, nothing more is read. A
    /// blank line is reported ([`Problem::BlankLine`]) in a file that holds a record or a
    /// checkpoint; a file of blank lines alone holds no record.
    ///
    /// # Errors
    ///
    /// The reader's error.
    pub fn read(
        &mut self,
        name: impl Into<String>,
        mut reader: impl BufRead,
    ) -> std::io::Result<()> {
        let file = self.files.len();
        self.files.push(name.into());
        let mut line = Vec::new();
        let mut number = 0;
        let (mut blank, mut entries) = (None, false);
        while self.unreadable.is_none() {
            line.clear();
            let ended = match read_line(&mut reader, &mut line)? {
                ReadLine::End => break,
                ReadLine::TooLong => {
                    let limit = MAX_LINE_BYTES;
                    self.stop(file, number + 1, Problem::TooLong { limit });
                    break;
                }
                ReadLine::Ended => true,
                ReadLine::Unended => false,
            };
            number += 1;
            if line.is_empty() {
                blank.get_or_insert(number);
            } else {
                entries = true;
                self.line(file, number, &line, ended);
            }
        }
        if let Some(line) = blank.filter(|_| entries) {
            self.blank.get_or_insert((file, line));
        }
        Ok(())
    }

    fn stop(&mut self, file: usize, line: usize, problem: Problem) {
        self.unreadable = Some(Tampering {
            file: self.files[file].clone(),
            line,
            problem,
        });
    }

    fn line(&mut self, file: usize, number: usize, line: &[u8], ended: bool) {
        if line.ends_with(b"\r") {
            return self.stop(file, number, Problem::LineEnds);
        }
        let entry = match parse(line, ended) {
            Ok(entry) => entry,
            Err(reason) => return self.stop(file, number, Problem::Unreadable { reason }),
        };
        let chain = match &entry {
            Entry::Record { link, .. } => &link.chain,
            Entry::Checkpoint(checkpoint) => &checkpoint.chain,
        };
        let slot = match self.index.get(chain) {
            Some(slot) => *slot,
            None => {
                self.index.insert(chain.clone(), self.chains.len());
                self.chains.push(ChainState::new(shown(chain)));
                self.chains.len() - 1
            }
        };
        let state = &mut self.chains[slot];
        match entry {
            Entry::Record { link, hash, gap } => {
                state.record((file, number), link, hash, gap, &self.files);
            }
            Entry::Checkpoint(checkpoint) => {
                state.checkpoint((file, number), checkpoint, self.key.as_ref(), &self.files);
            }
        }
    }

    /// What the files read hold.
    ///
    /// # Errors
    ///
    /// The first [`Tampering`] found, by file and line.
    pub fn finish(self) -> Result<Verified, Tampering> {
        if let Some(unreadable) = self.unreadable {
            return Err(unreadable);
        }
        let blank = self.blank.map(|at| (at, Problem::BlankLine));
        let first = self
            .chains
            .iter()
            .filter_map(|chain| chain.problem(&self.files))
            .chain(blank)
            .min_by_key(|(at, _)| *at);
        if let Some(((file, line), problem)) = first {
            return Err(Tampering {
                file: self.files[file].clone(),
                line,
                problem,
            });
        }
        let place = |(file, line): Place| (self.files[file].clone(), line);
        let unsigned = if self.key.is_some() {
            self.chains
                .iter()
                .filter_map(|chain| {
                    let (first_seq, from) = chain.first_unsigned?;
                    Some(Unsigned {
                        chain: chain.id.clone(),
                        first_seq,
                        last_seq: chain.last_seq,
                        from: place(from),
                        to: place(chain.last_at?),
                        signed_through: chain.last_checkpoint.map(|(seq, _)| seq),
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut gaps: Vec<(Place, DeclaredGap)> = Vec::new();
        for chain in &self.chains {
            for (seq, at, gap) in &chain.gaps {
                let signed = self.key.as_ref().map(|_| {
                    chain
                        .last_checkpoint
                        .is_some_and(|(signed, _)| signed >= *seq)
                });
                let declared = DeclaredGap {
                    chain: chain.id.clone(),
                    seq: *seq,
                    at: place(*at),
                    gap: gap.clone(),
                    signed,
                };
                gaps.push((*at, declared));
            }
        }
        gaps.sort_by_key(|(at, _)| *at);
        let mut excerpts: Vec<(Place, Excerpt)> = self
            .chains
            .iter()
            .filter_map(|chain| {
                let start = chain.start.as_ref()?;
                let excerpt = Excerpt {
                    chain: chain.id.clone(),
                    first_seq: start.seq,
                    prev: start.prev.clone(),
                    at: place(start.at),
                    anchor: start.anchor.map(place),
                    signatures_checked: self.key.is_some(),
                };
                Some((start.at, excerpt))
            })
            .collect();
        excerpts.sort_by_key(|(at, _)| *at);
        Ok(Verified {
            chains: self.chains.len(),
            records: self.chains.iter().map(|c| c.records).sum(),
            checkpoints: self.chains.iter().map(|c| c.checkpoints).sum(),
            signatures_checked: self.key.is_some(),
            unsigned,
            gaps: gaps.into_iter().map(|(_, gap)| gap).collect(),
            excerpts: excerpts.into_iter().map(|(_, excerpt)| excerpt).collect(),
        })
    }
}

/// Checks the chains in `files` (in the order given); with `key`, the checkpoints'
/// signatures too, and which records they cover.
///
/// # Errors
///
/// The first [`Tampering`] found, by file and line.
pub fn verify(
    files: &[AuditFile],
    key: Option<&CheckpointPublicKey>,
) -> Result<Verified, Tampering> {
    let mut verifier = Verifier::new(key);
    for file in files {
        verifier
            .read(file.name.clone(), file.contents.as_slice())
            .expect("reading from memory cannot fail");
    }
    verifier.finish()
}

/// What [`read_line`] found.
enum ReadLine {
    /// A line that ends with a newline.
    Ended,
    /// The file's last line, without a newline.
    Unended,
    /// A line longer than [`MAX_LINE_BYTES`]: not read further.
    TooLong,
    /// The end of the file.
    End,
}

/// Reads into `line` the next line of `reader` without its newline, holding no more than
/// [`MAX_LINE_BYTES`] of it (so that a line that never ends, as in `/dev/zero`, fails
/// fast).
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<ReadLine> {
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffer.is_empty() {
            return Ok(if line.is_empty() {
                ReadLine::End
            } else {
                ReadLine::Unended
            });
        }
        let newline = buffer.iter().position(|b| *b == b'\n');
        let take = newline.unwrap_or(buffer.len());
        if line.len() + take > MAX_LINE_BYTES {
            return Ok(ReadLine::TooLong);
        }
        line.extend_from_slice(&buffer[..take]);
        reader.consume(take + usize::from(newline.is_some()));
        if newline.is_some() {
            return Ok(ReadLine::Ended);
        }
    }
}

fn parse(line: &[u8], ended: bool) -> Result<Entry, String> {
    if line.starts_with(br#"{"checkpoint":"#) {
        return serde_json::from_slice::<CheckpointLine>(line)
            .map(|c| Entry::Checkpoint(c.checkpoint))
            .map_err(|e| explain(line, ended, &e));
    }
    let link: Link = serde_json::from_slice(line).map_err(|e| explain(line, ended, &e))?;
    let gap = link.gap.is_some().then(|| {
        serde_json::from_slice::<MarkerLine>(line)
            .map(|marker| marker.gap)
            .map_err(|e| plain(&e))
    });
    Ok(Entry::Record {
        link,
        hash: line_hash(line),
        gap,
    })
}

/// Why `line` is not a record or a checkpoint, in a user's words (`error`: serde's).
fn explain(line: &[u8], ended: bool, error: &serde_json::Error) -> String {
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) if e.is_eof() && !ended => {
            return "the file's last line stops in the middle of its JSON, without a newline: \
                    the file was cut short (truncated, or the gateway was killed while writing)"
                .to_owned();
        }
        Err(e) if e.is_eof() => {
            return "the line stops in the middle of its JSON: it was cut short".to_owned();
        }
        Err(e) => return format!("not JSON, so not an audit record ({})", plain(&e)),
    };
    let not_a_record = "not a line of a chained audit file (`audit: {sink: file}`)";
    let Some(object) = value.as_object() else {
        return format!("{}, {not_a_record}", describe(&value));
    };
    let (object, fields, what) = if line.starts_with(br#"{"checkpoint":"#) {
        let Some(checkpoint) = object.get("checkpoint").and_then(Value::as_object) else {
            return "its `checkpoint` is not an object: not a checkpoint".to_owned();
        };
        (
            checkpoint,
            &["chain", "seq", "hash", "at_ms", "signature"][..],
            "the checkpoint",
        )
    } else {
        (object, &["seq", "chain", "prev"][..], "the record")
    };
    for field in fields {
        let whole = matches!(*field, "seq" | "at_ms");
        match object.get(*field) {
            None if what == "the record" && object.contains_key("checkpoint") => {
                return "a checkpoint not written as the gateway writes it (`{\"checkpoint\":` \
                        at the start of the line)"
                    .to_owned();
            }
            None => return format!("{what} has no `{field}`: {not_a_record}"),
            Some(v) if whole && v.as_u64().is_none() => {
                let expected = if *field == "seq" {
                    "a whole number, 1 or more"
                } else {
                    "a whole number of milliseconds"
                };
                return format!("{what}'s `{field}` is {}, expected {expected}", describe(v));
            }
            Some(v) if !whole && !v.is_string() => {
                return format!("{what}'s `{field}` is {}, expected a string", describe(v));
            }
            Some(_) => {}
        }
    }
    plain(error)
}

/// A serde_json message in JSON's words, with its column (the line is the file's).
fn plain(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(message, _)| message);
    let message = match message {
        "expected value" => "expected a JSON value".to_owned(),
        other => in_json_words(other),
    };
    match error.column() {
        0 => message,
        column => format!("{message} at column {column}"),
    }
}

/// A JSON value as a user would name it.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            format!("the string \"{}…\"", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a JSON array".to_owned(),
        Value::Object(_) => "a JSON object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{ChainOptions, ChainWriter, CheckpointKey};

    const SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    /// The lines of a chain of `n` records, with a checkpoint every `every`.
    fn chain_lines(n: u64, every: u64) -> Vec<String> {
        let key = CheckpointKey::from_base64(SEED).unwrap();
        let mut writer = ChainWriter::new(
            ChainOptions::default()
                .signing_key(key)
                .checkpoint_every(every),
        );
        let mut out = Vec::new();
        for i in 1..=n {
            writer.append(
                format!(r#"{{"tool":"t{i}","user_id":"ann"}}"#).as_bytes(),
                &mut out,
            );
        }
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn check(lines: &[String], key: bool) -> Result<Verified, Tampering> {
        let public = CheckpointPublicKey::from_base64(
            &CheckpointKey::from_base64(SEED).unwrap().public_key(),
        )
        .unwrap();
        let file = AuditFile::new("a.jsonl", (lines.join("\n") + "\n").into_bytes());
        verify(&[file], key.then_some(&public))
    }

    fn seq_of(line: &str) -> u64 {
        serde_json::from_str::<serde_json::Value>(line).unwrap()["seq"]
            .as_u64()
            .unwrap()
    }

    #[test]
    fn an_intact_chain_verifies_with_and_without_the_key() {
        let lines = chain_lines(7, 3);
        assert_eq!(lines.len(), 9, "7 records and checkpoints after 3 and 6");
        let verified = check(&lines, true).unwrap();
        assert_eq!(
            (verified.chains, verified.records, verified.checkpoints),
            (1, 7, 2)
        );
        assert!(verified.signatures_checked);
        assert!(!check(&lines, false).unwrap().signatures_checked);
    }

    #[test]
    fn an_edited_field_is_reported_at_its_record() {
        let mut lines = chain_lines(5, 100);
        lines[1] = lines[1].replace("\"ann\"", "\"bob\"");
        let found = check(&lines, false).unwrap_err();
        assert_eq!(
            (found.line, &found.problem),
            (
                2,
                &Problem::Changed {
                    chain: chain_of(&lines[0]),
                    seq: 2
                }
            )
        );
    }

    #[test]
    fn an_edited_link_is_reported_at_the_record_carrying_it() {
        let mut lines = chain_lines(5, 100);
        let prev = serde_json::from_str::<serde_json::Value>(&lines[2]).unwrap()["prev"]
            .as_str()
            .unwrap()
            .to_owned();
        lines[2] = lines[2].replace(&prev, &"0".repeat(64));
        let found = check(&lines, false).unwrap_err();
        assert_eq!(
            found.problem,
            Problem::Changed {
                chain: chain_of(&lines[0]),
                seq: 3
            }
        );
    }

    #[test]
    fn the_last_record_edited_is_caught_by_its_checkpoint() {
        let mut lines = chain_lines(3, 3);
        lines[2] = lines[2].replace("t3", "t9");
        let found = check(&lines, false).unwrap_err();
        assert_eq!(
            (found.line, found.problem),
            (
                3,
                Problem::Changed {
                    chain: chain_of(&lines[0]),
                    seq: 3
                }
            )
        );
    }

    #[test]
    fn a_deleted_record_is_missing_and_a_swap_is_out_of_order() {
        let lines = chain_lines(5, 100);
        let mut deleted = lines.clone();
        deleted.remove(2);
        let found = check(&deleted, false).unwrap_err();
        assert!(
            matches!(
                found.problem,
                Problem::Missing {
                    expected: 3,
                    found: 4,
                    ..
                }
            ),
            "{found}"
        );
        let mut swapped = lines.clone();
        swapped.swap(1, 2);
        let found = check(&swapped, false).unwrap_err();
        assert_eq!(found.line, 2);
        assert!(
            matches!(
                found.problem,
                Problem::OutOfOrder {
                    seq: 3,
                    expected: 2,
                    ..
                }
            ),
            "{found}"
        );
    }

    #[test]
    fn records_cut_below_a_checkpoint_are_truncation() {
        let mut lines = chain_lines(6, 6);
        assert_eq!(seq_of(&lines[5]), 6);
        lines.drain(3..6);
        let found = check(&lines, true).unwrap_err();
        assert!(
            matches!(
                found.problem,
                Problem::Truncated {
                    last: 3,
                    signed: 6,
                    ..
                }
            ),
            "{found}"
        );
    }

    #[test]
    fn a_forged_checkpoint_fails_only_under_the_key() {
        let mut lines = chain_lines(3, 3);
        let sig = serde_json::from_str::<serde_json::Value>(&lines[3]).unwrap()["checkpoint"]["signature"].as_str().unwrap().to_owned();
        lines[3] = lines[3].replace(&sig, &sig.chars().rev().collect::<String>());
        assert!(check(&lines, false).is_ok());
        let found = check(&lines, true).unwrap_err();
        assert!(
            matches!(found.problem, Problem::BadSignature { seq: 3, .. }),
            "{found}"
        );
    }

    #[test]
    fn lines_spliced_from_another_chain_are_reported() {
        let a = chain_lines(4, 100);
        let b = chain_lines(4, 100);
        let spliced: Vec<String> = a[..2].iter().chain(&b[2..]).cloned().collect();
        let found = check(&spliced, false).unwrap_err();
        assert_eq!(found.line, 3);
        assert!(
            matches!(
                found.problem,
                Problem::Missing {
                    expected: 1,
                    found: 3,
                    ..
                }
            ),
            "{found}"
        );
    }

    #[test]
    fn a_checkpoint_moved_below_later_records_is_reported() {
        let mut lines = chain_lines(4, 3);
        lines.swap(3, 4);
        let found = check(&lines, true).unwrap_err();
        assert_eq!(found.line, 5);
        assert!(
            matches!(
                found.problem,
                Problem::CheckpointMoved {
                    seq: 3,
                    after: 4,
                    ..
                }
            ),
            "{found}"
        );
    }

    #[test]
    fn a_checkpoint_moved_above_its_record_is_moved_not_cut() {
        let mut lines = chain_lines(4, 3);
        let checkpoint = lines.remove(3);
        lines.insert(1, checkpoint);
        let found = check(&lines, true).unwrap_err();
        assert_eq!(found.line, 2);
        assert!(
            matches!(
                found.problem,
                Problem::CheckpointAhead {
                    seq: 3,
                    before: 2,
                    ..
                }
            ),
            "{found}"
        );
    }

    #[test]
    fn a_checkpoint_above_a_record_that_differs_from_what_it_signed_names_the_record() {
        let mut lines = chain_lines(4, 3);
        let checkpoint = lines.remove(3);
        lines.insert(2, checkpoint);
        lines[3] = lines[3].replace(r#""tool":"t3""#, r#""tool":"tX""#);
        let found = check(&lines, true).unwrap_err();
        assert_eq!(found.line, 4);
        assert!(
            matches!(found.problem, Problem::Changed { seq: 3, .. }),
            "{found}"
        );
        // Records after it that never reach the one it signs: cut.
        let mut lines = chain_lines(6, 6);
        let checkpoint = lines.remove(6);
        lines.insert(2, checkpoint);
        lines.truncate(5);
        let found = check(&lines, true).unwrap_err();
        assert_eq!(found.line, 3);
        assert!(
            matches!(
                found.problem,
                Problem::Truncated {
                    last: 4,
                    signed: 6,
                    ..
                }
            ),
            "{found}"
        );
    }

    #[test]
    fn a_copied_record_line_is_reported_as_a_copy_of_where_it_first_stood() {
        let mut lines = chain_lines(5, 100);
        lines.insert(3, lines[2].clone());
        let found = check(&lines, false).unwrap_err();
        assert_eq!(found.line, 4);
        assert!(
            matches!(
                &found.problem,
                Problem::DuplicateRecord {
                    seq: 3,
                    first_line: 3,
                    ..
                }
            ),
            "{found}"
        );
        assert!(found.to_string().contains("copied"), "{found}");
    }

    #[test]
    fn a_file_given_twice_is_reported_as_the_chain_starting_again() {
        for lines in [chain_lines(5, 100), chain_lines(6, 3)] {
            let twice: Vec<String> = lines.iter().chain(&lines).cloned().collect();
            let found = check(&twice, true).unwrap_err();
            assert_eq!(found.line, lines.len() + 1);
            let last = lines.iter().rev().find(|l| !is_checkpoint(l)).unwrap();
            assert!(
                matches!(found.problem, Problem::Repeated { after, .. } if after == seq_of(last)),
                "{found}"
            );
        }
    }

    /// `lines` split into files `a.1` (the first `split`) and `a.2`.
    fn rotated(lines: &[String], split: usize) -> [AuditFile; 2] {
        let file = |name: &str, lines: &[String]| {
            AuditFile::new(name, (lines.join("\n") + "\n").into_bytes())
        };
        [file("a.1", &lines[..split]), file("a.2", &lines[split..])]
    }

    #[test]
    fn a_rotated_file_given_twice_is_named_as_given_twice_wherever_its_records_start() {
        // Records 1-3 and their checkpoint in `a.1`, records 4-6 and theirs in `a.2`.
        let lines = chain_lines(6, 3);
        let [first, second] = rotated(&lines, 4);
        for (series, seq, after, file) in [
            ([&first, &second, &second], 4, 6, "a.2"),
            ([&first, &second, &first], 1, 6, "a.1"),
            ([&first, &first, &second], 1, 3, "a.1"),
        ] {
            let series: Vec<AuditFile> = series.into_iter().cloned().collect();
            let found = verify(&series, Some(&public())).unwrap_err();
            assert_eq!((found.file.as_str(), found.line), (file, 1), "{found}");
            assert_eq!(
                found.problem,
                Problem::Repeated {
                    chain: chain_of(&lines[0]),
                    seq,
                    after,
                    first_file: file.to_owned(),
                    first_line: 1,
                },
            );
            assert!(
                found.to_string().contains("given or copied twice"),
                "{found}"
            );
        }
    }

    #[test]
    fn a_deleted_record_whose_place_a_copy_took_is_reported_with_the_copy() {
        let lines = chain_lines(5, 100);
        let mut tampered = lines.clone();
        tampered[3] = lines[2].clone();
        let found = check(&tampered, false).unwrap_err();
        assert_eq!(
            (found.line, &found.problem),
            (
                4,
                &Problem::CopiedOverMissing {
                    chain: chain_of(&lines[0]),
                    seq: 3,
                    first_file: "a.jsonl".to_owned(),
                    first_line: 3,
                    missing: 4,
                    found: 5,
                }
            )
        );
        let report = found.to_string();
        assert!(
            report.contains("second time") && report.contains("seq 4 is missing"),
            "{report}"
        );
        // The copy as the chain's last record: a copy, nothing more to tell.
        let mut copied = lines.clone();
        copied.push(lines[4].clone());
        let found = check(&copied, false).unwrap_err();
        assert!(
            matches!(found.problem, Problem::DuplicateRecord { seq: 5, .. }),
            "{found}"
        );
    }

    #[test]
    fn a_blank_line_among_records_is_reported_where_it_stands() {
        let lines = chain_lines(4, 3);
        for at in [0, 2, lines.len()] {
            let mut blank = lines.clone();
            blank.insert(at, String::new());
            let found = check(&blank, true).unwrap_err();
            assert_eq!((found.line, &found.problem), (at + 1, &Problem::BlankLine));
            assert!(found.to_string().contains("blank"), "{found}");
        }
        // A problem on an earlier line is told first.
        let mut both = lines.clone();
        both[1] = both[1].replace("t2", "tX");
        both.insert(3, String::new());
        let found = check(&both, false).unwrap_err();
        assert!(
            matches!(found.problem, Problem::Changed { seq: 2, .. }),
            "{found}"
        );
    }

    #[test]
    fn line_ends_converted_to_crlf_are_named_as_such_at_the_first_line() {
        let lines: Vec<String> = chain_lines(4, 3).iter().map(|l| format!("{l}\r")).collect();
        let found = check(&lines, true).unwrap_err();
        assert_eq!(found.line, 1);
        assert_eq!(found.problem, Problem::LineEnds);
        assert!(found.to_string().contains("dos2unix"), "{found}");
    }

    #[test]
    fn a_line_that_is_not_a_chained_record_is_reported() {
        let mut lines = chain_lines(2, 100);
        lines.push(r#"{"tool":"x"}"#.to_owned());
        let found = check(&lines, false).unwrap_err();
        assert!(
            matches!(found.problem, Problem::Unreadable { .. }),
            "{found}"
        );
    }

    fn public() -> CheckpointPublicKey {
        CheckpointPublicKey::from_base64(&CheckpointKey::from_base64(SEED).unwrap().public_key())
            .unwrap()
    }

    fn is_checkpoint(line: &str) -> bool {
        line.starts_with(r#"{"checkpoint":"#)
    }

    /// `lines` with every record's `prev` recomputed, as anyone can.
    fn rechained(lines: &[String]) -> Vec<String> {
        let mut prev = GENESIS.to_owned();
        lines
            .iter()
            .map(|line| {
                let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
                value["prev"] = prev.clone().into();
                let line = serde_json::to_string(&value).unwrap();
                prev = line_hash(line.as_bytes());
                line
            })
            .collect()
    }

    #[test]
    fn with_a_key_records_no_signed_checkpoint_covers_are_reported_not_called_intact() {
        // Records 1-3, the checkpoint of 3, records 4 and 5.
        let lines = chain_lines(5, 3);
        assert!(is_checkpoint(&lines[3]));
        let verified = check(&lines, true).unwrap();
        assert_eq!(
            verified.unsigned,
            [Unsigned {
                chain: chain_of(&lines[0]),
                first_seq: 4,
                last_seq: 5,
                from: ("a.jsonl".to_owned(), 5),
                to: ("a.jsonl".to_owned(), 6),
                signed_through: Some(3),
            }]
        );
        assert_eq!(verified.unsigned_records(), 2);
        let report = verified.to_string();
        assert!(!report.contains("every signature valid"), "{report}");
        assert!(!report.starts_with("intact"), "{report}");
        assert!(
            report.contains("seq 4 to 5, file a.jsonl lines 5 to 6")
                && report.contains("of seq 3")
                && report.contains("checkpoint_after"),
            "{report}"
        );
        // Signed to the end: intact.
        let verified = check(&chain_lines(6, 3), true).unwrap();
        assert!(verified.unsigned.is_empty(), "{verified}");
        assert!(verified.to_string().contains("every signature valid"));
    }

    #[test]
    fn a_chain_with_every_checkpoint_removed_is_not_signed() {
        let lines: Vec<String> = chain_lines(6, 3)
            .into_iter()
            .filter(|l| !is_checkpoint(l))
            .collect();
        let verified = check(&lines, true).unwrap();
        assert_eq!(verified.checkpoints, 0);
        assert_eq!(
            (
                verified.unsigned.len(),
                verified.unsigned_records(),
                verified.unsigned[0].signed_through
            ),
            (1, 6, None)
        );
        let report = verified.to_string();
        assert!(
            report.contains("6 of 6 record(s) covered by no signed checkpoint")
                && report.contains("the chain has no signed checkpoint")
                && !report.contains("every signature valid"),
            "{report}"
        );
    }

    #[test]
    fn records_rewritten_and_rechained_without_their_checkpoints_are_not_signed() {
        let records: Vec<String> = chain_lines(6, 3)
            .into_iter()
            .filter(|l| !is_checkpoint(l))
            .map(|l| l.replace("\"ann\"", "\"eve\""))
            .collect();
        let forged = rechained(&records);
        assert!(
            check(&forged, false).is_ok(),
            "the hashes alone cannot tell"
        );
        let verified = check(&forged, true).unwrap();
        assert_eq!(verified.unsigned_records(), 6, "{verified}");
        assert!(!verified.to_string().contains("every signature valid"));
    }

    #[test]
    fn a_chain_or_record_added_after_the_last_checkpoint_is_reported_unsigned() {
        let lines = chain_lines(3, 3);
        assert!(is_checkpoint(lines.last().unwrap()));
        // A record of a new chain.
        let mut invented = lines.clone();
        invented.push(
            r#"{"seq":1,"chain":"ffffffffffffffffffffffffffffffff","prev":"genesis","tool":"t"}"#
                .to_owned(),
        );
        let verified = check(&invented, true).unwrap();
        assert_eq!(verified.chains, 2);
        assert_eq!(
            verified.unsigned,
            [Unsigned {
                chain: "f".repeat(32),
                first_seq: 1,
                last_seq: 1,
                from: ("a.jsonl".to_owned(), 5),
                to: ("a.jsonl".to_owned(), 5),
                signed_through: None,
            }]
        );
        // A record linked after the last one signed.
        let mut appended = lines.clone();
        let mut value: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
        value["seq"] = 4.into();
        value["prev"] = line_hash(lines[2].as_bytes()).into();
        appended.push(serde_json::to_string(&value).unwrap());
        let verified = check(&appended, true).unwrap();
        assert_eq!(
            (
                verified.unsigned_records(),
                verified.unsigned[0].signed_through
            ),
            (1, Some(3)),
            "{verified}"
        );
        // A single invented record alone.
        let verified = check(&invented[4..], true).unwrap();
        assert_eq!(verified.unsigned_records(), 1, "{verified}");
    }

    #[test]
    fn unsigned_records_across_files_name_both() {
        let lines = chain_lines(5, 3);
        let first = AuditFile::new("a.1", (lines[..5].join("\n") + "\n").into_bytes());
        let second = AuditFile::new("a.2", (lines[5..].join("\n") + "\n").into_bytes());
        let verified = verify(&[first, second], Some(&public())).unwrap();
        assert!(
            verified
                .to_string()
                .contains("seq 4 to 5, file a.1 line 5 to file a.2 line 1"),
            "{verified}"
        );
    }

    #[test]
    fn an_empty_file_is_not_intact() {
        for contents in [&b""[..], b"\n", b"\n\n"] {
            let verified = verify(
                &[AuditFile::new("a.jsonl", contents.to_vec())],
                Some(&public()),
            )
            .unwrap();
            assert_eq!(verified.records, 0);
            let report = verified.to_string();
            assert!(
                report.starts_with("no records") && !report.contains("intact"),
                "{report}"
            );
        }
    }

    #[test]
    fn a_duplicated_checkpoint_is_reported_not_counted_twice() {
        let mut lines = chain_lines(4, 3);
        lines.insert(4, lines[3].clone());
        let found = check(&lines, true).unwrap_err();
        assert_eq!(
            (found.line, found.problem),
            (
                5,
                Problem::DuplicateCheckpoint {
                    chain: chain_of(&lines[0]),
                    seq: 3,
                    first_file: "a.jsonl".to_owned(),
                    first_line: 4,
                }
            )
        );
    }

    #[test]
    fn without_a_key_the_summary_does_not_claim_the_records_are_the_gateways() {
        let report = check(&chain_lines(3, 3), false).unwrap().to_string();
        assert!(
            !report.contains("intact") && report.contains("signatures were not checked"),
            "{report}"
        );
        assert!(
            report.contains("does not show that the gateway wrote"),
            "{report}"
        );
    }

    /// The problem reported for `line` put after two good records.
    fn unreadable(line: &str, ended: bool) -> String {
        let mut text = chain_lines(2, 100).join("\n") + "\n" + line;
        if ended {
            text.push('\n');
        }
        let found = verify(&[AuditFile::new("a.jsonl", text.into_bytes())], None).unwrap_err();
        assert_eq!(found.line, 3, "{found}");
        assert!(
            matches!(found.problem, Problem::Unreadable { .. }),
            "{found}"
        );
        found.problem.to_string()
    }

    #[test]
    fn a_line_that_is_not_a_record_is_explained_in_json_words_not_rust_types() {
        let chain = r#""chain":"c","prev":"genesis""#;
        let cases = [
            (
                format!(r#"{{"seq":1e23,{chain}}}"#),
                "`seq` is the number 1e+23",
            ),
            (
                format!(r#"{{"seq":"1",{chain}}}"#),
                "`seq` is the string \"1\"",
            ),
            (format!(r#"{{"seq":-1,{chain}}}"#), "`seq` is the number -1"),
            (
                r#"{"seq":3,"chain":2,"prev":"x"}"#.to_owned(),
                "`chain` is the number 2",
            ),
            ("[1,2,3]".to_owned(), "a JSON array"),
            (r#"{"hello":1}"#.to_owned(), "has no `seq`"),
            ("garbage".to_owned(), "not JSON"),
            (
                r#"{"checkpoint":{"chain":"c","seq":1,"hash":"h","at_ms":1}}"#.to_owned(),
                "the checkpoint has no `signature`",
            ),
        ];
        for (line, expected) in cases {
            let reason = unreadable(&line, true);
            assert!(reason.contains(expected), "{line}: {reason}");
            for rust in [
                "u64",
                "struct",
                "Link",
                "Checkpoint",
                "floating point",
                "line 1 column",
            ] {
                assert!(!reason.contains(rust), "{line}: {reason}");
            }
        }
    }

    #[test]
    fn a_last_line_cut_short_says_the_file_was_truncated() {
        let line = r#"{"seq":3,"chain":"c","prev":"abc"#;
        let reason = unreadable(line, false);
        assert!(
            reason.contains("cut short") && reason.contains("truncated") && !reason.contains("EOF"),
            "{reason}"
        );
        // Cut short within the file: cut short, but not called the file's end.
        let reason = unreadable(line, true);
        assert!(
            reason.contains("cut short") && !reason.contains("EOF"),
            "{reason}"
        );
    }

    #[test]
    fn a_line_that_never_ends_fails_fast_without_being_read_whole() {
        // `/dev/zero`: no newline, ever.
        let mut verifier = Verifier::new(None);
        verifier
            .read("zero", std::io::BufReader::new(std::io::repeat(0)))
            .unwrap();
        let found = verifier.finish().unwrap_err();
        assert_eq!(
            (found.line, &found.problem),
            (
                1,
                &Problem::TooLong {
                    limit: MAX_LINE_BYTES
                }
            )
        );
        assert!(found.to_string().contains("longer than 64 MiB"), "{found}");
    }

    #[test]
    fn a_line_at_the_limit_is_read_and_one_beyond_is_refused() {
        let record = r#"{"seq":1,"chain":"c","prev":"genesis","pad":""}"#;
        let pad =
            |n: usize| record.replace(r#""pad":"""#, &format!(r#""pad":"{}""#, "x".repeat(n)));
        let at_limit = pad(MAX_LINE_BYTES - record.len());
        assert_eq!(at_limit.len(), MAX_LINE_BYTES);
        let verified =
            verify(&[AuditFile::new("a", (at_limit + "\n").into_bytes())], None).unwrap();
        assert_eq!(verified.records, 1);
        let beyond = pad(MAX_LINE_BYTES - record.len() + 1);
        let found = verify(&[AuditFile::new("a", (beyond + "\n").into_bytes())], None).unwrap_err();
        assert!(matches!(found.problem, Problem::TooLong { .. }), "{found}");
    }

    fn chain_of(line: &str) -> String {
        serde_json::from_str::<serde_json::Value>(line).unwrap()["chain"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A chain of records 1-2, a gap marker of 3 records lost, records 4-5 (no key).
    fn chain_with_a_gap(marker: &[u8]) -> Vec<String> {
        let mut writer = ChainWriter::new(ChainOptions::default());
        let mut out = Vec::new();
        for fields in [
            &br#"{"tool":"t1"}"#[..],
            br#"{"tool":"t2"}"#,
            marker,
            br#"{"tool":"t4"}"#,
            br#"{"tool":"t5"}"#,
        ] {
            writer.append(fields, &mut out);
        }
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn gap_of(records: u64) -> crate::audit::Gap {
        let mut gap = crate::audit::Gap::begin(300, &std::io::Error::from_raw_os_error(28));
        for _ in 1..records {
            gap.add(300);
        }
        gap
    }

    #[test]
    fn a_declared_gap_verifies_and_is_listed_not_called_intact() {
        let lines = chain_with_a_gap(&gap_of(3).marker());
        let verified = check(&lines, false).unwrap();
        assert_eq!(verified.gaps.len(), 1);
        assert_eq!((verified.gaps[0].seq, verified.gaps[0].gap.records), (3, 3));
        let report = verified.to_string();
        assert!(
            report.starts_with("gaps the gateway declared: 3 record(s) lost in 1 gap(s)")
                && report.contains("900 bytes) lost to a full disk between"),
            "{report}"
        );
        // A record deleted elsewhere is still missing.
        let mut deleted = lines.clone();
        deleted.remove(3);
        let found = check(&deleted, false).unwrap_err();
        assert!(
            matches!(found.problem, Problem::Missing { expected: 4, .. }),
            "{found}"
        );
    }

    #[test]
    fn a_marker_the_gateway_would_not_write_is_a_forged_gap() {
        let marker = String::from_utf8(gap_of(3).marker()).unwrap();
        let cases = [
            (
                marker.replace(r#""records":3"#, r#""records":0"#),
                "no record lost",
            ),
            (
                marker.replace(r#""bytes":900"#, r#""bytes":1"#),
                "fewer than the smallest",
            ),
            (
                marker.replace(r#""disk_full""#, r#""cosmic_ray""#),
                "unknown value `cosmic_ray`",
            ),
            (
                marker.replace(r#"{"gap":"#, r#"{"tool":"x","gap":"#),
                "unknown field `tool`",
            ),
            (
                marker.replace(r#","error":"#, r#","error_":"#),
                "unknown field `error_`",
            ),
        ];
        for (forged, why) in cases {
            let found = check(&chain_with_a_gap(forged.as_bytes()), false).unwrap_err();
            assert_eq!(found.line, 3, "{forged}: {found}");
            assert!(
                matches!(&found.problem, Problem::ForgedGap { seq: 3, reason, .. } if reason.contains(why)),
                "{forged}: {found}"
            );
        }
        // As the first record of a chain.
        let mut writer = ChainWriter::new(ChainOptions::default());
        let mut first = Vec::new();
        writer.append(marker.as_bytes(), &mut first);
        let first = String::from_utf8(first).unwrap().trim_end().to_owned();
        let found = check(&[first], false).unwrap_err();
        assert!(
            matches!(&found.problem, Problem::ForgedGap { seq: 1, reason, .. } if reason.contains("first record")),
            "{found}"
        );
    }
}

#[cfg(test)]
mod excerpt_tests {
    use super::*;
    use crate::audit::chain::{ChainOptions, ChainWriter, CheckpointKey};

    const SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn public() -> CheckpointPublicKey {
        CheckpointPublicKey::from_base64(&CheckpointKey::from_base64(SEED).unwrap().public_key())
            .unwrap()
    }

    /// Records 1-3, the checkpoint of 3, records 4-6, the checkpoint of 6, records 7-9,
    /// the checkpoint of 9: as the writer writes them.
    fn chain() -> Vec<String> {
        let key = CheckpointKey::from_base64(SEED).unwrap();
        let mut writer =
            ChainWriter::new(ChainOptions::default().signing_key(key).checkpoint_every(3));
        let mut out = Vec::new();
        for i in 1..=9 {
            writer.append(format!(r#"{{"tool":"t{i}"}}"#).as_bytes(), &mut out);
        }
        let lines: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(lines.len(), 12);
        assert!(lines[3].starts_with(r#"{"checkpoint":{"#) && lines[3].contains(r#""seq":3"#));
        lines
    }

    fn files(parts: &[&[String]]) -> Vec<AuditFile> {
        parts
            .iter()
            .enumerate()
            .map(|(i, lines)| {
                AuditFile::new(
                    format!("part{}", i + 1),
                    (lines.join("\n") + "\n").into_bytes(),
                )
            })
            .collect()
    }

    fn check(lines: &[String], key: bool) -> Result<Verified, Tampering> {
        verify(&files(&[lines]), key.then(public).as_ref())
    }

    fn seq(line: &str) -> u64 {
        serde_json::from_str::<Value>(line).unwrap()["seq"]
            .as_u64()
            .unwrap()
    }

    #[test]
    fn an_excerpt_starting_mid_chain_verifies_and_names_the_link_taken_on_trust() {
        let lines = chain();
        // From record 4 on: the checkpoint of 3 left out.
        for key in [true, false] {
            let verified = check(&lines[4..], key).unwrap();
            assert_eq!((verified.records, verified.checkpoints), (6, 2));
            assert!(verified.unsigned.is_empty(), "{verified}");
            let hash = line_hash(lines[2].as_bytes());
            assert_eq!(
                verified.excerpts,
                [Excerpt {
                    chain: serde_json::from_str::<Value>(&lines[0]).unwrap()["chain"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    first_seq: 4,
                    prev: hash.clone(),
                    at: ("part1".to_owned(), 1),
                    anchor: None,
                    signatures_checked: key,
                }]
            );
            let report = verified.to_string();
            assert!(
                report.starts_with("excerpt: 1 chain(s) start past seq 1")
                    && report.contains(&format!(
                        "starts at seq 4, file part1 line 1: the record before it, seq 3 with \
                         hash {hash}, is not in these files, so the link to it is taken on trust"
                    ))
                    && report.contains("verify again with the file that holds the record before"),
                "{report}"
            );
        }
    }

    #[test]
    fn an_excerpt_that_keeps_the_checkpoint_before_it_has_its_first_link_checked() {
        let lines = chain();
        let verified = check(&lines[3..], true).unwrap();
        assert_eq!((verified.records, verified.checkpoints), (6, 3));
        assert_eq!(verified.excerpts[0].anchor, Some(("part1".to_owned(), 1)));
        let report = verified.to_string();
        assert!(
            report.contains(
                "checked against the checkpoint of seq 3 at file part1 line 1, whose signature is valid"
            ) && !report.contains("taken on trust"),
            "{report}"
        );
        // The first record's link changed: it no longer matches the checkpoint.
        let mut edited = lines[3..].to_vec();
        edited[1] = edited[1].replacen(r#""prev":""#, r#""prev":"0"#, 1);
        let found = check(&edited, false).unwrap_err();
        assert_eq!(found.line, 2, "{found}");
        assert!(
            matches!(
                found.problem,
                Problem::Unanchored {
                    seq: 4,
                    signed: 3,
                    line: 1,
                    ..
                }
            ),
            "{found}"
        );
        // A forged anchor fails under the key.
        let mut forged = lines[3..].to_vec();
        forged[0] = forged[0].replacen(r#""signature":""#, r#""signature":"AA"#, 1);
        let found = check(&forged, true).unwrap_err();
        assert!(
            matches!(found.problem, Problem::BadSignature { seq: 3, .. }),
            "{found}"
        );
        // A checkpoint of an earlier record, then a record past the next one: missing.
        let mut cut = lines[3..].to_vec();
        cut.remove(1);
        let found = check(&cut, false).unwrap_err();
        assert!(
            matches!(
                found.problem,
                Problem::Missing {
                    expected: 4,
                    found: 5,
                    ..
                }
            ),
            "{found}"
        );
    }

    #[test]
    fn disorder_and_tampering_within_an_excerpt_are_reported_with_their_seqs() {
        let lines = chain();
        let excerpt = lines[4..].to_vec();
        assert_eq!(seq(&excerpt[0]), 4);
        // Records 5 and 6 swapped.
        let mut swapped = excerpt.clone();
        swapped.swap(1, 2);
        let found = check(&swapped, true).unwrap_err();
        assert_eq!(found.line, 2);
        assert!(
            matches!(
                found.problem,
                Problem::OutOfOrder {
                    seq: 6,
                    expected: 5,
                    ..
                }
            ),
            "{found}"
        );
        // Record 5 removed.
        let mut removed = excerpt.clone();
        removed.remove(1);
        let found = check(&removed, true).unwrap_err();
        assert!(
            matches!(
                found.problem,
                Problem::Missing {
                    expected: 5,
                    found: 6,
                    ..
                }
            ),
            "{found}"
        );
        // Record 5 there twice.
        let mut copied = excerpt.clone();
        copied.insert(2, excerpt[1].clone());
        let found = check(&copied, true).unwrap_err();
        assert!(
            matches!(
                found.problem,
                Problem::DuplicateRecord {
                    seq: 5,
                    first_line: 2,
                    ..
                }
            ),
            "{found}"
        );
        // The first two swapped: record 5 before 4, as in a whole chain.
        let mut first_two = excerpt.clone();
        first_two.swap(0, 1);
        let found = check(&first_two, true).unwrap_err();
        assert_eq!(found.line, 1);
        assert!(
            matches!(
                found.problem,
                Problem::OutOfOrder {
                    seq: 5,
                    expected: 4,
                    ..
                }
            ),
            "{found}"
        );
        // Record 4 moved further down: after the records it should precede.
        let mut moved = excerpt.clone();
        let four = moved.remove(0);
        moved.insert(2, four);
        let found = check(&moved, true).unwrap_err();
        assert_eq!(found.line, 3);
        assert!(
            matches!(
                found.problem,
                Problem::BeforeStart {
                    seq: 4,
                    start: 5,
                    first_line: 1,
                    ..
                }
            ),
            "{found}"
        );
        // The first record edited: the next one's link tells.
        let mut edited = excerpt.clone();
        edited[0] = edited[0].replace(r#""tool":"t4""#, r#""tool":"t0""#);
        let found = check(&edited, false).unwrap_err();
        assert_eq!(
            (found.line, &found.problem),
            (
                1,
                &Problem::Changed {
                    chain: serde_json::from_str::<Value>(&lines[0]).unwrap()["chain"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    seq: 4
                }
            )
        );
        // A record past seq 1 that claims to be the chain's first.
        let mut genesis = excerpt.clone();
        genesis[0] = genesis[0].replacen(&line_hash(lines[2].as_bytes()), GENESIS, 1);
        let found = check(&genesis, false).unwrap_err();
        assert!(
            matches!(found.problem, Problem::Changed { seq: 4, .. }),
            "{found}"
        );
    }

    #[test]
    fn a_chain_starting_past_seq_1_further_down_a_file_is_missing_its_first_records() {
        let lines = chain();
        let other = chain();
        // Another chain's records 1-3 and checkpoint, then this one's from record 4: its
        // records 1-3 are missing, not an excerpt (an excerpt begins a file).
        let spliced = [&other[..4], &lines[4..]].concat();
        let found = check(&spliced, true).unwrap_err();
        assert_eq!(found.line, 5);
        assert!(
            matches!(
                found.problem,
                Problem::Missing {
                    expected: 1,
                    found: 4,
                    ..
                }
            ),
            "{found}"
        );
        // The same lines as two files: each begins its file, so an excerpt.
        let verified = verify(&files(&[&other[..4], &lines[4..]]), Some(&public())).unwrap();
        assert_eq!((verified.chains, verified.excerpts.len()), (2, 1));
    }

    #[test]
    fn concatenated_segments_verify_as_one_chain_and_newest_first_is_named() {
        let lines = chain();
        // Segments 4-6 and 7-9 in one file, and as two files.
        let verified = check(&lines[4..], true).unwrap();
        let split = verify(&files(&[&lines[4..8], &lines[8..]]), Some(&public())).unwrap();
        assert_eq!(verified.records, split.records);
        assert_eq!(split.excerpts.len(), 1);
        // From the start: no excerpt.
        let whole = verify(&files(&[&lines[..4], &lines[4..]]), Some(&public())).unwrap();
        assert!(whole.excerpts.is_empty(), "{whole}");
        assert!(
            whole
                .to_string()
                .starts_with("intact: 1 chain(s), 9 record(s)")
        );
        // Newest first, in one file or two.
        let reversed = [&lines[8..], &lines[4..8]].concat();
        for found in [
            check(&reversed, true).unwrap_err(),
            verify(&files(&[&lines[8..], &lines[4..8]]), Some(&public())).unwrap_err(),
        ] {
            assert!(
                matches!(
                    found.problem,
                    Problem::BeforeStart {
                        seq: 4,
                        start: 7,
                        ..
                    }
                ),
                "{found}"
            );
            assert!(
                found.to_string().contains("give them oldest first"),
                "{found}"
            );
        }
    }
}
