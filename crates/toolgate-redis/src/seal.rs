//! [`Seal`]: AES-256-GCM over the values the suspension and session stores and the
//! histories write, when a key is set.

use std::borrow::Cow;
use std::fmt::Write as _;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::digest::{SHA256, digest};

use crate::RedisError;

/// The first byte of a sealed value: the format's version. A value written without a key
/// is JSON and starts with `{`, so the two never look alike.
const SEALED_V1: u8 = 0x01;

/// The key length: AES-256.
const KEY_LEN: usize = 32;

/// AES-256-GCM with a random 96-bit nonce per value. Each value is bound to where it is
/// kept (its kind and id, as associated data): a sealed value copied under another id does
/// not open.
pub(crate) struct Seal {
    key: LessSafeKey,
    fingerprint: String,
}

impl Seal {
    /// The seal of `material`: 32 bytes, or 64 hexadecimal digits (what
    /// `openssl rand -hex 32` prints; surrounding whitespace, such as the newline of a
    /// file, is ignored).
    pub(crate) fn new(material: &[u8]) -> Result<Self, RedisError> {
        let bytes = key_bytes(material).map_err(|reason| RedisError::InvalidEncryptionKey {
            reason: reason.to_owned(),
        })?;
        let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| {
            RedisError::InvalidEncryptionKey {
                reason: "AES-256-GCM refused it".to_owned(),
            }
        })?;
        let mut labelled = b"toolgate suspensions key\0".to_vec();
        labelled.extend_from_slice(&bytes);
        let mut fingerprint = "aes256gcm:".to_owned();
        for byte in &digest(&SHA256, &labelled).as_ref()[..8] {
            let _ = write!(fingerprint, "{byte:02x}");
        }
        Ok(Seal {
            key: LessSafeKey::new(key),
            fingerprint,
        })
    }

    /// Which key this is, without giving it away: 64 bits of a SHA-256 of the key, stored
    /// in clear with each value so that a replica with another key leaves it in place.
    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// `plain` sealed for the place `aad`: version, nonce, ciphertext and tag.
    pub(crate) fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, String> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce)
            .map_err(|_| "the system's random number generator failed".to_owned())?;
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + plain.len() + 16);
        sealed.push(SEALED_V1);
        sealed.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut body,
            )
            .map_err(|_| "encryption failed".to_owned())?;
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// The plain bytes of `sealed`, if it was sealed with this key for the place `aad`.
    pub(crate) fn open(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        let rest = sealed.strip_prefix(&[SEALED_V1])?;
        if rest.len() < NONCE_LEN {
            return None;
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad), &mut body)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// Whether `value` is a sealed one (rather than JSON written without a key).
pub(crate) fn is_sealed(value: &[u8]) -> bool {
    value.first() == Some(&SEALED_V1)
}

/// `json` as a store writes it for the place `aad`: sealed when the store has a key, as it
/// is otherwise.
pub(crate) fn write(seal: Option<&Seal>, aad: &[u8], json: Vec<u8>) -> Result<Vec<u8>, String> {
    match seal {
        None => Ok(json),
        Some(seal) => seal.seal(aad, &json),
    }
}

/// Why a stored value cannot be read back by a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// It is sealed, and the store has no key.
    NoKey,
    /// It is plain, and the store requires sealing (a replica without the key wrote it).
    Unsealed,
    /// It does not open with the store's key (another key, another place, or altered).
    WrongKey,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unreadable::NoKey => {
                "is encrypted, and this replica has no key to read it: give every replica the same encryption key"
            }
            Unreadable::Unsealed => {
                "is stored unencrypted while this replica requires encryption (a replica without the key kept it): give every replica the same encryption key; the value is left in place until it expires"
            }
            Unreadable::WrongKey => {
                "cannot be decrypted with this replica's key (it was encrypted with another key, or altered): give every replica the same encryption key"
            }
        })
    }
}

/// The text a store wrote at the place `aad`, opened with its key when it has one; why it
/// cannot be read, in words that follow "the value on Redis", otherwise.
pub(crate) fn read_text(seal: Option<&Seal>, aad: &[u8], stored: &[u8]) -> Result<String, String> {
    let plain = read(seal, aad, stored).map_err(|why| why.to_string())?;
    String::from_utf8(plain.into_owned()).map_err(|_| "is not text: it was altered".to_owned())
}

/// The JSON a store wrote at the place `aad`, opened with its key when it has one.
pub(crate) fn read<'a>(
    seal: Option<&Seal>,
    aad: &[u8],
    stored: &'a [u8],
) -> Result<Cow<'a, [u8]>, Unreadable> {
    match (seal, is_sealed(stored)) {
        (None, false) => Ok(Cow::Borrowed(stored)),
        (None, true) => Err(Unreadable::NoKey),
        (Some(_), false) => Err(Unreadable::Unsealed),
        (Some(seal), true) => seal
            .open(aad, stored)
            .map(Cow::Owned)
            .ok_or(Unreadable::WrongKey),
    }
}

fn key_bytes(material: &[u8]) -> Result<[u8; KEY_LEN], &'static str> {
    if let Ok(raw) = <[u8; KEY_LEN]>::try_from(material) {
        return Ok(raw);
    }
    let hex = material.trim_ascii();
    if hex.len() != 2 * KEY_LEN {
        return Err("it is neither 32 bytes nor 64 hexadecimal digits");
    }
    let mut bytes = [0u8; KEY_LEN];
    for (byte, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
        let digit = |d: u8| char::from(d).to_digit(16);
        let (Some(high), Some(low)) = (digit(pair[0]), digit(pair[1])) else {
            return Err("64 characters, but not all of them hexadecimal digits");
        };
        *byte = u8::try_from(high * 16 + low).unwrap_or_default();
    }
    Ok(bytes)
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal(AES-256-GCM, key hidden)")
    }
}

#[cfg(test)]
mod tests {
    use super::{Seal, is_sealed};
    use crate::RedisError;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn a_key_is_32_bytes_or_64_hex_digits_and_the_two_forms_are_the_same_key() {
        let raw: Vec<u8> = (0u8..32).collect();
        let from_raw = Seal::new(&raw).unwrap();
        let from_hex = Seal::new(format!("{HEX}\n").as_bytes()).unwrap();

        let sealed = from_hex.seal(b"call\0a", b"{\"x\":1}").unwrap();

        assert!(is_sealed(&sealed));
        assert_eq!(from_raw.open(b"call\0a", &sealed).unwrap(), b"{\"x\":1}");
    }

    #[test]
    fn a_short_or_non_hex_key_is_refused_with_how_to_make_one() {
        for bad in [
            &b"too short"[..],
            &[7u8; 31],
            HEX.replace('0', "g").as_bytes(),
        ] {
            let error = Seal::new(bad).unwrap_err();
            assert!(matches!(error, RedisError::InvalidEncryptionKey { .. }));
            assert!(
                error.to_string().contains("openssl rand -hex 32"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_in_its_place() {
        let seal = Seal::new(&[1u8; 32]).unwrap();
        let other = Seal::new(&[2u8; 32]).unwrap();
        let sealed = seal.seal(b"call\0a", b"secret input").unwrap();
        let again = seal.seal(b"call\0a", b"secret input").unwrap();

        assert_ne!(sealed, again, "a random nonce per value");
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(other.open(b"call\0a", &sealed), None);
        assert_eq!(seal.open(b"call\0b", &sealed), None, "moved to another id");
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert_eq!(seal.open(b"call\0a", &altered), None);
        assert_eq!(seal.open(b"call\0a", &sealed[..10]), None);
    }
}
