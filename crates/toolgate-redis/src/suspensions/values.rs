//! How the store writes a value (JSON, sealed when it has a key) and reads it back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use toolgate_core::suspension::SuspensionStoreError;

use super::RedisSuspensions;
use super::seal::is_sealed;

/// Where a value is kept: its kind and the id it is found by. A sealed value is bound to
/// its place, and errors name it.
pub(super) struct Place<'a> {
    pub(super) kind: &'static str,
    pub(super) id: &'a str,
}

impl Place<'_> {
    fn aad(&self) -> Vec<u8> {
        format!("toolgate {}\0{}", self.kind, self.id).into_bytes()
    }

    fn describe(&self) -> String {
        match self.kind {
            "call" => format!("the waiting call `{}`", self.id),
            "retry approval" => "an approval for a retry".to_owned(),
            _ => format!("the outcome of the call `{}`", self.id),
        }
    }
}

pub(super) fn call_place(id: &str) -> Place<'_> {
    Place { kind: "call", id }
}

impl RedisSuspensions {
    pub(super) fn encode<T: Serialize>(
        &self,
        place: &Place<'_>,
        value: &T,
    ) -> Result<Vec<u8>, SuspensionStoreError> {
        let json = serde_json::to_vec(value).map_err(|error| {
            SuspensionStoreError::Unavailable(format!(
                "{} cannot be written as JSON ({error})",
                place.describe()
            ))
        })?;
        match &self.seal {
            None => Ok(json),
            Some(seal) => seal.seal(&place.aad(), &json).map_err(|reason| {
                SuspensionStoreError::Unavailable(format!(
                    "{} cannot be encrypted: {reason}",
                    place.describe()
                ))
            }),
        }
    }

    /// The value kept at `place`, opened with the store's key when it has one.
    pub(super) fn decode<T: DeserializeOwned>(
        &self,
        place: &Place<'_>,
        stored: &[u8],
    ) -> Result<T, SuspensionStoreError> {
        let what = place.describe();
        let refused = |why: String| {
            Err(SuspensionStoreError::Unavailable(format!(
                "{what} on Redis {why}"
            )))
        };
        let opened;
        let json = match (&self.seal, is_sealed(stored)) {
            (None, false) => stored,
            (None, true) => {
                return refused(
                    "is encrypted, and this replica has no key to read it: give every replica the same encryption key".to_owned(),
                );
            }
            (Some(_), false) => {
                return refused(
                    "is stored unencrypted while this replica requires encryption (a replica without the key kept it): give every replica the same encryption key; the value is left in place until it expires".to_owned(),
                );
            }
            (Some(seal), true) => match seal.open(&place.aad(), stored) {
                Some(plain) => {
                    opened = plain;
                    &opened
                }
                None => {
                    return refused(
                        "cannot be decrypted with this replica's key (it was encrypted with another key, or altered): give every replica the same encryption key".to_owned(),
                    );
                }
            },
        };
        serde_json::from_slice(json).or_else(|error| {
            refused(format!(
                "cannot be read ({error}): it was written by an incompatible version of toolgate, or altered"
            ))
        })
    }
}
