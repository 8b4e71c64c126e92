//! Who may not read the outcomes of their waiting calls: what `toolgate check` warns of
//! when a caller whose calls wait for approval is not allowed [`OUTCOME_TOOL`].

use toolgate_hooks::consent::ConsentBuilder;

use super::Gateway;
use crate::outcomes::OUTCOME_TOOL;

/// The most users, and tools, a warning names before it counts the rest.
const NAMED_AT_MOST: usize = 5;

/// What `toolgate check` warns of for `gateway`: the users of `users:` who may call a tool
/// that waits for approval but not [`OUTCOME_TOOL`], which is how an MCP caller learns how
/// such a call ended (`tasks/get` runs it, as does asking again with `requestState`). Such
/// a caller is refused every answer about their waiting calls over MCP. `None` without
/// `policies.approval`, or when every such user may read their outcomes. Callers who come
/// with OAuth tokens are not known in advance, and not checked.
pub(crate) fn unreadable_outcomes_warning(gateway: &Gateway) -> Option<String> {
    let approval = gateway.config.policies.approval.as_ref()?;
    let consent = ConsentBuilder::from(approval).build();
    let mut users = Vec::new();
    let mut waiting = std::collections::BTreeSet::new();
    for entry in &gateway.config.users {
        let user = entry.user();
        let tools = gateway.visible_tools(&user);
        if tools.iter().any(|t| t.name == OUTCOME_TOOL) {
            continue;
        }
        let waits: Vec<String> = (tools.into_iter())
            .filter(|t| consent.requires_approval(t))
            .map(|t| t.name)
            .collect();
        if !waits.is_empty() {
            users.push(user.named());
            waiting.extend(waits);
        }
    }
    if users.is_empty() {
        return None;
    }
    let who = if users.len() == 1 { "user" } else { "users" };
    let users = listed(users.into_iter());
    let tools = listed(waiting.into_iter().map(|t| format!("`{t}`")));
    Some(format!(
        "`{OUTCOME_TOOL}` is not allowed to {who} {users}, who may call tools that wait for \
         approval ({tools}): over MCP they are refused every answer about their waiting calls \
         (`tasks/get`, and asking again with `requestState`, run it). Allow it in \
         `policies.authorization`: `- {{ effect: allow, tools: [{OUTCOME_TOOL}] }}` lets every \
         caller read the outcomes of their own calls, and no one else's"
    ))
}

/// `items` joined with commas, the first [`NAMED_AT_MOST`] of them and how many more.
fn listed(items: impl ExactSizeIterator<Item = String>) -> String {
    let more = items.len().saturating_sub(NAMED_AT_MOST);
    let mut text = items.take(NAMED_AT_MOST).collect::<Vec<_>>().join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}
