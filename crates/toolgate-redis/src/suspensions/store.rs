//! The operations of the store ([`SuspensionStore`]): each one Lua script, or one
//! command, under the deadline.

use std::time::SystemTime;

use toolgate_core::User;
use toolgate_core::external::async_trait;
use toolgate_core::suspension::{
    DecidedCall, RetryApproval, SuspendedInvocation, SuspensionFilter, SuspensionStore,
    SuspensionStoreError, stored_size,
};

use super::values::{Place, call_place, caller_key, caller_of, notice_place};
use super::{
    CLAIM_EXPIRED, EXPIRED_OWNER, FETCH, FETCH_BYTES, FETCH_IDS, HOLD_MS, KEEP_OUTCOME, KEEP_RETRY,
    LATEST_MS, LOOKUP, PAGE, REMOVE_RUNNING, RedisSuspensions, SAVE, SPARE, USE_RETRY, instant,
    millis, span_ms, told_within, unavailable, unexpected,
};

impl RedisSuspensions {
    /// Reads, or takes, the call `id`; a take with `running` keeps that running record
    /// (with its decision's token) in the call's place, in the same script.
    async fn lookup(
        &self,
        id: &str,
        take: bool,
        running: Option<(DecidedCall, &str)>,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let limits = self.limits();
        let token = self.link.unique_id();
        let mut invocation = LOOKUP.prepare_invoke();
        invocation
            .key(self.key("calls"))
            .arg(&*self.base)
            .arg(id)
            .arg(if take { "1" } else { "0" })
            .arg(limits.max_total)
            .arg(span_ms(limits.expire_after))
            .arg(&*self.seal_id)
            .arg(&token)
            .arg(HOLD_MS);
        if let Some((record, decision)) = running.filter(|_| take) {
            let (value, until) = self.outcome_row(&record)?;
            invocation
                .key(self.key("outcomes"))
                .arg(value)
                .arg(until)
                .arg(caller_key(&record.user, record.tenant.as_deref()))
                .arg(limits.max_per_user)
                .arg(decision);
        }
        let answer = self.try_run(&invocation).await;
        let (status, value, at): (String, Option<Vec<u8>>, u64) = match answer {
            Ok(answer) => answer,
            Err(failure) => {
                if take {
                    self.undo_later(id, "take", token);
                }
                return Err(unavailable(failure));
            }
        };
        match status.as_str() {
            "none" => Ok(None),
            "expired" => Err(SuspensionStoreError::Expired { id: id.to_owned() }),
            "ok" | "sealed" => {
                let decoded = self.decode(&call_place(id), &value.unwrap_or_default());
                if take && status == "ok" && decoded.is_err() {
                    // Taken but unreadable: put back rather than lost.
                    self.undo_later(id, "take", token);
                }
                let mut suspended: SuspendedInvocation = decoded?;
                if status == "sealed" {
                    // Left in place: another key sealed it, though this one opened it.
                    return Err(SuspensionStoreError::Unavailable(format!(
                        "the waiting call `{id}` was kept by a replica with another encryption key: give every replica the same key"
                    )));
                }
                suspended.expires_at = Some(instant(at));
                Ok(Some(suspended))
            }
            other => Err(unexpected(other)),
        }
    }

    /// The calls among `ids` still waiting, decoded, that match `filter`, in the order of
    /// `ids`, read until `want` of them are found (the last read may add a few more);
    /// those this replica cannot read are left out (and logged). Read in bounded runs of
    /// `fetch.lua` ([`FETCH_IDS`] ids, about [`FETCH_BYTES`]), so that large calls never
    /// make one reply that holds Redis.
    async fn fetch(
        &self,
        ids: &[String],
        filter: &SuspensionFilter,
        want: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        let mut calls = Vec::new();
        let mut rest = ids;
        while !rest.is_empty() && calls.len() < want {
            let run = &rest[..rest.len().min(FETCH_IDS)];
            let (read, found) = self.fetch_run(run, FETCH_BYTES).await?;
            rest = &rest[read.clamp(1, run.len())..];
            self.decode_found(found, filter, &mut calls);
        }
        Ok(calls)
    }

    /// One run of `fetch.lua` over `ids` with `budget` bytes (0: ids and expiries only):
    /// how many of `ids` it read, and the id, value and expiry of those still waiting.
    async fn fetch_run(
        &self,
        ids: &[String],
        budget: usize,
    ) -> Result<(usize, Vec<(String, Vec<u8>, u64)>), SuspensionStoreError> {
        let mut invocation = FETCH.prepare_invoke();
        invocation
            .key(self.key("calls"))
            .arg(&*self.base)
            .arg(budget)
            .arg(ids);
        self.run(&invocation).await
    }

    /// Decodes the calls `fetch.lua` `found`, and adds to `calls` those that match `filter`.
    fn decode_found(
        &self,
        found: Vec<(String, Vec<u8>, u64)>,
        filter: &SuspensionFilter,
        calls: &mut Vec<SuspendedInvocation>,
    ) {
        for (id, value, at) in found {
            // A call this replica cannot read (another key sealed it, during a key change
            // say) is one it cannot decide either: left out, with the reason in the log,
            // rather than failing the listing of every call it can.
            let mut suspended: SuspendedInvocation = match self.decode(&call_place(&id), &value) {
                Ok(suspended) => suspended,
                Err(error) => {
                    tracing::warn!(suspension_id = %id, %error, "a waiting call on Redis is left out of a listing");
                    continue;
                }
            };
            suspended.expires_at = Some(instant(at));
            if filter.matches(&suspended) {
                calls.push(suspended);
            }
        }
    }

    /// Up to `count` ids of the index of every call, after `cursor` (a `ZRANGEBYLEX`
    /// bound).
    async fn ids_after(
        &self,
        cursor: &str,
        count: usize,
    ) -> Result<Vec<String>, SuspensionStoreError> {
        let mut command = redis::cmd("ZRANGEBYLEX");
        command
            .arg(self.key("ids"))
            .arg(cursor)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(count);
        let mut connection = self.link.connection();
        self.link
            .within(command.query_async(&mut connection))
            .await
            .map_err(unavailable)
    }

    /// The ids in the index of the caller written as `caller` ([`caller_key`]), expired
    /// ones not yet removed included, in id order.
    async fn ids_of(&self, caller: &[u8]) -> Result<Vec<String>, SuspensionStoreError> {
        let mut index = self.key("user:").into_bytes();
        index.extend_from_slice(caller);
        let mut command = redis::cmd("ZRANGE");
        command.arg(index).arg(0).arg(-1);
        let mut connection = self.link.connection();
        let mut ids: Vec<String> = self
            .link
            .within(command.query_async(&mut connection))
            .await
            .map_err(unavailable)?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// Runs `keep_outcome.lua` for `outcome`, kept as `keeping` says. The script's status:
    /// `ok`, `present` for a running record not kept, `ended` for an outcome not kept over
    /// another.
    async fn keep_decided(
        &self,
        outcome: DecidedCall,
        keeping: Keeping<'_>,
    ) -> Result<String, SuspensionStoreError> {
        let limits = self.limits();
        let (value, until) = self.outcome_row(&outcome)?;
        let mut invocation = KEEP_OUTCOME.prepare_invoke();
        invocation
            .key(self.key("outcomes"))
            .arg(&*self.base)
            .arg(&outcome.id)
            .arg(value)
            .arg(until)
            .arg(limits.max_total)
            .arg(caller_key(&outcome.user, outcome.tenant.as_deref()))
            .arg(limits.max_per_user);
        match keeping {
            Keeping::Outcome => {}
            Keeping::Running(token) => {
                invocation.arg(token);
            }
            Keeping::OverRunning => {
                invocation.arg("").arg("over_running");
            }
        }
        self.run(&invocation).await
    }
}

impl RedisSuspensions {
    /// `outcome` as its row is written (sealed when there is a key), and until when it is
    /// kept (ms): `expire_after` past its decision.
    fn outcome_row(&self, outcome: &DecidedCall) -> Result<(Vec<u8>, u64), SuspensionStoreError> {
        let place = Place {
            kind: "outcome",
            id: &outcome.id,
        };
        let value = self.encode(&place, outcome)?;
        let until = millis(outcome.decided_at)
            .saturating_add(span_ms(self.limits().expire_after))
            .min(LATEST_MS);
        Ok((value, until))
    }
}

/// How `keep_outcome.lua` keeps a value.
enum Keeping<'a> {
    /// An outcome, over whatever is kept.
    Outcome,
    /// The running record of the decision with this token, over nothing.
    Running(&'a str),
    /// An outcome, over a running record or nothing.
    OverRunning,
}

#[async_trait]
impl SuspensionStore for RedisSuspensions {
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        let limits = self.limits();
        let value = self.encode(&call_place(&suspended.id), &suspended)?;
        let notice = self.encode(&notice_place(&suspended.id), &suspended.without_contents())?;
        let token = self.link.unique_id();
        let given = suspended
            .expires_at
            .map(|at| millis(at).to_string())
            .unwrap_or_default();
        let mut invocation = SAVE.prepare_invoke();
        invocation
            .key(self.key("calls"))
            .arg(&*self.base)
            .arg(&suspended.id)
            .arg(caller_key(
                &suspended.user.id,
                suspended.user.tenant.as_deref(),
            ))
            .arg(value)
            .arg(given)
            .arg(span_ms(limits.expire_after))
            .arg(limits.max_per_user)
            .arg(limits.max_total)
            .arg(span_ms(limits.expire_after))
            .arg(&*self.seal_id)
            .arg(&token)
            .arg(notice)
            .arg(told_within(limits.expire_after))
            .arg(stored_size(&suspended))
            .arg(limits.max_bytes_per_user)
            .arg(limits.max_bytes_total);
        let (status, _expiry): (String, u64) = match self.try_run(&invocation).await {
            Ok(answer) => answer,
            Err(failure) => {
                self.undo_later(&suspended.id, "save", token);
                return Err(unavailable(failure));
            }
        };
        match status.as_str() {
            "ok" => Ok(()),
            "user_full" => Err(SuspensionStoreError::user_full(
                &suspended.user,
                limits.max_per_user,
            )),
            "user_bytes_full" => Err(SuspensionStoreError::UserBytesFull {
                user: suspended.user.id.clone(),
                tenant: suspended.user.tenant.clone(),
                max_bytes: limits.max_bytes_per_user,
            }),
            "full" => Err(SuspensionStoreError::Full {
                max: limits.max_total,
            }),
            "bytes_full" => Err(SuspensionStoreError::BytesFull {
                max_bytes: limits.max_bytes_total,
            }),
            other => Err(unexpected(other)),
        }
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.lookup(id, true, None).await
    }

    /// One script, `lookup.lua` taking the call and keeping the record as
    /// `keep_outcome.lua` keeps one over a running record (`outcome.lua`), marked with
    /// `token`. A take whose answer is lost is undone later with its record (`undo.lua`).
    async fn take_running(
        &self,
        id: &str,
        record: DecidedCall,
        token: &str,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.lookup(id, true, Some((record, token))).await
    }

    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.lookup(id, false, None).await
    }

    /// The owner is kept as the store writes a caller (the user id, or the tenant and the id
    /// for a caller with a tenant: see the crate's `keys` module). One kept by an earlier
    /// version, which wrote the id alone, reads as a caller without a tenant.
    async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
        let mut invocation = EXPIRED_OWNER.prepare_invoke();
        invocation
            .key(self.key("expired"))
            .arg(&*self.base)
            .arg(id)
            .arg(span_ms(self.limits().expire_after));
        let owner: Option<Vec<u8>> = self.run(&invocation).await?;
        Ok(owner.as_deref().and_then(caller_of))
    }

    async fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        let mut listed = Vec::new();
        if limit == 0 {
            return Ok(listed);
        }
        if let (Some(user), Some(tenant)) = (&filter.user, &filter.tenant) {
            // At most `max_per_user` ids (plus expired ones not yet removed): the caller's
            // own index, not a scan of everyone's. A caller with a tenant also reads the
            // index of their id alone, where an earlier version kept their calls; `fetch`
            // leaves out those of other tenants.
            let mut ids = self.ids_of(&caller_key(user, tenant.as_deref())).await?;
            if tenant.is_some() {
                ids.extend(self.ids_of(user.as_bytes()).await?);
                ids.sort_unstable();
                ids.dedup();
            }
            ids.retain(|id| after.is_none_or(|after| id.as_str() > after));
            listed = self.fetch(&ids, filter, limit).await?;
        } else {
            // Every call, or one user id in every tenant: the callers' indexes are per
            // tenant, so the calls are walked in id order and `fetch` filters them, a page
            // of as many ids as are still needed (and a few spare) at a time.
            let mut cursor = after.map_or_else(|| "-".to_owned(), |after| format!("({after}"));
            loop {
                let page = (limit - listed.len()).saturating_add(SPARE).min(PAGE);
                let ids = self.ids_after(&cursor, page).await?;
                listed.extend(self.fetch(&ids, filter, limit - listed.len()).await?);
                match ids.last() {
                    Some(last) if ids.len() == page && listed.len() < limit => {
                        cursor = format!("({last}");
                    }
                    _ => break,
                }
            }
        }
        listed.truncate(limit);
        Ok(listed)
    }

    /// From the index of every call and their expiries, in pages of at most `PAGE` ids:
    /// no stored call is read.
    async fn list_expiries(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Option<SystemTime>)>, SuspensionStoreError> {
        let mut listed = Vec::new();
        let mut cursor = after.map_or_else(|| "-".to_owned(), |after| format!("({after}"));
        while listed.len() < limit {
            let page = (limit - listed.len()).min(PAGE);
            let ids = self.ids_after(&cursor, page).await?;
            if ids.is_empty() {
                break;
            }
            let (_, found) = self.fetch_run(&ids, 0).await?;
            listed.extend(found.into_iter().map(|(id, _, at)| (id, Some(instant(at)))));
            match ids.last() {
                Some(last) if ids.len() == page => cursor = format!("({last}"),
                _ => break,
            }
        }
        Ok(listed)
    }

    /// One script (`claim_expired.lua`) claims the notices `save.lua` left, so that of
    /// every replica asking, one gets each. A notice this replica cannot open (another key
    /// sealed it) is lost: logged, not given back.
    async fn claim_expired(
        &self,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut invocation = CLAIM_EXPIRED.prepare_invoke();
        invocation
            .key(self.key("notices"))
            .arg(&*self.base)
            .arg(limit)
            .arg(told_within(self.limits().expire_after))
            .arg(self.limits().max_total)
            .arg(span_ms(self.limits().expire_after));
        let claimed: Vec<(String, Vec<u8>, u64)> = self.run(&invocation).await?;
        let mut calls = Vec::with_capacity(claimed.len());
        for (id, notice, at) in claimed {
            match self.decode::<SuspendedInvocation>(&notice_place(&id), &notice) {
                Ok(mut call) => {
                    call.expires_at = Some(instant(at));
                    calls.push(call);
                }
                Err(error) => {
                    tracing::warn!(suspension_id = %id, %error, "the expiry of a call on Redis cannot be told");
                }
            }
        }
        Ok(calls)
    }

    async fn keep_retry_approval(
        &self,
        approval: RetryApproval,
    ) -> Result<(), SuspensionStoreError> {
        let limits = self.limits();
        let key = approval.binding.key();
        let place = Place {
            kind: "retry approval",
            id: &key,
        };
        let value = self.encode(&place, &approval)?;
        let id = self.link.unique_id();
        let caller = caller_key(&approval.binding.user, approval.binding.tenant.as_deref());
        let mut invocation = KEEP_RETRY.prepare_invoke();
        invocation
            .key(self.key("retries"))
            .arg(&*self.base)
            .arg(&id)
            .arg(&caller)
            .arg(&key)
            .arg(value)
            .arg(millis(approval.expires_at).min(LATEST_MS))
            .arg(limits.max_per_user)
            .arg(limits.max_total)
            .arg(&*self.seal_id);
        let status: String = match self.try_run(&invocation).await {
            Ok(status) => status,
            Err(failure) => {
                // Told that it failed, the pipeline puts the call back to wait: an
                // approval Redis kept all the same must not let it run a second time.
                self.unkeep_retry_later(&approval.suspension_id, id, caller, key);
                return Err(unavailable(failure));
            }
        };
        match status.as_str() {
            "ok" => Ok(()),
            "user_full" => Err(SuspensionStoreError::UserFull {
                user: approval.binding.user,
                tenant: approval.binding.tenant,
                max: limits.max_per_user,
            }),
            "full" => Err(SuspensionStoreError::Full {
                max: limits.max_total,
            }),
            other => Err(unexpected(other)),
        }
    }

    async fn use_retry_approval(
        &self,
        key: &str,
    ) -> Result<Option<RetryApproval>, SuspensionStoreError> {
        let mut invocation = USE_RETRY.prepare_invoke();
        invocation
            .key(self.key("retries"))
            .arg(&*self.base)
            .arg(key)
            .arg(&*self.seal_id);
        let (status, value): (String, Option<Vec<u8>>) = self.run(&invocation).await?;
        let place = Place {
            kind: "retry approval",
            id: key,
        };
        match status.as_str() {
            "none" => Ok(None),
            "ok" => self.decode(&place, &value.unwrap_or_default()).map(Some),
            "sealed" => {
                // Left in place: decode says why this replica cannot use it.
                self.decode::<RetryApproval>(&place, &value.unwrap_or_default())?;
                Err(SuspensionStoreError::Unavailable(
                    "an approval for a retry was kept by a replica with another encryption key: give every replica the same key".to_owned(),
                ))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Capped per caller as well as in all: a caller's own outcome ids are in an index of
    /// their own (`:outcome_user:<caller>`, by when each was kept), so that a caller at
    /// `max_per_user` loses their own oldest (`keep_outcome.lua`), and each caller's count
    /// in `:outcome_counts` (with who kept each id in `:outcome_owners`), so that past
    /// `max_total` the caller who holds the most loses their own oldest, never a caller who
    /// holds fewer. Reads never use those: outcomes kept by an earlier
    /// version, without them, read and list as before.
    async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
        match self.keep_decided(outcome, Keeping::Outcome).await?.as_str() {
            "ok" => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// One script, `keep_outcome.lua` with the token: it checks that nothing is kept for
    /// the id and keeps the record as an outcome is kept, and marks it with the token and
    /// a digest of what it wrote (`:outcome_run:<id>`, expiring with it). A record whose
    /// answer did not come in time may still be kept later: it says "running" for a call
    /// whose decision failed, until an outcome replaces it or it expires.
    async fn keep_running(
        &self,
        record: DecidedCall,
        token: &str,
    ) -> Result<bool, SuspensionStoreError> {
        match self
            .keep_decided(record, Keeping::Running(token))
            .await?
            .as_str()
        {
            "ok" => Ok(true),
            "present" => Ok(false),
            other => Err(unexpected(other)),
        }
    }

    /// One script, `keep_outcome.lua` over a running record only: the row is replaced when
    /// it is absent or still the one its running mark was written for (its digest), and
    /// left when it is an outcome. A running record kept by an earlier version, which
    /// marks none, reads as an outcome here: its host keeps the end over it as before.
    async fn keep_outcome_over_running(
        &self,
        outcome: DecidedCall,
    ) -> Result<bool, SuspensionStoreError> {
        match self
            .keep_decided(outcome, Keeping::OverRunning)
            .await?
            .as_str()
        {
            "ok" => Ok(true),
            "ended" => Ok(false),
            other => Err(unexpected(other)),
        }
    }

    /// Removes the record only if its mark still names `token` and the row is still the
    /// one the mark was written for (`remove_running.lua`): an outcome kept over it by an
    /// earlier version, which leaves the mark, is not removed.
    async fn remove_running(&self, id: &str, token: &str) -> Result<bool, SuspensionStoreError> {
        let mut invocation = REMOVE_RUNNING.prepare_invoke();
        invocation
            .key(self.key("outcomes"))
            .arg(&*self.base)
            .arg(id)
            .arg(token);
        let status: String = self.run(&invocation).await?;
        match status.as_str() {
            "removed" => Ok(true),
            "no" => Ok(false),
            other => Err(unexpected(other)),
        }
    }

    async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
        let mut command = redis::cmd("GET");
        command.arg(self.key(&format!("outcome:{id}")));
        let mut connection = self.link.connection();
        let value: Option<Vec<u8>> = self
            .link
            .within(command.query_async(&mut connection))
            .await
            .map_err(unavailable)?;
        let place = Place {
            kind: "outcome",
            id,
        };
        value.map(|value| self.decode(&place, &value)).transpose()
    }

    /// The ids of every kept outcome come from its index (at most `max_total` of them,
    /// by expiry), sorted here; the outcomes themselves are read as many as are still
    /// needed (and a few spare) at a time, at most `FETCH_IDS`, and filtered once opened
    /// (who made a call and its tool are sealed). An outcome whose row expired meanwhile
    /// is not listed.
    async fn list_outcomes(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DecidedCall>, SuspensionStoreError> {
        let mut listed = Vec::new();
        if limit == 0 {
            return Ok(listed);
        }
        let mut command = redis::cmd("ZRANGE");
        command.arg(self.key("outcomes")).arg(0).arg(-1);
        let mut connection = self.link.connection();
        let mut ids: Vec<String> = self
            .link
            .within(command.query_async(&mut connection))
            .await
            .map_err(unavailable)?;
        ids.retain(|id| after.is_none_or(|after| id.as_str() > after));
        ids.sort_unstable();
        let mut rest = &ids[..];
        while !rest.is_empty() {
            let wanted = (limit - listed.len()).saturating_add(SPARE).min(FETCH_IDS);
            let (page, more) = rest.split_at(wanted.min(rest.len()));
            rest = more;
            let mut command = redis::cmd("MGET");
            for id in page {
                command.arg(self.key(&format!("outcome:{id}")));
            }
            let values: Vec<Option<Vec<u8>>> = self
                .link
                .within(command.query_async(&mut connection))
                .await
                .map_err(unavailable)?;
            for (id, value) in page.iter().zip(values) {
                let Some(value) = value else { continue };
                let place = Place {
                    kind: "outcome",
                    id,
                };
                // As for waiting calls: one this replica cannot open is left out, logged.
                let decided: DecidedCall = match self.decode(&place, &value) {
                    Ok(decided) => decided,
                    Err(error) => {
                        tracing::warn!(suspension_id = %id, %error, "an outcome on Redis is left out of a listing");
                        continue;
                    }
                };
                if filter.matches_outcome(&decided) {
                    listed.push(decided);
                    if listed.len() == limit {
                        return Ok(listed);
                    }
                }
            }
        }
        Ok(listed)
    }
}
