//! The decided history: the last decisions on waiting calls, newest first, for
//! `GET /v1/admin/decisions` and the console. Bounded per tenant, so that one tenant's
//! approvers deciding call after call never push another tenant's decisions out: the last
//! [`MAX_DECISIONS`] of each tenant (and of the calls of no tenant), at most
//! [`MAX_TENANTS`] tenants apart, the decisions of any further tenant sharing one more list
//! of [`MAX_DECISIONS`]. Tenants come from the configuration and from identity tokens
//! (`identity.oauth.tenant_claim`, any name the issuer signs), so their number is not
//! known: a tenant keeps its place while it has decisions kept, and gives it up
//! [`KEEP`] after its newest.
//!
//! It is kept where the policies keep their state: in this process, where a restart
//! forgets it, or on Redis, where every replica records into one history and reads it.
//! The audit trail is the lasting record.
//!
//! # On Redis, beside an earlier version
//!
//! Earlier versions kept one list for every tenant (`<prefix>:history:decisions`). This
//! version records into new keys (`<prefix>:{<prefix>:history:decisions_by_tenant}:…`)
//! and never into that list, but reads it beside them: during a rolling upgrade the
//! replicas of this version show every decision; those of the earlier one show the
//! decisions made through replicas of their version only. Once no replica of the earlier
//! version is left, the old list expires [`KEEP`] after its newest decision.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use toolgate_redis::{RedisHistory, RedisPartedHistory};

/// The most decisions kept per tenant, for the calls of no tenant, and for the tenants
/// past [`MAX_TENANTS`] together.
pub const MAX_DECISIONS: usize = 500;

/// The most tenants whose decisions are kept apart: at most
/// `(MAX_TENANTS + 2) × MAX_DECISIONS` decisions are kept in all.
pub const MAX_TENANTS: usize = 64;

/// How long a tenant's decisions are kept after its newest (and the tenant its place).
pub const KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long the history on Redis is kept after its newest decision.
pub const KEEP_ON_REDIS: Duration = KEEP;

/// One decision on a waiting call.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Decided {
    /// The suspension id.
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Who made the call.
    pub user: String,
    /// The tenant of who made the call, if any: an approver of one tenant is shown that
    /// tenant's decisions only. (Decisions kept by an earlier version read as of no
    /// tenant.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Who decided.
    pub decided_by: String,
    /// The tenant of who decided, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by_tenant: Option<String>,
    /// `approve`, `reject`, `complete` or `approve_retry`.
    pub decision: String,
    /// The reason the approver gave, if any.
    pub reason: Option<String>,
    /// When (RFC 3339).
    pub decided_at: String,
    /// How the call ended: `success`, `error` or `approved_for_retry`.
    pub outcome: String,
}

/// The history is kept on Redis, which did not answer in time.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the decided history is kept on Redis, which does not answer: try again in a moment")]
pub struct HistoryUnavailable;

/// Whose decisions are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Viewer<'a> {
    /// Every tenant's, and those on calls of no tenant: an approver without a tenant.
    Everyone,
    /// One tenant's: an approver of that tenant.
    Tenant(&'a str),
}

/// The last decisions, newest first: in this process, or on Redis.
#[derive(Debug)]
pub enum DecisionHistory {
    /// In this process.
    Memory(Mutex<Kept>),
    /// On Redis, shared by every replica.
    Redis(Box<OnRedis>),
}

/// The lists of the decided history on Redis.
#[derive(Debug)]
pub struct OnRedis {
    /// The decisions on calls of a tenant, per tenant.
    pub tenants: RedisPartedHistory,
    /// The decisions on calls of no tenant.
    pub untenanted: RedisHistory,
    /// The one list of every tenant an earlier version kept, read until it expires.
    pub earlier: RedisHistory,
}

/// The decisions kept in this process.
#[derive(Debug, Default)]
pub struct Kept {
    untenanted: VecDeque<Decided>,
    tenants: HashMap<String, (Instant, VecDeque<Decided>)>,
    other_tenants: VecDeque<Decided>,
}

impl Kept {
    fn list_for(&mut self, tenant: Option<&str>) -> &mut VecDeque<Decided> {
        let Some(tenant) = tenant else {
            return &mut self.untenanted;
        };
        let now = Instant::now();
        if !self.tenants.contains_key(tenant) && self.tenants.len() >= MAX_TENANTS {
            self.tenants
                .retain(|_, (newest, _)| now.duration_since(*newest) < KEEP);
            if self.tenants.len() >= MAX_TENANTS {
                return &mut self.other_tenants;
            }
        }
        let (newest, list) = self
            .tenants
            .entry(tenant.to_owned())
            .or_insert_with(|| (now, VecDeque::new()));
        *newest = now;
        list
    }

    /// Every list that may hold `viewer`'s decisions.
    fn lists(&self, viewer: Viewer<'_>) -> Vec<&VecDeque<Decided>> {
        match viewer {
            Viewer::Tenant(tenant) => (self.tenants.get(tenant).map(|(_, list)| list))
                .into_iter()
                .chain([&self.other_tenants])
                .collect(),
            Viewer::Everyone => (self.tenants.values().map(|(_, list)| list))
                .chain([&self.untenanted, &self.other_tenants])
                .collect(),
        }
    }

    /// How many decisions are kept in all.
    #[cfg(test)]
    fn len(&self) -> usize {
        let tenants: usize = self.tenants.values().map(|(_, list)| list.len()).sum();
        tenants + self.untenanted.len() + self.other_tenants.len()
    }
}

impl Default for DecisionHistory {
    fn default() -> Self {
        DecisionHistory::Memory(Mutex::default())
    }
}

impl DecisionHistory {
    /// Keeps `decided`, forgetting the oldest of its tenant's past [`MAX_DECISIONS`]. The
    /// decision stands whether or not it can be kept: when Redis does not answer, that is
    /// logged.
    pub async fn record(&self, decided: Decided) {
        match self {
            DecisionHistory::Memory(kept) => {
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                let list = kept.list_for(decided.tenant.as_deref());
                list.push_front(decided);
                list.truncate(MAX_DECISIONS);
            }
            DecisionHistory::Redis(redis) => {
                let OnRedis {
                    tenants,
                    untenanted,
                    ..
                } = &**redis;
                let entry = serde_json::to_string(&decided).unwrap_or_default();
                let kept = match &decided.tenant {
                    Some(tenant) => tenants.record(tenant, &entry).await.map(|_| ()),
                    None => untenanted.record(&entry).await,
                };
                if let Err(error) = kept {
                    tracing::warn!(target: "toolgate::console", %error, id = %decided.id, "a decision was not added to the decided history");
                }
            }
        }
    }

    /// The newest `limit` decisions that `viewer` may see (an entry on Redis this gateway
    /// cannot read is left out).
    ///
    /// # Errors
    ///
    /// [`HistoryUnavailable`] when the history is on Redis and Redis does not answer.
    pub async fn newest(
        &self,
        viewer: Viewer<'_>,
        limit: usize,
    ) -> Result<Vec<Decided>, HistoryUnavailable> {
        // A list shared with other tenants (and the earlier version's) is read whole for
        // one tenant: its newest `limit` may be others' decisions.
        let read = match viewer {
            Viewer::Everyone => limit,
            Viewer::Tenant(_) => MAX_DECISIONS,
        };
        let lists = match self {
            DecisionHistory::Memory(kept) => {
                let kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                let lists = kept.lists(viewer).into_iter();
                lists
                    .map(|list| list.iter().take(read).cloned().collect())
                    .collect()
            }
            DecisionHistory::Redis(redis) => {
                let OnRedis {
                    tenants,
                    untenanted,
                    earlier,
                } = &**redis;
                let unavailable = |error| {
                    tracing::warn!(target: "toolgate::console", %error, "the decided history cannot be read");
                    HistoryUnavailable
                };
                let mut stored = match viewer {
                    Viewer::Tenant(tenant) => tenants.newest(Some(tenant), read).await,
                    Viewer::Everyone => tenants.newest(None, read).await,
                }
                .map_err(unavailable)?;
                if viewer == Viewer::Everyone {
                    stored.push(untenanted.newest(read).await.map_err(unavailable)?);
                }
                stored.push(earlier.newest(read).await.map_err(unavailable)?);
                stored
                    .iter()
                    .map(|list| {
                        list.iter()
                            .filter_map(|entry| serde_json::from_str(entry).ok())
                            .collect()
                    })
                    .collect()
            }
        };
        Ok(newest_of(lists, viewer, limit))
    }
}

/// The newest `limit` of `lists` (each newest first) that are `viewer`'s: a shared list
/// holds other tenants' decisions too.
fn newest_of(lists: Vec<Vec<Decided>>, viewer: Viewer<'_>, limit: usize) -> Vec<Decided> {
    let mut all: Vec<Decided> = lists
        .into_iter()
        .flatten()
        .filter(|decided| match viewer {
            Viewer::Everyone => true,
            Viewer::Tenant(tenant) => decided.tenant.as_deref() == Some(tenant),
        })
        .collect();
    // RFC 3339 in seconds, all in UTC: the text sorts as the time does; the sort is
    // stable, so decisions of one second keep their list's order.
    all.sort_by(|a, b| b.decided_at.cmp(&a.decided_at));
    all.truncate(limit);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(id: usize) -> Decided {
        decided_in(None, &id.to_string())
    }

    fn decided_in(tenant: Option<&str>, id: &str) -> Decided {
        Decided {
            id: id.to_owned(),
            tool: "sleep".into(),
            user: "bob".into(),
            tenant: tenant.map(str::to_owned),
            decided_by: "alice".into(),
            decided_by_tenant: tenant.map(str::to_owned),
            decision: "approve".into(),
            reason: None,
            decided_at: "2026-11-28T08:00:00Z".into(),
            outcome: "success".into(),
        }
    }

    #[tokio::test]
    async fn the_newest_decisions_come_first_and_the_oldest_are_forgotten() {
        let history = DecisionHistory::default();
        for i in 0..MAX_DECISIONS + 3 {
            history.record(decided(i)).await;
        }
        let newest = history.newest(Viewer::Everyone, usize::MAX).await.unwrap();
        assert_eq!(newest.len(), MAX_DECISIONS);
        assert_eq!(newest[0].id, (MAX_DECISIONS + 2).to_string());
        assert_eq!(newest.last().unwrap().id, "3");
        assert_eq!(history.newest(Viewer::Everyone, 2).await.unwrap().len(), 2);
    }

    /// acme's three decisions, then a flood from globex and from more tenants than are
    /// kept apart; what acme's approvers and an approver of every tenant read after it.
    async fn flood(history: &DecisionHistory) -> (Vec<Decided>, Vec<Decided>) {
        for n in 0..3 {
            let mut acme = decided_in(Some("acme"), &format!("acme-{n}"));
            acme.decided_at = "2026-11-28T07:00:00Z".into();
            history.record(acme).await;
        }
        for n in 0..2 * MAX_DECISIONS {
            history
                .record(decided_in(Some("globex"), &format!("globex-{n}")))
                .await;
        }
        for n in 0..MAX_TENANTS + 40 {
            let tenant = format!("t{n}");
            for k in 0..3 {
                history
                    .record(decided_in(Some(&tenant), &format!("{tenant}-{k}")))
                    .await;
            }
        }
        let acme = history
            .newest(Viewer::Tenant("acme"), MAX_DECISIONS)
            .await
            .unwrap();
        let everyone = history
            .newest(Viewer::Everyone, MAX_DECISIONS)
            .await
            .unwrap();
        (acme, everyone)
    }

    fn assert_acme_kept(acme: &[Decided]) {
        let ids: Vec<_> = acme.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["acme-2", "acme-1", "acme-0"], "acme's history");
    }

    #[tokio::test]
    async fn a_tenants_flood_of_decisions_leaves_another_tenants_in_its_history() {
        let history = DecisionHistory::default();
        let (acme, everyone) = flood(&history).await;
        assert_acme_kept(&acme);
        assert_eq!(everyone.len(), MAX_DECISIONS);
        let DecisionHistory::Memory(kept) = &history else {
            unreachable!()
        };
        let kept = kept.lock().unwrap();
        assert_eq!(kept.tenants.len(), MAX_TENANTS, "tenants kept apart");
        assert!(
            kept.len() <= (MAX_TENANTS + 2) * MAX_DECISIONS,
            "{}",
            kept.len()
        );
        // The tenants past the bound share one list; globex kept its last 500.
        assert_eq!(kept.tenants["globex"].1.len(), MAX_DECISIONS);
        // acme and globex took two places: 42 of the flooding tenants are past the bound.
        assert_eq!(kept.other_tenants.len(), 42 * 3);
    }

    /// A history on the Redis of `REDIS_URL` (or 127.0.0.1:6379), under a prefix of the
    /// test's own whose keys expire within a minute; `None` (said on stderr) without Redis
    /// outside CI.
    async fn on_redis_or_skip(test: &str) -> Option<DecisionHistory> {
        let redis = super::super::test_redis::redis_or_skip(test, "tghist").await?;
        let keep = Duration::from_secs(60);
        Some(DecisionHistory::Redis(Box::new(OnRedis {
            tenants: redis.parted_history("decisions_by_tenant", MAX_DECISIONS, MAX_TENANTS, keep),
            untenanted: redis.history("decisions_of_no_tenant", MAX_DECISIONS, keep),
            earlier: redis.history("decisions", MAX_DECISIONS, keep),
        })))
    }

    #[tokio::test]
    async fn on_redis_a_tenants_flood_of_decisions_leaves_another_tenants_in_its_history() {
        let test = "on_redis_a_tenants_flood_of_decisions_leaves_another_tenants_in_its_history";
        let Some(history) = on_redis_or_skip(test).await else {
            return;
        };
        let (acme, everyone) = flood(&history).await;
        assert_acme_kept(&acme);
        assert_eq!(everyone.len(), MAX_DECISIONS);
        let DecisionHistory::Redis(redis) = &history else {
            unreachable!()
        };
        let lists = redis.tenants.newest(None, usize::MAX).await.unwrap();
        assert_eq!(
            lists.len(),
            MAX_TENANTS + 1,
            "the tenants apart, and the others"
        );
        assert!(lists.iter().all(|list| list.len() <= MAX_DECISIONS));
        assert_eq!(
            lists.last().unwrap().len(),
            42 * 3,
            "the tenants past the bound"
        );
    }

    #[tokio::test]
    async fn on_redis_the_list_an_earlier_version_keeps_is_read_beside_the_new_ones() {
        let test = "on_redis_the_list_an_earlier_version_keeps_is_read_beside_the_new_ones";
        let Some(history) = on_redis_or_skip(test).await else {
            return;
        };
        let DecisionHistory::Redis(redis) = &history else {
            unreachable!()
        };
        // As a replica of the earlier version keeps them: one list for every tenant.
        for (tenant, id) in [(Some("acme"), "old-acme"), (Some("globex"), "old-globex")] {
            let mut old = decided_in(tenant, id);
            old.decided_at = "2026-11-28T07:00:00Z".into();
            redis
                .earlier
                .record(&serde_json::to_string(&old).unwrap())
                .await
                .unwrap();
        }
        history.record(decided_in(Some("acme"), "new-acme")).await;
        history.record(decided_in(None, "new-none")).await;
        let ids = |decisions: Vec<Decided>| decisions.into_iter().map(|d| d.id).collect::<Vec<_>>();
        let acme = history.newest(Viewer::Tenant("acme"), 50).await.unwrap();
        assert_eq!(ids(acme), ["new-acme", "old-acme"]);
        let everyone = history.newest(Viewer::Everyone, 50).await.unwrap();
        assert_eq!(everyone.len(), 4, "{everyone:?}");
        assert_eq!(ids(everyone)[2..], ["old-globex", "old-acme"]);
    }
}
