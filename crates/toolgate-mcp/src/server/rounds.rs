//! Multi-round requests through toolgate (MCP 2026-07-28, SEP-2322): an upstream's
//! `input_required` result is answered to the caller with its `requestState` sealed, and
//! the caller's retry is opened again before it goes upstream.
//!
//! A call that waits for a person's approval is answered to a 2026-07-28 caller the same
//! way, as an `input_required` result with only a sealed state naming the suspension: the
//! caller calls again later with it and gets the call's outcome once decided (see
//! [`McpServer::outcome_tool`](super::McpServer::outcome_tool)).
//!
//! The upstream trusts its own `requestState` (it may hold anything: a step, a name the
//! user gave). A caller must not be able to forge one, or replay one it was given for
//! another call or that another user was given: toolgate seals the upstream's state with
//! HMAC-SHA256 under the server's key, bound to the caller (the user id in its tenant:
//! `ann` of another tenant is another caller) and the tool or prompt, with an expiry
//! ([`STATE_TTL`]). A retry whose state does not open is refused (JSON-RPC
//! `invalid params`) and never reaches the upstream.
//!
//! A caller must not be able to read one either: an upstream's state may hold what the
//! caller may not see (a credential toolgate injected and the upstream echoed, which the
//! frames leave as they were so that the upstream gets its state back). rmcp's seal only
//! signs, so the payload is encrypted first (ChaCha20-Poly1305, under a key of its own
//! derived from the server's key and 32 random bytes the state carries), and the caller
//! holds bytes that tell nothing but their length.

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf;
use rmcp::model::{
    ErrorData, InputRequests, InputRequiredResult, InputResponses, MetaObject, RequestStateCodec,
    SealOptions,
};
use serde_json::Value;
use toolgate_core::User;

use crate::McpError;
use crate::caller::InputRound;

/// How long a sealed state can be sent back: a round may wait for a person's answer.
pub(crate) const STATE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// The `_meta` key of the suspension a waiting call's `input_required` result names.
pub(crate) const SUSPENSION_META_KEY: &str = "io.toolgate/suspension";

/// What a sealed state holds: an upstream's state, or the suspension a call waits in.
const UPSTREAM: &str = "u:";
const APPROVAL: &str = "a:";
/// The start of an encrypted payload: then the salt its key was derived with, then the
/// ciphertext of `u:…` or `a:…` with its tag. A payload without it was sealed by an
/// earlier version, which only signed: it still opens until it expires.
const ENCRYPTED: &[u8] = b"x:";
/// How many random bytes each state's key is derived with.
const SALT_LEN: usize = 32;
/// The HKDF salt that derives the encryption secret from the server's key, so that the
/// same key never signs and encrypts.
const ENCRYPTION_DOMAIN: &[u8] = b"toolgate requestState encryption";

/// A request that carries what an earlier answer gave its caller.
#[derive(Debug)]
pub(crate) enum Retry {
    /// The next round of a multi-round call.
    Round(InputRound),
    /// A call that waited for approval: is it decided?
    Approval {
        /// Its suspension id.
        id: String,
        /// The [digest](toolgate_core::approval::digest) of the arguments it was made
        /// with: a retry with other arguments is another call.
        arguments: String,
    },
}

/// Seals and opens the `requestState` of rounds answered to callers.
pub(crate) struct StateSeal {
    codec: RequestStateCodec,
    /// What each state's encryption key is derived from (with the state's own salt).
    secret: hkdf::Prk,
}

impl StateSeal {
    /// A seal under a random key: states open on this process only.
    pub(crate) fn random() -> Self {
        let key = toolgate_hooks::fingerprint::random_key();
        StateSeal {
            codec: RequestStateCodec::new_unchecked(key.to_vec()),
            secret: Self::secret(&key),
        }
    }

    fn secret(key: &[u8]) -> hkdf::Prk {
        hkdf::Salt::new(hkdf::HKDF_SHA256, ENCRYPTION_DOMAIN).extract(key)
    }

    /// The key of the state whose salt is `salt`: one key per state, so that a nonce of
    /// zeros is never used twice under a key.
    fn state_key(&self, salt: &[u8]) -> LessSafeKey {
        let info = [salt];
        let okm = self
            .secret
            .expand(&info, &CHACHA20_POLY1305)
            .expect("32 bytes are within what HKDF-SHA256 derives");
        LessSafeKey::new(UnboundKey::from(okm))
    }

    /// `payload` encrypted for `context`: [`ENCRYPTED`], a fresh salt, the ciphertext.
    fn encrypt(&self, payload: &str, context: &[u8]) -> Vec<u8> {
        let salt: [u8; SALT_LEN] = toolgate_hooks::fingerprint::random_key();
        let mut sealed = payload.as_bytes().to_vec();
        self.state_key(&salt)
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key([0; NONCE_LEN]),
                Aad::from(context),
                &mut sealed,
            )
            .expect("a state is far shorter than what ChaCha20-Poly1305 encrypts");
        [ENCRYPTED, &salt, &sealed].concat()
    }

    /// The payload of an opened state: decrypted when it was encrypted, as it is when an
    /// earlier version sealed it; `None` when it does not decrypt.
    fn decrypt(&self, opened: Vec<u8>, context: &[u8]) -> Option<String> {
        let Some(encrypted) = opened.strip_prefix(ENCRYPTED) else {
            return String::from_utf8(opened).ok();
        };
        if encrypted.len() < SALT_LEN {
            return None;
        }
        let (salt, ciphertext) = encrypted.split_at(SALT_LEN);
        let mut plain = ciphertext.to_vec();
        let opened = self
            .state_key(salt)
            .open_in_place(
                Nonce::assume_unique_for_key([0; NONCE_LEN]),
                Aad::from(context),
                &mut plain,
            )
            .ok()?;
        String::from_utf8(opened.to_vec()).ok()
    }

    /// A seal under `key` (at least 32 bytes), shared by the replicas that serve the same
    /// callers.
    pub(crate) fn with_key(key: &[u8]) -> Result<Self, McpError> {
        let codec = RequestStateCodec::try_new(key.to_vec()).map_err(|_| {
            McpError::Config(format!(
                "the request state key must be at least {} bytes long (it is {}): make one with `openssl rand -hex 32`",
                RequestStateCodec::MIN_KEY_LENGTH,
                key.len()
            ))
        })?;
        Ok(StateSeal {
            codec,
            secret: Self::secret(key),
        })
    }

    /// What a state is bound to: who asked — the caller, an id in a tenant — and what
    /// (`tools/call NAME`, `prompts/get NAME`).
    ///
    /// For a caller without a tenant it is the id, a 0 byte and the target, the bytes
    /// states were sealed with before tenants counted, so those still open. For a caller
    /// with a tenant it is a 0 byte, the length of their [caller
    /// key](User::caller_key) in bytes and `:`, the key, a 0 byte and the target. A
    /// caller key holds 0 bytes of its own, and the length says where it ends, so the
    /// key and the target are read back from the context one way only; and no caller
    /// without a tenant makes such a context: their key is their id, which does not start
    /// with a 0 byte, or else a 0 byte and `-` (never a digit).
    fn context(user: &User, target: &str) -> Vec<u8> {
        let key = user.caller_key();
        let mut context = Vec::with_capacity(key.len() + target.len() + 24);
        if user.tenant.is_some() {
            context.push(0);
            context.extend_from_slice(key.len().to_string().as_bytes());
            context.push(b':');
        }
        context.extend_from_slice(key.as_bytes());
        context.push(0);
        context.extend_from_slice(target.as_bytes());
        context
    }

    /// The retry a request carries, if it is one: the caller's answers and the upstream's
    /// state opened from what the caller sent back, or the suspension it waits in.
    ///
    /// # Errors
    ///
    /// `invalid params` when the state was not sealed by this server for this user and
    /// target, was changed, or expired.
    pub(crate) fn retry(
        &self,
        responses: Option<InputResponses>,
        state: Option<String>,
        user: &User,
        target: &str,
    ) -> Result<Option<Retry>, ErrorData> {
        if responses.is_none() && state.is_none() {
            return Ok(None);
        }
        // Each answer is a result object (an elicitation's, a sampling's, the roots): a
        // caller's mistake is told here, not passed on for the upstream to trip over.
        if let Some((key, _)) = responses
            .iter()
            .flatten()
            .find(|(_, answer)| !answer.is_object())
        {
            return Err(ErrorData::invalid_params(
                format!(
                    "`inputResponses.{key}` must be an object: the result of the request `{key}` asked for (what the client answers to it, such as an elicitation's `{{\"action\": \"accept\", \"content\": {{…}}}}`)"
                ),
                None,
            ));
        }
        let state = match state {
            None => None,
            Some(sealed) => {
                let context = Self::context(user, target);
                let opened = self
                    .codec
                    .open_with(&sealed, &context)
                    .map_err(|e| {
                        ErrorData::invalid_params(
                            format!(
                                "`requestState` was refused ({e}): send back exactly the one the last `input_required` result of this call gave you, or call again without `inputResponses` and `requestState` to start over"
                            ),
                            None,
                        )
                    })?;
                let opened = self.decrypt(opened, &context).ok_or_else(not_ours)?;
                if let Some(waiting) = opened.strip_prefix(APPROVAL) {
                    let (arguments, id) = waiting.split_once(' ').ok_or_else(not_ours)?;
                    return Ok(Some(Retry::Approval {
                        id: id.to_owned(),
                        arguments: arguments.to_owned(),
                    }));
                }
                Some(
                    opened
                        .strip_prefix(UPSTREAM)
                        .ok_or_else(not_ours)?
                        .to_owned(),
                )
            }
        };
        Ok(Some(Retry::Round(InputRound {
            responses: responses.unwrap_or_default(),
            state,
        })))
    }

    fn seal(&self, payload: &str, user: &User, target: &str) -> String {
        let context = Self::context(user, target);
        let options = SealOptions::new().ttl(STATE_TTL).associated_data(&context);
        self.codec
            .seal_with(&self.encrypt(payload, &context), &options)
    }

    /// The answer to a 2026-07-28 caller of a call that waits for approval in suspension
    /// `id`: `input_required` with only a sealed state, to send back later with the same
    /// arguments (`arguments` is their digest), and the suspension in
    /// `_meta["io.toolgate/suspension"]` (`id`, and `reason` when given) for the person
    /// waiting.
    pub(crate) fn waiting(
        &self,
        id: &str,
        arguments: &str,
        reason: Option<&str>,
        user: &User,
        target: &str,
    ) -> InputRequiredResult {
        let state = self.seal(&format!("{APPROVAL}{arguments} {id}"), user, target);
        let mut suspension = serde_json::json!({ "id": id });
        if let Some(reason) = reason {
            suspension["reason"] = Value::from(reason);
        }
        let mut meta = MetaObject::new();
        meta.insert(SUSPENSION_META_KEY.to_owned(), suspension);
        InputRequiredResult::from_request_state(state).with_meta(meta)
    }

    /// The `input_required` result for the caller: the upstream's requests as they were,
    /// and its state sealed.
    pub(crate) fn answer(
        &self,
        requests: Value,
        state: Option<String>,
        user: &User,
        target: &str,
    ) -> Result<InputRequiredResult, ErrorData> {
        let requests: InputRequests = serde_json::from_value(requests).map_err(|e| {
            ErrorData::internal_error(
                format!("the upstream's input requests could not be read: {e}"),
                None,
            )
        })?;
        let state = state.map(|state| self.seal(&format!("{UPSTREAM}{state}"), user, target));
        Ok(InputRequiredResult::new(Some(requests), state))
    }
}

fn not_ours() -> ErrorData {
    ErrorData::invalid_params("`requestState` is not one this server gave", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> User {
        User::new("alice")
    }

    fn sealed(seal: &StateSeal, user: &User, target: &str) -> String {
        let answer = seal
            .answer(
                serde_json::json!({}),
                Some("step=2".to_owned()),
                user,
                target,
            )
            .unwrap();
        answer.request_state.unwrap()
    }

    #[test]
    fn a_sealed_state_opens_for_the_same_user_and_target() {
        let seal = StateSeal::random();
        let state = sealed(&seal, &alice(), "tools/call x");
        let retry = seal.retry(
            Some(InputResponses::new()),
            Some(state),
            &alice(),
            "tools/call x",
        );
        let Ok(Some(Retry::Round(round))) = retry else {
            panic!("a round: {retry:?}");
        };
        assert_eq!(round.state.as_deref(), Some("step=2"));
    }

    /// Every byte a caller can read out of a sealed state: its sections, as base64url.
    fn readable(state: &str) -> Vec<u8> {
        use base64::Engine;
        state
            .split('.')
            .flat_map(|section| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(section)
                    .unwrap_or_else(|_| section.as_bytes().to_vec())
            })
            .collect()
    }

    #[test]
    fn a_caller_cannot_read_the_upstreams_state_out_of_what_it_holds() {
        let seal = StateSeal::random();
        let answer = seal
            .answer(
                serde_json::json!({}),
                Some("token=UP-SECRET-1234".to_owned()),
                &alice(),
                "tools/call x",
            )
            .unwrap();
        let state = answer.request_state.unwrap();
        let bytes = readable(&state);
        assert!(
            !bytes.windows(9).any(|w| w == b"UP-SECRET"),
            "the upstream's state reads in the clear: {}",
            String::from_utf8_lossy(&bytes)
        );
        let retry = seal.retry(None, Some(state), &alice(), "tools/call x");
        let Ok(Some(Retry::Round(round))) = retry else {
            panic!("a round: {retry:?}");
        };
        assert_eq!(round.state.as_deref(), Some("token=UP-SECRET-1234"));
    }

    #[test]
    fn a_waiting_calls_suspension_cannot_be_read_out_of_its_state() {
        let seal = StateSeal::random();
        let waiting = seal.waiting("susp-1", "sha256:ab", None, &alice(), "tools/call x");
        let bytes = readable(&waiting.request_state.unwrap());
        assert!(!bytes.windows(6).any(|w| w == b"susp-1"));
    }

    #[test]
    fn a_state_sealed_by_the_version_that_only_signed_still_opens_until_it_expires() {
        let key = [7; 32];
        let seal = StateSeal::with_key(&key).unwrap();
        let context = StateSeal::context(&alice(), "tools/call x");
        let options = SealOptions::new().ttl(STATE_TTL).associated_data(&context);
        let earlier = RequestStateCodec::try_new(key.to_vec())
            .unwrap()
            .seal_with(b"u:step=2", &options);
        let retry = seal.retry(None, Some(earlier), &alice(), "tools/call x");
        let Ok(Some(Retry::Round(round))) = retry else {
            panic!("a round: {retry:?}");
        };
        assert_eq!(round.state.as_deref(), Some("step=2"));
    }

    #[test]
    fn an_encrypted_state_signed_again_with_another_callers_context_does_not_open() {
        // The signature holds the caller's context, and so does the encryption: a state
        // whose ciphertext was made for alice does not decrypt for mallory even under a
        // valid signature (as a leaked signing key would allow).
        let key = [9; 32];
        let seal = StateSeal::with_key(&key).unwrap();
        let ciphertext = seal.encrypt("u:step=2", &StateSeal::context(&alice(), "t"));
        let mallory = User::new("mallory");
        let resigned = RequestStateCodec::try_new(key.to_vec()).unwrap().seal_with(
            &ciphertext,
            &SealOptions::new()
                .ttl(STATE_TTL)
                .associated_data(&StateSeal::context(&mallory, "t")),
        );
        assert!(seal.retry(None, Some(resigned), &mallory, "t").is_err());
    }

    #[test]
    fn a_state_changed_replayed_by_another_user_or_on_another_tool_is_refused() {
        let seal = StateSeal::random();
        let state = sealed(&seal, &alice(), "tools/call x");
        let refused = |state: String, user: User, target: &str| {
            seal.retry(None, Some(state), &user, target)
                .unwrap_err()
                .code
        };
        assert_eq!(
            refused(format!("{state}-TAMPERED"), alice(), "tools/call x"),
            rmcp::model::ErrorCode::INVALID_PARAMS
        );
        assert_eq!(
            refused(state.clone(), User::new("mallory"), "tools/call x"),
            rmcp::model::ErrorCode::INVALID_PARAMS
        );
        assert_eq!(
            refused(state, alice(), "tools/call y"),
            rmcp::model::ErrorCode::INVALID_PARAMS
        );
    }

    #[test]
    fn a_request_state_sealed_for_ann_of_acme_does_not_open_for_ann_of_globex() {
        let seal = StateSeal::random();
        let acme = User::new("ann").with_tenant("acme");
        let state = sealed(&seal, &acme, "tools/call x");
        for other in [
            User::new("ann").with_tenant("globex"),
            User::new("ann"),
            User::new("ann").with_tenant(""),
        ] {
            let refused = seal.retry(None, Some(state.clone()), &other, "tools/call x");
            assert!(refused.is_err(), "{other:?}: {refused:?}");
        }
        let same = acme.with_roles(["admin"]);
        let retry = seal.retry(None, Some(state), &same, "tools/call x");
        assert!(matches!(retry, Ok(Some(Retry::Round(_)))), "{retry:?}");
    }

    #[test]
    fn a_caller_without_a_tenant_binds_a_state_to_the_bytes_it_did_before_tenants() {
        assert_eq!(
            StateSeal::context(&User::new("ann"), "tools/call x"),
            b"ann\0tools/call x"
        );
    }

    #[test]
    fn a_caller_with_a_tenant_binds_a_state_to_a_context_of_its_own() {
        let callers = [
            User::new("ann"),
            User::new("ann").with_tenant("acme"),
            User::new("ann").with_tenant("globex"),
            User::new("ann").with_tenant(""),
            User::new("ann\0x").with_tenant("acme"),
            User::new("ann").with_tenant("acme\0ann"),
            User::new("\u{0}4:acme\u{0}ann"),
            User::new("\u{0}12:\u{0}4:acme\u{0}ann"),
            User::new("\u{0}12:\u{0}4:acme\u{0}ann\u{0}x"),
            User::new("12:\u{0}4:acme\u{0}ann"),
        ];
        let targets = ["x", "x\0x", "\0x", ""];
        let bound: Vec<_> = callers
            .iter()
            .flat_map(|caller| targets.map(|target| (caller, target)))
            .map(|(caller, target)| (caller, target, StateSeal::context(caller, target)))
            .collect();
        for (i, (caller, target, context)) in bound.iter().enumerate() {
            for (other, other_target, other_context) in &bound[i + 1..] {
                // Without tenants, an id and a target holding 0 bytes could always be
                // read two ways; those bytes are kept as they were.
                if caller.tenant.is_none() && other.tenant.is_none() {
                    continue;
                }
                assert_ne!(
                    context, other_context,
                    "{caller:?} on {target:?} and {other:?} on {other_target:?}"
                );
            }
        }
    }

    #[test]
    fn another_servers_state_is_refused_and_a_short_key_is_a_config_error() {
        let state = sealed(&StateSeal::random(), &alice(), "t");
        assert!(
            StateSeal::random()
                .retry(None, Some(state), &alice(), "t")
                .is_err()
        );
        assert!(matches!(
            StateSeal::with_key(b"short"),
            Err(McpError::Config(_))
        ));
        assert!(StateSeal::with_key(&[7; 32]).is_ok());
    }

    #[test]
    fn an_answer_that_is_not_an_object_is_refused() {
        let seal = StateSeal::random();
        let mut responses = InputResponses::new();
        responses.insert("user_name".to_owned(), serde_json::json!(12345));
        let refused = seal
            .retry(Some(responses), None, &alice(), "t")
            .unwrap_err();
        assert_eq!(refused.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(
            refused.message.contains("inputResponses.user_name"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn a_request_without_answers_or_state_is_no_round() {
        let seal = StateSeal::random();
        assert!(seal.retry(None, None, &alice(), "t").unwrap().is_none());
    }

    #[test]
    fn a_waiting_calls_state_opens_as_its_suspension_and_arguments_for_its_caller_only() {
        let seal = StateSeal::random();
        let waiting = seal.waiting("susp-1", "sha256:ab", None, &alice(), "tools/call x");
        assert!(waiting.input_requests.is_none());
        let state = waiting.request_state.unwrap();
        let retry = seal.retry(None, Some(state.clone()), &alice(), "tools/call x");
        let Ok(Some(Retry::Approval { id, arguments })) = retry else {
            panic!("an approval: {retry:?}");
        };
        assert_eq!((id.as_str(), arguments.as_str()), ("susp-1", "sha256:ab"));
        assert!(
            seal.retry(None, Some(state), &User::new("bob"), "tools/call x")
                .is_err()
        );
    }
}
