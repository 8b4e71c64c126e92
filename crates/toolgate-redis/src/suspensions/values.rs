//! How the store writes a value (JSON, sealed when it has a key) and a caller (in key names
//! and fields), and reads them back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use toolgate_core::User;
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
            "expiry notice" => format!("the expiry notice of the call `{}`", self.id),
            _ => format!("the outcome of the call `{}`", self.id),
        }
    }
}

pub(super) fn call_place(id: &str) -> Place<'_> {
    Place { kind: "call", id }
}

/// Where the expiry notice of the call `id` is kept (see `claim_expired.lua`).
pub(super) fn notice_place(id: &str) -> Place<'_> {
    Place {
        kind: "expiry notice",
        id,
    }
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

/// Marks a caller with a tenant in [`caller_key`]: the byte 0xFF occurs in no UTF-8 text,
/// so in no user id and no tenant.
const TENANT_MARK: u8 = 0xFF;

/// How a caller — a user id in a tenant, or in none — is written where the store counts
/// and remembers calls by caller: in the name of their index (`:user:<caller>`,
/// `:retry_user:<caller>`) and as who made a call (`:owners`, `:expired_owners`, the
/// `user` field of a row).
///
/// * Without a tenant: the user id as it is — what every earlier version wrote for every
///   caller, so that their keys and indexes keep working.
/// * With one: `0xFF <tenant> 0xFF <user id>`. Not UTF-8, so never the id of a caller
///   without a tenant (ids are text, whatever characters they hold), and read back
///   unambiguously since no tenant holds the byte: `ann` of `globex` and `ann` of `acme`
///   have indexes of their own, and neither is the `ann` of no tenant.
pub(super) fn caller_key(user: &str, tenant: Option<&str>) -> Vec<u8> {
    match tenant {
        None => user.as_bytes().to_vec(),
        Some(tenant) => {
            let mut key = Vec::with_capacity(tenant.len() + user.len() + 2);
            key.push(TENANT_MARK);
            key.extend_from_slice(tenant.as_bytes());
            key.push(TENANT_MARK);
            key.extend_from_slice(user.as_bytes());
            key
        }
    }
}

/// The caller written as `key` by [`caller_key`], as a [`User`] with its id and tenant;
/// `None` for bytes it never writes. A caller kept by an earlier version reads as one
/// without a tenant, whatever tenant they had: that version kept none.
pub(super) fn caller_of(key: &[u8]) -> Option<User> {
    let text = |bytes: &[u8]| std::str::from_utf8(bytes).ok().map(str::to_owned);
    match key.split_first() {
        Some((&TENANT_MARK, rest)) => {
            let at = rest.iter().position(|&byte| byte == TENANT_MARK)?;
            let (tenant, user) = (text(&rest[..at])?, text(&rest[at + 1..])?);
            Some(User::new(user).with_tenant(tenant))
        }
        _ => text(key).map(User::new),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_without_a_tenant_is_written_as_its_id_and_one_with_a_tenant_as_no_id_is() {
        let odd_ids = ["ann", "", "\u{0}acme\u{0}ann", "acme:ann", "ÿacmeÿann"];
        for id in odd_ids {
            assert_eq!(caller_key(id, None), id.as_bytes(), "as before tenants");
            assert_eq!(caller_of(&caller_key(id, None)), Some(User::new(id)));
        }
        let tenanted = [("ann", "acme"), ("ann", "globex"), ("", ""), ("a", "b:c")];
        for (id, tenant) in tenanted {
            let key = caller_key(id, Some(tenant));
            assert!(std::str::from_utf8(&key).is_err(), "no id is {key:?}");
            let read = caller_of(&key).unwrap();
            assert_eq!(
                (read.id.as_str(), read.tenant.as_deref()),
                (id, Some(tenant))
            );
        }
        assert_ne!(caller_key("b:c", Some("a")), caller_key("c", Some("a:b")));
        assert_eq!(caller_of(b"\xffno second mark"), None);
    }
}
