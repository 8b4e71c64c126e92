//! Multi-round requests through toolgate (MCP 2026-07-28, SEP-2322): an upstream's
//! `input_required` result is answered to the caller with its `requestState` sealed, and
//! the caller's retry is opened again before it goes upstream.
//!
//! The upstream trusts its own `requestState` (it may hold anything: a step, a name the
//! user gave). A caller must not be able to forge one, or replay one it was given for
//! another call or that another user was given: toolgate seals the upstream's state with
//! HMAC-SHA256 under the server's key, bound to the user and the tool or prompt, with an
//! expiry ([`STATE_TTL`]). A retry whose state does not open is refused (JSON-RPC
//! `invalid params`) and never reaches the upstream.

use rmcp::model::{
    ErrorData, InputRequests, InputRequiredResult, InputResponses, RequestStateCodec, SealOptions,
};
use serde_json::Value;
use toolgate_core::User;

use crate::McpError;
use crate::caller::InputRound;

/// How long a sealed state can be sent back: a round may wait for a person's answer.
pub(crate) const STATE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Seals and opens the `requestState` of rounds answered to callers.
pub(crate) struct StateSeal {
    codec: RequestStateCodec,
}

impl StateSeal {
    /// A seal under a random key: states open on this process only.
    pub(crate) fn random() -> Self {
        StateSeal {
            codec: RequestStateCodec::new_unchecked(toolgate_hooks::fingerprint::random_key()),
        }
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
        Ok(StateSeal { codec })
    }

    /// What a state is bound to: who asked, and what (`tools/call NAME`, `prompts/get
    /// NAME`).
    fn context(user: &User, target: &str) -> Vec<u8> {
        let mut context = Vec::with_capacity(user.id.len() + target.len() + 1);
        context.extend_from_slice(user.id.as_bytes());
        context.push(0);
        context.extend_from_slice(target.as_bytes());
        context
    }

    /// The retry a request carries, if it is one: the caller's answers, and the upstream's
    /// state opened from what the caller sent back.
    ///
    /// # Errors
    ///
    /// `invalid params` when the state was not sealed by this server for this user and
    /// target, was changed, or expired.
    pub(crate) fn round(
        &self,
        responses: Option<InputResponses>,
        state: Option<String>,
        user: &User,
        target: &str,
    ) -> Result<Option<InputRound>, ErrorData> {
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
                let opened = self
                    .codec
                    .open_with(&sealed, &Self::context(user, target))
                    .map_err(|e| {
                        ErrorData::invalid_params(
                            format!(
                                "`requestState` was refused ({e}): send back exactly the one the last `input_required` result of this call gave you, or call again without `inputResponses` and `requestState` to start over"
                            ),
                            None,
                        )
                    })?;
                Some(String::from_utf8(opened).map_err(|_| {
                    ErrorData::invalid_params("`requestState` is not one this server gave", None)
                })?)
            }
        };
        Ok(Some(InputRound {
            responses: responses.unwrap_or_default(),
            state,
        }))
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
        let options = SealOptions::new().ttl(STATE_TTL);
        let context = Self::context(user, target);
        let state = state.map(|state| {
            self.codec
                .seal_with(state.as_bytes(), &options.associated_data(&context))
        });
        Ok(InputRequiredResult::new(Some(requests), state))
    }
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
        let round = seal
            .round(
                Some(InputResponses::new()),
                Some(state),
                &alice(),
                "tools/call x",
            )
            .unwrap()
            .unwrap();
        assert_eq!(round.state.as_deref(), Some("step=2"));
    }

    #[test]
    fn a_state_changed_replayed_by_another_user_or_on_another_tool_is_refused() {
        let seal = StateSeal::random();
        let state = sealed(&seal, &alice(), "tools/call x");
        let refused = |state: String, user: User, target: &str| {
            seal.round(None, Some(state), &user, target)
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
    fn another_servers_state_is_refused_and_a_short_key_is_a_config_error() {
        let state = sealed(&StateSeal::random(), &alice(), "t");
        assert!(
            StateSeal::random()
                .round(None, Some(state), &alice(), "t")
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
            .round(Some(responses), None, &alice(), "t")
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
        assert!(seal.round(None, None, &alice(), "t").unwrap().is_none());
    }
}
