//! Checking a chained audit file: what `toolgate audit verify` runs.
//!
//! [`verify`] reads the files in the order given (give a rotated series oldest first),
//! follows each chain by its `seq` and `prev`, and checks each checkpoint against the
//! record it names and, with a public key, its signature. It reports the first problem
//! by file and line: a changed record, a missing one, one out of order, records cut
//! before a checkpoint that signed them, a bad signature, or a line that is not a record.
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
//! ```

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;

use super::chain::{CheckpointPublicKey, GENESIS, checkpoint_message, line_hash};

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

/// What an intact set of files holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Chains.
    pub chains: usize,
    /// Records.
    pub records: u64,
    /// Checkpoints (their signatures checked when `signatures_checked`).
    pub checkpoints: u64,
    /// Whether a public key checked the checkpoints' signatures.
    pub signatures_checked: bool,
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "intact: {} chain(s), {} record(s), {} checkpoint(s)",
            self.chains, self.records, self.checkpoints
        )?;
        if self.signatures_checked {
            f.write_str(", every signature valid")
        } else {
            f.write_str("; signatures were not checked (give --key to check them)")
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
    /// The line is neither a chained record nor a checkpoint.
    #[error("not a chained audit record ({reason})")]
    Unreadable {
        /// Why.
        reason: String,
    },
}

#[derive(Deserialize)]
struct Link {
    seq: u64,
    chain: String,
    prev: String,
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
    Record { link: Link, hash: String },
    Checkpoint(Checkpoint),
}

struct Located {
    file: usize,
    line: usize,
    entry: Entry,
}

/// Checks the chains in `files` (in the order given); with `key`, the checkpoints'
/// signatures too.
///
/// # Errors
///
/// The first [`Tampering`] found, by file and line.
pub fn verify(
    files: &[AuditFile],
    key: Option<&CheckpointPublicKey>,
) -> Result<Verified, Tampering> {
    let mut chains: Vec<(String, Vec<Located>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (file_index, file) in files.iter().enumerate() {
        for (line_index, line) in file.contents.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let entry = parse(line).map_err(|reason| Tampering {
                file: file.name.clone(),
                line: line_index + 1,
                problem: Problem::Unreadable { reason },
            })?;
            let chain = match &entry {
                Entry::Record { link, .. } => &link.chain,
                Entry::Checkpoint(checkpoint) => &checkpoint.chain,
            };
            let slot = *index.entry(chain.clone()).or_insert_with(|| {
                chains.push((chain.clone(), Vec::new()));
                chains.len() - 1
            });
            chains[slot].1.push(Located {
                file: file_index,
                line: line_index + 1,
                entry,
            });
        }
    }
    let mut verified = Verified {
        chains: chains.len(),
        records: 0,
        checkpoints: 0,
        signatures_checked: key.is_some(),
    };
    let mut first: Option<(usize, usize, Problem)> = None;
    for (chain, entries) in &chains {
        match check_chain(chain, entries, key, &mut verified) {
            Ok(()) => {}
            Err(found)
                if first
                    .as_ref()
                    .is_none_or(|f| (found.0, found.1) < (f.0, f.1)) =>
            {
                first = Some(found);
            }
            Err(_) => {}
        }
    }
    match first {
        None => Ok(verified),
        Some((file, line, problem)) => Err(Tampering {
            file: files[file].name.clone(),
            line,
            problem,
        }),
    }
}

fn parse(line: &[u8]) -> Result<Entry, String> {
    if line.starts_with(br#"{"checkpoint":"#) {
        return serde_json::from_slice::<CheckpointLine>(line)
            .map(|c| Entry::Checkpoint(c.checkpoint))
            .map_err(|e| e.to_string());
    }
    let link: Link = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    Ok(Entry::Record {
        link,
        hash: line_hash(line),
    })
}

/// The first problem of one chain: (file, line, problem).
fn check_chain(
    chain: &str,
    entries: &[Located],
    key: Option<&CheckpointPublicKey>,
    verified: &mut Verified,
) -> Result<(), (usize, usize, Problem)> {
    let chain = chain.to_owned();
    let mut last_seq = 0;
    let mut last_hash = GENESIS;
    let mut last_at: Option<&Located> = None;
    for (i, located) in entries.iter().enumerate() {
        let at = |problem| (located.file, located.line, problem);
        match &located.entry {
            Entry::Record { link, hash } => {
                let expected = last_seq + 1;
                if link.seq > expected {
                    let later = entries[i + 1..].iter().any(
                        |e| matches!(&e.entry, Entry::Record { link, .. } if link.seq == expected),
                    );
                    return Err(at(if later {
                        Problem::OutOfOrder {
                            chain,
                            seq: link.seq,
                            expected,
                        }
                    } else {
                        Problem::Missing {
                            chain,
                            expected,
                            found: link.seq,
                        }
                    }));
                }
                if link.seq < expected {
                    return Err(at(Problem::OutOfOrder {
                        chain,
                        seq: link.seq,
                        expected,
                    }));
                }
                if link.prev != last_hash {
                    // Either the previous record changed, or this one's link did (then the
                    // next record's link does not match this one either).
                    let next_breaks = entries[i + 1..].iter().find_map(|e| match &e.entry {
                        Entry::Record { link: next, .. } => Some(next.prev != *hash),
                        Entry::Checkpoint(_) => None,
                    });
                    return Err(match last_at {
                        Some(previous) if next_breaks != Some(true) => (
                            previous.file,
                            previous.line,
                            Problem::Changed {
                                chain,
                                seq: last_seq,
                            },
                        ),
                        _ => at(Problem::Changed {
                            chain,
                            seq: link.seq,
                        }),
                    });
                }
                last_seq = link.seq;
                last_hash = hash;
                last_at = Some(located);
                verified.records += 1;
            }
            Entry::Checkpoint(checkpoint) => {
                if let Some(key) = key {
                    let message = checkpoint_message(
                        &checkpoint.chain,
                        checkpoint.seq,
                        &checkpoint.hash,
                        checkpoint.at_ms,
                    );
                    if !key.verifies(&message, &checkpoint.signature) {
                        return Err(at(Problem::BadSignature {
                            chain,
                            seq: checkpoint.seq,
                        }));
                    }
                }
                if checkpoint.seq > last_seq {
                    return Err(at(Problem::Truncated {
                        chain,
                        last: last_seq,
                        signed: checkpoint.seq,
                    }));
                }
                if checkpoint.seq < last_seq {
                    return Err(at(Problem::CheckpointMoved {
                        chain,
                        seq: checkpoint.seq,
                        after: last_seq,
                    }));
                }
                if checkpoint.hash != last_hash {
                    let previous = last_at.unwrap_or(located);
                    return Err((
                        previous.file,
                        previous.line,
                        Problem::Changed {
                            chain,
                            seq: last_seq,
                        },
                    ));
                }
                verified.checkpoints += 1;
            }
        }
    }
    Ok(())
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
    fn a_line_that_is_not_a_chained_record_is_reported() {
        let mut lines = chain_lines(2, 100);
        lines.push(r#"{"tool":"x"}"#.to_owned());
        let found = check(&lines, false).unwrap_err();
        assert!(
            matches!(found.problem, Problem::Unreadable { .. }),
            "{found}"
        );
    }

    fn chain_of(line: &str) -> String {
        serde_json::from_str::<serde_json::Value>(line).unwrap()["chain"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}
