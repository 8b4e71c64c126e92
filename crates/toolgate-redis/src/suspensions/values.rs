//! How the store writes a value (JSON, sealed when it has a key) and reads it back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use toolgate_core::suspension::SuspensionStoreError;

use super::RedisSuspensions;
use crate::seal;

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
        seal::write(self.seal.as_deref(), &place.aad(), json).map_err(|reason| {
            SuspensionStoreError::Unavailable(format!(
                "{} cannot be encrypted: {reason}",
                place.describe()
            ))
        })
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
        let json = match seal::read(self.seal.as_deref(), &place.aad(), stored) {
            Ok(json) => json,
            Err(why) => return refused(why.to_string()),
        };
        serde_json::from_slice(&json).or_else(|error| {
            refused(format!(
                "cannot be read ({error}): it was written by an incompatible version of toolgate, or altered"
            ))
        })
    }
}
