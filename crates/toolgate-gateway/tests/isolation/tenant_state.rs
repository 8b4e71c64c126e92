//! What the gateway keeps per caller is kept per user id *in its tenant*: `ann` of `acme`,
//! `ann` of `globex` and `ann` of no tenant are three callers to the result cache and to
//! the rate limits and budgets partitioned by user, in memory and on Redis.

use serde_json::{Value, json};
use toolgate_gateway::auth::hash_key;

use crate::common::{
    Answer, Gateway, invoke, key, random_u32, redis_or_skip, redis_remove_keys_under, user_yaml,
};

/// A `users:` entry of `ann` in `tenant`, with the key of `key_name`.
fn ann_of(tenant: &str, key_name: &str) -> String {
    format!(
        "  - {{ id: ann, tenant: {tenant}, key_sha256: \"{}\", roles: [admin] }}\n",
        hash_key(&key(key_name))
    )
}

/// `ann` of acme (key `ann_acme`), of globex (`ann_globex`) and of no tenant (`ann`).
fn three_anns() -> String {
    format!(
        "users:\n{}{}{}",
        ann_of("acme", "ann_acme"),
        ann_of("globex", "ann_globex"),
        user_yaml("ann", &["admin"]),
    )
}

/// The `state:` section for `redis` (none: in memory), and the key prefix to remove after.
fn state(redis: Option<&str>) -> (String, Option<(String, String)>) {
    let Some(url) = redis else {
        return (String::new(), None);
    };
    let prefix = format!("tgtenants{}x{:x}", std::process::id(), random_u32());
    let section = format!("state:\n  url: {url}\n  key_prefix: {prefix}\n");
    (section, Some((url.to_owned(), prefix)))
}

fn cache_of(answer: &Answer) -> Value {
    answer.body["metadata"]["cache"].clone()
}

async fn a_result_cached_for_ann_of_acme_is_hers_alone(redis: Option<&str>) {
    let (state, cleanup) = state(redis);
    let config = format!(
        "{state}tools:\n  builtin: [echo]\n{}policies:\n  cache:\n    tools: {{ echo: 5m }}\n",
        three_anns()
    );
    let gateway = Gateway::start(&config);
    let input = json!({"text": "acme's plan"});
    let mut seen = Vec::new();
    for caller in ["ann_acme", "ann_globex", "ann", "ann_acme"] {
        let answer = invoke(&gateway, caller, "echo", input.clone()).await;
        assert_eq!(answer.status, 200, "{caller}: {}", answer.body);
        seen.push(cache_of(&answer));
    }
    if let Some((url, prefix)) = cleanup {
        redis_remove_keys_under(&url, &prefix);
    }
    assert_eq!(seen, ["miss", "miss", "miss", "hit"]);
}

#[tokio::test]
async fn a_result_cached_for_ann_of_acme_is_not_served_to_another_ann_in_memory() {
    a_result_cached_for_ann_of_acme_is_hers_alone(None).await;
}

#[tokio::test]
async fn a_result_cached_for_ann_of_acme_is_not_served_to_another_ann_on_redis() {
    let test = "a_result_cached_for_ann_of_acme_is_not_served_to_another_ann_on_redis";
    let Some(redis) = redis_or_skip(test) else {
        return;
    };
    a_result_cached_for_ann_of_acme_is_hers_alone(Some(&redis)).await;
}

async fn ann_of_acme_spends_her_own_limits(redis: Option<&str>) {
    let (state, cleanup) = state(redis);
    let config = format!(
        "{state}tools:\n  builtin: [echo]\n{}policies:\n  rate_limits:\n    - {{ name: per-user, rate: 1/hour, partition: user }}\n  budgets:\n    - {{ name: daily, limit: 2, window: 1d, partition: user, cost: 1 }}\n",
        three_anns()
    );
    let gateway = Gateway::start(&config);
    let mut seen = Vec::new();
    for caller in ["ann_acme", "ann_acme", "ann_globex", "ann"] {
        let answer = invoke(&gateway, caller, "echo", json!({"text": "hi"})).await;
        seen.push(answer.status);
    }
    if let Some((url, prefix)) = cleanup {
        redis_remove_keys_under(&url, &prefix);
    }
    assert_eq!(
        seen,
        [200, 429, 200, 200],
        "acme's second call only is limited"
    );
}

#[tokio::test]
async fn ann_of_acme_exhausts_her_own_limit_not_another_anns_in_memory() {
    ann_of_acme_spends_her_own_limits(None).await;
}

#[tokio::test]
async fn ann_of_acme_exhausts_her_own_limit_not_another_anns_on_redis() {
    let test = "ann_of_acme_exhausts_her_own_limit_not_another_anns_on_redis";
    let Some(redis) = redis_or_skip(test) else {
        return;
    };
    ann_of_acme_spends_her_own_limits(Some(&redis)).await;
}
