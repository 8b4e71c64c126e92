//! The key layout. Every key starts with the configured prefix (default `toolgate`), and
//! each Lua script touches keys of one Redis Cluster slot: a budget's key carries the
//! budget in a hash tag (`{…}`), and a fill lock's hash tag is what Redis hashes of its
//! entry's key (the whole key, or the entry's own hash tag if it has one).
//!
//! A `<policy base>` is `<prefix>:{<policy key>}`, the key written out as its own hash tag,
//! when the policy key has no `{` or `}` and is not empty (every key the hooks build from
//! ids and names without braces, as every earlier version wrote it); otherwise
//! `<prefix>:sha256:{<SHA-256 of the policy key, hex>}`. A policy key holds text callers
//! choose, and a `}` in it would cut the hash tag short and let a caller pile keys onto one
//! slot: the digest keeps one hash tag per policy key whatever its bytes.
//!
//! | what | key | expiry |
//! |---|---|---|
//! | quota state (GCRA TAT) | `<policy base>:quota` | when the budget is full again |
//! | budget (window end, units spent, window length, the earliest end of a window its spending was carried from) | `<policy base>:budget` (hash) | a day (or a window, when longer) after its window ends |
//! | one budget charge (its window and cost, or that it was cancelled) | `<policy base>:budget:c:<id>` | 30 s |
//! | one budget correction, made | `<policy base>:budget:a:<id>` | 30 s |
//! | concurrency leases | `<policy base>:leases` (sorted set) | the latest lease's expiry |
//! | cached result | `<prefix>:<tool>:<sha256>` (the `CacheKey`) | the entry's TTL |
//! | cache fill lock | `<prefix>:fill:{<prefix>:<tool>:<sha256>}` | the fill wait |
//! | cache bytes written by one caller (or the public results) this window | `<prefix>:cache_bytes:{<sha256 of the caller>}` | the window's end |
//! | waiting calls, approvals for a retry, outcomes | `<prefix>:{<prefix>:susp}:…` (see below) | each its own |
//! | sign-in sessions, sign-ins waiting for a callback | `<prefix>:{<prefix>:sessions}:…` (see below) | each its own |
//! | a history (the newest entries of a record) | `<prefix>:history:<name>` (list) | its `keep` after the newest entry |
//! | a history bounded per part | `<prefix>:{<prefix>:history:<name>}:parts` (sorted set: part → newest ms), `…:part:<part>` and `…:other` (lists) | each its `keep` after its newest entry |
//! | pinned tool definitions, changes waiting, their history | `<prefix>:{<prefix>:pins}:…` (see below) | never |
//! | per-tool counts of every replica | `<prefix>:{<prefix>:counters}:…` (see below) | `keep` after the last addition |
//!
//! Every key of the suspension store starts with one base, `<prefix>:{<prefix>:susp}`, so
//! they all hash alike (whatever the prefix holds, the hashed part lies within the base) and
//! its scripts, which build the keys of a call from the base, touch one slot:
//!
//! | what | after the base | type |
//! |---|---|---|
//! | waiting calls by expiry | `:calls` | sorted set (id → expiry ms) |
//! | waiting calls by id | `:ids` | sorted set (id → 0, for `ZRANGEBYLEX`) |
//! | who made each waiting call | `:owners` | hash (id → caller) |
//! | a caller's waiting calls | `:user:<caller>` | sorted set (id → expiry ms) |
//! | a waiting call (held a while once taken) | `:call:<id>` | hash (`user`, `value`, `seal`, `at`, `token`, `held_by`) |
//! | recently expired ids | `:expired` | sorted set (id → expiry ms) |
//! | who made each recently expired call | `:expired_owners` | hash (id → caller; none for an id an earlier version remembered) |
//! | approvals for a retry by expiry | `:retries` | sorted set (approval id → expiry ms) |
//! | a caller's approvals | `:retry_user:<caller>` | sorted set (approval id → expiry ms) |
//! | approvals of one binding | `:retry_key:<binding key>` | sorted set (approval id → kept at ms) |
//! | an approval | `:retry:<approval id>` | hash (`user`, `value`, `seal`) |
//! | outcomes by expiry | `:outcomes` | sorted set (id → expiry ms) |
//! | an outcome | `:outcome:<id>` | string |
//! | a caller's outcomes | `:outcome_user:<caller>` | sorted set (id → when it was kept, ms) |
//! | a running record's mark | `:outcome_run:<id>` | hash (`token`, `digest`, `caller`) |
//! | who kept each outcome | `:outcome_owners` | hash (id → caller) |
//! | how many outcomes each caller holds | `:outcome_counts` | sorted set (caller → count) |
//!
//! A `<caller>` is the user id for a caller without a tenant (as every earlier version
//! wrote it), and the bytes `0xFF <tenant> 0xFF <user id>` for one with a tenant: never
//! UTF-8, so never an id.
//!
//! The session store's keys share one base the same way, `<prefix>:{<prefix>:sessions}`:
//!
//! | what | after the base | type |
//! |---|---|---|
//! | live sessions by expiry | `:all` | sorted set (SHA-256 of the id, hex → expiry ms) |
//! | a user's sessions by when they opened | `:user:<user id>` | sorted set (id → opened ms) |
//! | a session | `:session:<id>` | hash (`user`, `record`) |
//! | sign-ins waiting for a callback by expiry | `:flows` | sorted set (state → expiry ms) |
//! | a sign-in waiting for a callback | `:flow:<state>` | string (its secret) |
//!
//! The pin store's keys share one base the same way, `<prefix>:{<prefix>:pins}`:
//!
//! | what | after the base | type |
//! |---|---|---|
//! | pins | `:pinned` | hash (tool → fingerprint) |
//! | pinned definitions | `:pinned_forms` | hash (tool → JSON) |
//! | changes waiting | `:pending` | hash (tool → fingerprint offered) |
//! | definitions offered | `:pending_forms` | hash (tool → JSON) |
//! | every pin, change and acceptance, newest first | `:history` | list (JSON), the last 10,000 |
//!
//! The shared counters' keys share one base the same way, `<prefix>:{<prefix>:counters}`:
//!
//! | what | after the base | type |
//! |---|---|---|
//! | the tools counted apart | `:tools` | set |
//! | a tool's counts | `:tool:<tool>` | hash (field → count) |
//! | when the first count was added | `:since` | string (ms, Redis's clock) |
//!
//! Which script touches which keys, and so what must share a slot:
//!
//! | script or command | keys |
//! |---|---|
//! | `gcra.lua` | the quota key |
//! | `budget.lua` | the budget key and the record of one charge or correction (same hash tag) |
//! | `acquire.lua`, `renew.lua`, the release (`ZREM`) | the leases key |
//! | `GET`, `SET … PX`, `DEL` | the entry |
//! | `claim.lua`, `fill.lua` | the entry and its fill lock |
//! | `charge.lua` | the caller's cache bytes (a call of its own before the entry's: the two are in different slots) |
//! | the suspension store's scripts and commands | keys under its base |
//! | the session store's scripts and commands | keys under its base |
//! | the pin store's scripts and commands | keys under its base |
//! | the shared counters' scripts | keys under their base |
//! | `record.lua`, `LRANGE` | the history's list |
//! | `record_part.lua`, `ZRANGE`, `LRANGE` | keys under a parted history's base |

use toolgate_hooks::cache::CacheKey;
use toolgate_hooks::fingerprint::sha256_hex;

/// The quota state of the policy key `key`: `<prefix>:{<key>}:quota`, or
/// `<prefix>:sha256:{<hex>}:quota` for a key that cannot be a hash tag (see [`policy_base`]).
pub(crate) fn quota(prefix: &str, key: &str) -> String {
    format!("{}:quota", policy_base(prefix, key))
}

/// The budget of the policy key `key`, under the same base as its [`quota`].
pub(crate) fn budget(prefix: &str, key: &str) -> String {
    format!("{}:budget", policy_base(prefix, key))
}

/// The concurrency leases of the policy key `key`, under the same base as its [`quota`].
pub(crate) fn leases(prefix: &str, key: &str) -> String {
    format!("{}:leases", policy_base(prefix, key))
}

/// `<prefix>:{<key>}`, the key its own hash tag, as every earlier version wrote it; or
/// `<prefix>:sha256:{<SHA-256 of the key, hex>}` for a key with a brace, or an empty one.
///
/// A policy key holds text callers choose (user ids, tenants, labels). Written out, a `}` in
/// it would end the hash tag early (`x}anything` hashes as `x`), so one caller could put
/// any number of keys, or many callers', on one slot and one primary; the digest keeps one
/// tag per key whatever its bytes. The `sha256:` before the tag, where a written-out key
/// has `{`, keeps the two forms apart: no key's base is another key's digest.
fn policy_base(prefix: &str, key: &str) -> String {
    if key.is_empty() || key.contains(['{', '}']) {
        format!("{prefix}:sha256:{{{}}}", sha256_hex(key.as_bytes()))
    } else {
        format!("{prefix}:{{{key}}}")
    }
}

/// The base of every key of the suspension store: `<prefix>:{<prefix>:susp}`, braces left
/// out of the hash tag. Every key that starts with it hashes to one slot, unless the
/// prefix's first `{` is followed at once by `}` (then Redis hashes whole keys): a prefix
/// to avoid on a cluster.
pub(crate) fn suspensions(prefix: &str) -> String {
    store_base(prefix, "susp")
}

/// The base of every key of the session store: `<prefix>:{<prefix>:sessions}`, as
/// [`suspensions`] builds its own.
pub(crate) fn sessions(prefix: &str) -> String {
    store_base(prefix, "sessions")
}

/// The base of every key of the pin store: `<prefix>:{<prefix>:pins}`, as [`suspensions`]
/// builds its own.
pub(crate) fn pins(prefix: &str) -> String {
    store_base(prefix, "pins")
}

/// The base of every key of the parted history `name`:
/// `<prefix>:{<prefix>:history:<name>}`, as [`suspensions`] builds its own.
pub(crate) fn parted_history(prefix: &str, name: &str) -> String {
    store_base(prefix, &format!("history:{name}"))
}

pub(crate) fn counters(prefix: &str) -> String {
    store_base(prefix, "counters")
}

/// `<prefix>:{<prefix>:<store>}`, braces left out of the hash tag.
fn store_base(prefix: &str, store: &str) -> String {
    let tag: String = prefix.chars().filter(|c| !matches!(c, '{' | '}')).collect();
    format!("{prefix}:{{{tag}:{store}}}")
}

/// The `CacheKey` (`toolgate:<tool>:<sha256>`) with its first part replaced by the prefix:
/// the key itself under the default prefix.
pub(crate) fn cache_entry(prefix: &str, key: &CacheKey) -> String {
    let key = key.as_str();
    match key.strip_prefix("toolgate:") {
        Some(rest) => format!("{prefix}:{rest}"),
        None => format!("{prefix}:{key}"),
    }
}

/// The count of cache bytes `caller` (a user id in its tenant, as
/// [`caller_key`](toolgate_core::User::caller_key) writes it) wrote in this window:
/// `<prefix>:cache_bytes:{<sha256>}`. The caller is hashed (length-prefixed) rather than
/// written out, so a user id with braces cannot break the hash tag, and the key shows no
/// id.
pub(crate) fn cache_caller_bytes(prefix: &str, caller: &str) -> String {
    let mut bytes = Vec::with_capacity(64 + caller.len());
    for part in ["toolgate-cache-caller-v1", caller] {
        bytes.extend_from_slice(&(part.len() as u64).to_be_bytes());
        bytes.extend_from_slice(part.as_bytes());
    }
    format!("{prefix}:cache_bytes:{{{}}}", sha256_hex(&bytes))
}

/// The fill lock of `entry`, in the entry's slot: its hash tag is exactly what Redis
/// hashes of the entry's key. `None` when that text contains a `}` and so cannot be a hash
/// tag (only for a tool name with braces, which a pipeline refuses): such an entry is
/// cached without the cross-replica fill lock.
pub(crate) fn fill_lock(prefix: &str, entry: &str) -> Option<String> {
    let hashed = hashed_part(entry);
    (!hashed.contains('}')).then(|| format!("{prefix}:fill:{{{hashed}}}"))
}

/// The part of `key` that Redis Cluster hashes to find its slot: the text between the
/// first `{` and the first `}` after it, if that is not empty; otherwise the whole key.
pub(crate) fn hashed_part(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(close) = key[open + 1..].find('}')
        && close > 0
    {
        return &key[open + 1..open + 1 + close];
    }
    key
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hashed part, modulo 16384, as
/// the cluster specification defines it.
#[cfg(test)]
pub(crate) fn slot(key: &str) -> u16 {
    crc16_xmodem(hashed_part(key).as_bytes()) % 16384
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
#[cfg(test)]
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolgate_core::tool::ToolDefinition;
    use toolgate_hooks::cache::{KeyScope, cache_key};

    #[test]
    fn a_cache_entry_is_stored_under_its_cache_key_by_default() {
        let tool: ToolDefinition = serde_json::from_value(
            json!({"name": "weather", "description": "", "version": "1", "input_schema": {}}),
        )
        .unwrap();
        let key = cache_key(
            &tool,
            &KeyScope::User("ann".into()),
            &json!({"city": "Oslo"}),
        );
        assert_eq!(super::cache_entry("toolgate", &key), key.as_str());
        let moved = super::cache_entry("staging", &key);
        assert!(moved.starts_with("staging:weather:"), "{moved}");
        assert_eq!(
            super::fill_lock("toolgate", key.as_str()),
            Some(format!("toolgate:fill:{{{key}}}"))
        );
    }

    #[test]
    fn a_callers_cache_bytes_are_counted_under_a_hash_whatever_braces_its_id_holds() {
        let key = super::cache_caller_bytes("toolgate", "{a}}{");
        let tag = super::hashed_part(&key);
        assert_eq!(tag.len(), 64, "{key}");
        assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert_eq!(key, format!("toolgate:cache_bytes:{{{tag}}}"));
        let callers = ["ann", "ann\u{1f}acme", "acme", ""];
        let keys: std::collections::HashSet<_> = callers
            .iter()
            .map(|caller| super::cache_caller_bytes("toolgate", caller))
            .collect();
        assert_eq!(keys.len(), callers.len(), "every caller has their own key");
    }

    #[test]
    fn a_policy_key_without_braces_keeps_the_keys_earlier_versions_wrote() {
        assert_eq!(
            super::quota("toolgate", "q\u{1f}*"),
            "toolgate:{q\u{1f}*}:quota"
        );
        assert_eq!(
            super::budget("toolgate", "daily\u{1f}u\u{1f}ann"),
            "toolgate:{daily\u{1f}u\u{1f}ann}:budget"
        );
        assert_eq!(super::leases("p", "k"), "p:{k}:leases");
        assert_eq!(
            super::quota("toolgate", "failed-credentials:2001:db8::/64"),
            "toolgate:{failed-credentials:2001:db8::/64}:quota"
        );
    }

    #[test]
    fn a_policy_key_with_a_brace_is_hashed_whole_under_its_own_digest() {
        let keys = [
            "quota\u{1f}x}anything",
            "quota\u{1f}x}other",
            "quota\u{1f}x{",
            "quota\u{1f}{x}",
            "}",
            "{",
            "{}",
            "}{",
            "",
        ];
        let mut tags = std::collections::HashSet::new();
        for key in keys {
            let quota = super::quota("toolgate", key);
            let digest = super::sha256_hex(key.as_bytes());
            assert_eq!(quota, format!("toolgate:sha256:{{{digest}}}:quota"));
            // The whole key is in the tag, never the text before its first `}`.
            assert_eq!(super::hashed_part(&quota), digest, "{key:?}");
            assert_eq!(
                quota,
                super::quota("toolgate", key),
                "the same key, the same tag"
            );
            for other in [
                super::budget("toolgate", key),
                super::leases("toolgate", key),
            ] {
                assert_eq!(super::hashed_part(&other), digest, "{other}");
            }
            tags.insert(digest);
        }
        assert_eq!(tags.len(), keys.len(), "every key has a tag of its own");
        assert_ne!(
            super::slot(&super::quota("toolgate", "quota\u{1f}x}anything")),
            super::slot(&super::quota("toolgate", "quota\u{1f}x}other")),
            "keys that differ only after a `}}` land on different slots"
        );
        // A key written out that happens to be another key's digest is still its own key.
        let digest = super::sha256_hex(b"x}y");
        assert_ne!(
            super::quota("toolgate", &digest),
            super::quota("toolgate", "x}y")
        );
    }

    #[test]
    fn the_slot_function_matches_the_cluster_specification_and_redis_rs() {
        // The test vector of the Redis Cluster specification.
        assert_eq!(super::crc16_xmodem(b"123456789"), 0x31C3);
        // Hash tags, as the specification's examples read them.
        assert_eq!(super::hashed_part("{user1000}.following"), "user1000");
        assert_eq!(super::hashed_part("foo{}{bar}"), "foo{}{bar}");
        assert_eq!(super::hashed_part("foo{{bar}}zap"), "{bar");
        assert_eq!(super::hashed_part("foo{bar}{zap}"), "bar");
        for key in [
            "123456789",
            "{user1000}.following",
            "foo{}{bar}",
            "a{b}c",
            "}{",
            "{",
        ] {
            let theirs = redis::cluster_routing::Slot::for_key(key);
            assert_eq!(
                redis::cluster_routing::Slot::new(super::slot(key)),
                Some(theirs),
                "{key}"
            );
        }
    }

    /// Names as awkward as a client can choose: braces, empty parts, the policy key's
    /// separator, non-ASCII.
    fn awkward_name(rng: &mut fastrand::Rng) -> String {
        const PARTS: &[&str] = &[
            "{",
            "}",
            "{}",
            "}{",
            "a",
            "user",
            "\u{1f}",
            ":",
            "é",
            "{x}",
            "*",
            " ",
            "tool-1.2_3",
        ];
        let len = rng.usize(0..8);
        (0..len).map(|_| PARTS[rng.usize(..PARTS.len())]).collect()
    }

    /// Every script and command keeps its keys in one slot, for any names a client can
    /// choose: Redis Cluster would refuse one that did not (`CROSSSLOT`).
    #[test]
    fn every_script_touches_keys_of_one_slot_whatever_the_names() {
        let mut rng = fastrand::Rng::with_seed(22);
        let mut locks_skipped = 0;
        for _ in 0..20_000 {
            let prefix = ["toolgate", "staging", "t"][rng.usize(..3)];
            let policy = awkward_name(&mut rng);
            let user = awkward_name(&mut rng);
            let tool = awkward_name(&mut rng);
            let policy_key = format!("{policy}\u{1f}{user}");

            // Scripts of one key are in one slot by construction; check the key is what
            // the script is given, and that Redis hashes the whole policy key (written
            // out, or its digest), so every policy key has a slot of its own.
            let quota = super::quota(prefix, &policy_key);
            let leases = super::leases(prefix, &policy_key);
            assert!(quota.starts_with(prefix) && leases.starts_with(prefix));
            let hashed = if policy_key.contains(['{', '}']) {
                super::sha256_hex(policy_key.as_bytes())
            } else {
                policy_key.clone()
            };
            assert_eq!(super::hashed_part(&quota), hashed, "{quota:?}");
            assert_eq!(super::slot(&quota), super::slot(&leases), "{leases:?}");

            // The cache's two-key scripts: the entry and its fill lock.
            let digest = format!("{:064x}", rng.u128(..));
            let entry = format!("{prefix}:{tool}:{digest}");
            match super::fill_lock(prefix, &entry) {
                Some(lock) => assert_eq!(
                    super::slot(&entry),
                    super::slot(&lock),
                    "claim.lua and fill.lua touch `{entry}` and `{lock}`"
                ),
                None => {
                    // Only an entry whose hashed part has a `}` goes without a lock.
                    assert!(super::hashed_part(&entry).contains('}'), "{entry}");
                    assert!(tool.contains('}'), "{tool}");
                    locks_skipped += 1;
                }
            }
        }
        assert!(locks_skipped > 0, "the names did include unlockable ones");
    }

    /// Every key of the suspension, session, pin and counter stores hashes to the slot of its
    /// base, whatever the prefix, user ids, call ids, session ids, states and binding keys:
    /// their scripts touch one slot.
    #[test]
    fn every_store_key_is_in_the_slot_of_its_base() {
        let mut rng = fastrand::Rng::with_seed(34);
        for _ in 0..20_000 {
            let prefix = match rng.usize(..4) {
                0 => "toolgate".to_owned(),
                _ => awkward_name(&mut rng),
            };
            if let Some(open) = prefix.find('{')
                && prefix[open + 1..].starts_with('}')
            {
                continue; // the one kind of prefix whose keys Redis hashes whole
            }
            let stores = [
                (
                    super::suspensions(&prefix),
                    &[
                        "calls",
                        "user:",
                        "call:",
                        "retry_key:",
                        "outcome:",
                        "outcome_user:",
                        "outcome_owners",
                        "outcome_counts",
                    ][..],
                ),
                (
                    super::sessions(&prefix),
                    &["all", "user:", "session:", "flows", "flow:"][..],
                ),
                (
                    super::pins(&prefix),
                    &[
                        "pinned",
                        "pinned_forms",
                        "pending",
                        "pending_forms",
                        "history",
                    ][..],
                ),
                (super::counters(&prefix), &["tools", "tool:", "since"][..]),
            ];
            for (base, kinds) in stores {
                let slot = super::slot(&base);
                for kind in kinds {
                    let name = if kind.ends_with(':') {
                        awkward_name(&mut rng)
                    } else {
                        String::new()
                    };
                    let key = format!("{base}:{kind}{name}");
                    assert_eq!(super::slot(&key), slot, "`{key}` and `{base}`");
                }
            }
        }
    }

    /// Tool names a pipeline accepts (a-z, A-Z, 0-9, `_`, `-`, `.`) always get a fill lock.
    #[test]
    fn every_valid_tool_name_gets_a_fill_lock_in_its_entrys_slot() {
        let mut rng = fastrand::Rng::with_seed(5);
        let alphabet: Vec<char> = ('a'..='z')
            .chain('A'..='Z')
            .chain('0'..='9')
            .chain(['_', '-', '.'])
            .collect();
        for _ in 0..5_000 {
            let tool: String = (0..rng.usize(1..=64))
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let entry = format!("toolgate:{tool}:{:064x}", rng.u128(..));
            let lock = super::fill_lock("toolgate", &entry).expect("a lock");
            assert_eq!(super::slot(&entry), super::slot(&lock), "{entry}");
        }
    }
}
