//! The hash chain of a JSON-lines audit file and its signed checkpoints.
//!
//! Every line [`JsonLinesSink`](super::JsonLinesSink) writes begins with `seq` (1, 2, 3…
//! within the chain), `chain` (a random id made when the sink opens: one chain per
//! process and file, a restart or a reload starts a new one) and `prev` (the hex SHA-256
//! of the exact bytes of the chain's previous line without its newline, or `genesis` for
//! the first). With a [`CheckpointKey`], a line `{"checkpoint":{…}}` follows every
//! `checkpoint_every` records, the first record written `checkpoint_after` after the last
//! checkpoint, and the sink's close; it signs the chain, the seq and hash of the record
//! before it and the time with Ed25519. [`verify`](super::verify) checks all of it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest, Sha256};

/// The `prev` of a chain's first record.
pub(crate) const GENESIS: &str = "genesis";

/// A key for audit checkpoints was not 32 bytes in base64.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {what} must be 32 bytes in base64 ({reason}): make a signing key with `openssl rand -base64 32`, and print its public key with `toolgate audit public-key`"
)]
pub struct KeyError {
    what: &'static str,
    reason: String,
}

fn decode_32(text: &str, what: &'static str) -> Result<[u8; 32], KeyError> {
    let bytes = BASE64.decode(text.trim()).map_err(|e| KeyError {
        what,
        reason: e.to_string(),
    })?;
    bytes.try_into().map_err(|b: Vec<u8>| KeyError {
        what,
        reason: format!("it is {} bytes", b.len()),
    })
}

/// The Ed25519 key that signs audit checkpoints, made from a 32-byte seed.
pub struct CheckpointKey {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for CheckpointKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointKey")
            .field("public_key", &self.public_key())
            .finish()
    }
}

impl CheckpointKey {
    /// The key whose seed is `seed`, 32 bytes in base64 (`openssl rand -base64 32`).
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `seed` is not 32 bytes in base64.
    pub fn from_base64(seed: &str) -> Result<Self, KeyError> {
        let seed = decode_32(seed, "signing key")?;
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|e| KeyError {
            what: "signing key",
            reason: e.to_string(),
        })?;
        Ok(CheckpointKey { pair })
    }

    /// The public key, 32 bytes in base64: what `toolgate audit verify --key` takes.
    pub fn public_key(&self) -> String {
        BASE64.encode(self.pair.public_key().as_ref())
    }

    fn sign(&self, message: &[u8]) -> String {
        BASE64.encode(self.pair.sign(message).as_ref())
    }
}

/// The public key that checks audit checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointPublicKey([u8; 32]);

impl CheckpointPublicKey {
    /// The key `key`, 32 bytes in base64 (as [`CheckpointKey::public_key`] prints it).
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `key` is not 32 bytes in base64.
    pub fn from_base64(key: &str) -> Result<Self, KeyError> {
        decode_32(key, "public key").map(CheckpointPublicKey)
    }

    /// Whether `signature` (base64) signs `message`.
    pub(crate) fn verifies(&self, message: &[u8], signature: &str) -> bool {
        BASE64.decode(signature).is_ok_and(|signature| {
            UnparsedPublicKey::new(&ED25519, self.0)
                .verify(message, &signature)
                .is_ok()
        })
    }
}

/// The bytes a checkpoint's signature covers.
pub(crate) fn checkpoint_message(chain: &str, seq: u64, hash: &str, at_ms: u64) -> Vec<u8> {
    format!("toolgate-audit-checkpoint/1\n{chain}\n{seq}\n{hash}\n{at_ms}").into_bytes()
}

/// The hex SHA-256 of a line's bytes (without its newline): what the next record's `prev`
/// names, so a copy of the file shipped elsewhere can be checked against the chain.
///
/// ```
/// use toolgate_hooks::audit::line_hash;
///
/// let hash = line_hash(b"{\"seq\":1}");
/// assert_eq!(hash.len(), 64);
/// assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
/// ```
pub fn line_hash(line: &[u8]) -> String {
    let digest = Sha256::digest(line);
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// How a [`JsonLinesSink`](super::JsonLinesSink) signs its chain.
#[derive(Clone, Debug)]
pub struct ChainOptions {
    key: Option<Arc<CheckpointKey>>,
    every: u64,
    after: Duration,
}

impl Default for ChainOptions {
    /// No checkpoints until a key is given; then every 1000 records or 60 s.
    fn default() -> Self {
        ChainOptions {
            key: None,
            every: 1000,
            after: Duration::from_secs(60),
        }
    }
}

impl ChainOptions {
    /// Sign checkpoints with `key` (without one, the chain is written unsigned).
    pub fn signing_key(mut self, key: CheckpointKey) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// A checkpoint after every `records` records (at least 1; default 1000).
    pub fn checkpoint_every(mut self, records: u64) -> Self {
        self.every = records.max(1);
        self
    }

    /// A checkpoint after the first record written `after` the last checkpoint (default
    /// 60 s). An idle sink writes none: its last records are signed by the next
    /// checkpoint, or the one written when the sink closes.
    pub fn checkpoint_after(mut self, after: Duration) -> Self {
        self.after = after;
        self
    }
}

/// The state of one chain: what the next line must carry.
#[derive(Debug)]
pub(crate) struct ChainWriter {
    id: String,
    seq: u64,
    prev: String,
    options: ChainOptions,
    unsigned: u64,
    last_checkpoint: Instant,
}

impl ChainWriter {
    pub(crate) fn new(options: ChainOptions) -> Self {
        let mut id = [0u8; 16];
        if getrandom::fill(&mut id).is_err() {
            // Without the system's randomness, the time and process still tell chains apart.
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            id = (nanos ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
        }
        ChainWriter {
            id: line_hash(&id)[..32].to_owned(),
            seq: 0,
            prev: GENESIS.to_owned(),
            options,
            unsigned: 0,
            last_checkpoint: Instant::now(),
        }
    }

    /// Appends to `out` the line of a record serialized as `record` (a JSON object),
    /// linked into the chain, and a checkpoint when one is due.
    pub(crate) fn append(&mut self, record: &[u8], out: &mut Vec<u8>) {
        self.seq += 1;
        let start = out.len();
        out.extend_from_slice(
            format!(
                r#"{{"seq":{},"chain":"{}","prev":"{}""#,
                self.seq, self.id, self.prev
            )
            .as_bytes(),
        );
        let fields = &record[1..];
        if fields.first() != Some(&b'}') {
            out.push(b',');
        }
        out.extend_from_slice(fields);
        self.prev = line_hash(&out[start..]);
        out.push(b'\n');
        self.unsigned += 1;
        if self.unsigned >= self.options.every
            || self.last_checkpoint.elapsed() >= self.options.after
        {
            self.checkpoint(out);
        }
    }

    /// Appends a signed checkpoint of the last record, if there is a key and a record
    /// not yet signed.
    pub(crate) fn checkpoint(&mut self, out: &mut Vec<u8>) {
        let Some(key) = &self.options.key else { return };
        if self.unsigned == 0 {
            return;
        }
        let at_ms = crate::clock::now_ms();
        let signature = key.sign(&checkpoint_message(&self.id, self.seq, &self.prev, at_ms));
        out.extend_from_slice(
            format!(
                r#"{{"checkpoint":{{"chain":"{}","seq":{},"hash":"{}","at_ms":{},"signature":"{}"}}}}"#,
                self.id, self.seq, self.prev, at_ms, signature
            )
            .as_bytes(),
        );
        out.push(b'\n');
        tracing::info!(
            target: "toolgate::audit",
            chain = %self.id,
            seq = self.seq,
            hash = %self.prev,
            "audit checkpoint signed"
        );
        self.unsigned = 0;
        self.last_checkpoint = Instant::now();
    }
}
