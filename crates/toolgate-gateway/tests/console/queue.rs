//! The queue, My calls and History in Chromium when they hold many calls, while calls come
//! and go, and with four eyes:
//!
//! - each list says how much of it is shown and shows more on request, following the API's
//!   `next_cursor` (the history, which has no cursor, a larger `limit`);
//! - the refresh every five seconds keeps each card still waiting as it is (a reason being
//!   typed, the focus, its place), adds a call that comes at the end, and marks one that goes
//!   until the approver's next action;
//! - an approver's own call offers no approval when the gateway would refuse it.
//!
//! Nothing waits a fixed time: every wait polls up to [`WAIT`], loose for a loaded machine.

use std::time::Instant;

use serde_json::{Value, json};

use crate::browser::{self, Browser, WAIT};
use crate::common::{Gateway, client, post, user_yaml};
use crate::{park, sign_in};

/// `sleep` waits for an admin (alice or carol); bob may have 200 calls waiting.
fn config(four_eyes: bool) -> String {
    format!(
        "console: {{}}\ntools:\n  builtin: [sleep]\nusers:\n{}{}{}\
policies:\n  approval:\n    tools: [sleep]\n    approver_roles: [admin]\n    expire_after: 1h\n    \
max_pending_per_user: 200\n    four_eyes: {four_eyes}\n",
        user_yaml("alice", &["admin"]),
        user_yaml("carol", &["admin"]),
        user_yaml("bob", &["analyst"]),
    )
}

/// Runs `script` until it returns `true`, up to [`WAIT`].
async fn until(browser: &Browser, script: &str, what: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = browser.run(script, json!([])).await;
        if now == json!(true) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {WAIT:?}: the page says {}",
            browser.page_text().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn count(browser: &Browser, css: &str) -> u64 {
    let script = format!("return document.querySelectorAll('{css}').length");
    browser.run(&script, json!([])).await.as_u64().unwrap_or(0)
}

/// `approver` decides `id` through the API, as another approver's console would.
async fn decide_elsewhere(gateway: &Gateway, approver: &str, id: &str, decision: &str) {
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let body = json!({"decision": decision, "reason": "elsewhere"});
    let answer = post(&client(), &url, Some(approver), &body).await;
    assert!(
        answer.status == 200 || answer.body["error"]["code"] == "rejected",
        "{decision} {id}: {} {}",
        answer.status,
        answer.body
    );
}

#[tokio::test]
async fn each_list_says_how_much_of_it_is_shown_and_shows_more_on_request() {
    if !browser::available("each_list_says_how_much_of_it_is_shown_and_shows_more_on_request") {
        return;
    }
    let gateway = Gateway::start(&config(true));
    let mut ids = Vec::new();
    for ms in 0..150 {
        ids.push(park(&gateway, "bob", ms).await);
    }
    let browser = Browser::start(1280, 900).await;
    sign_in(&browser, &gateway, "alice").await;
    browser
        .wait_text("#queue-count", "100 calls shown; more are waiting.")
        .await;
    assert_eq!(count(&browser, "#queue article").await, 100);
    browser.click("#queue-more").await;
    browser
        .wait_text("#queue-count", "150 calls waiting.")
        .await;
    assert_eq!(count(&browser, "#queue article").await, 150);
    assert!(!browser.any_shown("#queue-more").await, "nothing more");
    // The refresh now reads the 150 shown, not the first 100 only.
    browser.click("[data-refresh=queue]").await;
    browser
        .wait_text("#queue-count", "150 calls waiting.")
        .await;
    assert_eq!(count(&browser, "#queue article").await, 150);

    // 101 decided: the history shows the newest 100, then the rest on request.
    for id in &ids[..101] {
        decide_elsewhere(&gateway, "carol", id, "reject").await;
    }
    browser.click("a[href='#history']").await;
    browser
        .wait_text(
            "#history-count",
            "The newest 100 decisions shown; older ones are kept.",
        )
        .await;
    assert_eq!(count(&browser, "#history tbody tr").await, 100);
    browser.click("#history-more").await;
    browser
        .wait_text("#history-count", "101 decisions, all that are kept.")
        .await;
    assert_eq!(count(&browser, "#history tbody tr").await, 101);

    // Bob's own calls, 100 at a time too.
    for ms in 0..60 {
        park(&gateway, "bob", ms).await;
    }
    browser.click("#sign-out").await;
    browser.wait_text("#status", "Signed out").await;
    sign_in(&browser, &gateway, "bob").await;
    browser
        .wait_text("#mine-count", "100 calls shown; more of yours are waiting.")
        .await;
    assert_eq!(count(&browser, "#mine article").await, 100);
    browser.click("#mine-more").await;
    browser.wait_text("#mine-count", "109 calls waiting.").await;
    assert_eq!(count(&browser, "#mine article").await, 109);
    browser.quit().await;
}

#[tokio::test]
async fn a_reason_being_typed_survives_calls_coming_and_going_and_its_card_does_not_move() {
    if !browser::available("a_reason_being_typed_survives_calls_coming_and_going") {
        return;
    }
    let gateway = Gateway::start(&config(true));
    for ms in 1..=3 {
        park(&gateway, "bob", ms).await;
    }
    let browser = Browser::start(1280, 900).await;
    sign_in(&browser, &gateway, "alice").await;
    browser.wait_text("#queue-count", "3 calls waiting.").await;
    let order = "return [...document.querySelectorAll('#queue article')].map((a) => a.dataset.id)";
    let shown: Vec<String> = serde_json::from_value(browser.run(order, json!([])).await).unwrap();
    let (above, typing) = (&shown[0], &shown[1]);

    // The approver types a reason into the second card; its place on the page is noted.
    let field = format!("article[data-id=\"{typing}\"] input[name=reason]");
    browser.type_into(&field, "checked with the customer").await;
    let noted = browser
        .run(
            "const card = document.querySelector(`article[data-id=\"${arguments[0]}\"]`);\
             window.typedInto = card;\
             return card.getBoundingClientRect().top;",
            json!([typing]),
        )
        .await;

    // Meanwhile another approver decides the card above it, and a call comes.
    decide_elsewhere(&gateway, "carol", above, "approve").await;
    let came = park(&gateway, "bob", 4).await;
    let arrived = format!("return Boolean(document.querySelector('article[data-id=\"{came}\"]'))");
    until(&browser, &arrived, "the call that came is shown").await;
    let kept = browser
        .run(
            "const card = document.querySelector(`article[data-id=\"${arguments[0]}\"]`);\
             const input = card.querySelector('input[name=reason]');\
             const cards = [...document.querySelectorAll('#queue article')];\
             return {same: card === window.typedInto, text: input.value,\
                     focused: document.activeElement === input,\
                     top: card.getBoundingClientRect().top,\
                     last: cards[cards.length - 1].dataset.id};",
            json!([typing]),
        )
        .await;
    assert_eq!(kept["same"], true, "the card was rebuilt: {kept}");
    assert_eq!(kept["text"], "checked with the customer", "{kept}");
    assert_eq!(kept["focused"], true, "the focus was lost: {kept}");
    assert_eq!(kept["top"], noted, "the card moved: {kept}");
    assert_eq!(kept["last"], Value::from(came.clone()), "{kept}");
    // The one that went is marked, where it was, until the approver's next action.
    let note = browser
        .text_of(&format!("article[data-id=\"{above}\"].gone .gone-note"))
        .await;
    assert!(note.contains("No longer waiting"), "{note}");

    // The approver's decision takes the marked card away with their own.
    let card = format!("article[data-id=\"{typing}\"]");
    browser.click(&format!("{card} button.approve")).await;
    browser.wait_text("#status", "Approved sleep for bob").await;
    browser
        .wait_gone(&format!("article[data-id=\"{above}\"]"))
        .await;
    browser.wait_gone(&card).await;
    browser.wait_text("#queue-count", "2 calls waiting.").await;
    browser.quit().await;
}

#[tokio::test]
async fn with_four_eyes_an_approvers_own_waiting_call_offers_no_approval() {
    if !browser::available("with_four_eyes_an_approvers_own_waiting_call_offers_no_approval") {
        return;
    }
    for four_eyes in [true, false] {
        let gateway = Gateway::start(&config(four_eyes));
        let own = park(&gateway, "alice", 1).await;
        let others = park(&gateway, "bob", 2).await;
        let browser = Browser::start(1280, 900).await;
        sign_in(&browser, &gateway, "alice").await;
        browser.wait_text("#queue-count", "2 calls waiting.").await;
        let own_card = format!("article[data-id=\"{own}\"]");
        assert!(
            browser
                .any_shown(&format!("article[data-id=\"{others}\"] button.approve"))
                .await
        );
        if !four_eyes {
            assert!(
                browser
                    .any_shown(&format!("{own_card} button.approve"))
                    .await
            );
            browser.quit().await;
            continue;
        }
        assert!(
            !browser
                .any_shown(&format!("{own_card} button.approve"))
                .await,
            "an approval the gateway would refuse is offered"
        );
        let note = browser.text_of(&format!("{own_card} .own")).await;
        assert!(note.contains("another approver must approve it"), "{note}");
        // Withdrawing it is hers to do.
        browser.click(&format!("{own_card} button.reject")).await;
        browser
            .wait_text("#status", "Rejected sleep for alice")
            .await;
        browser.wait_gone(&own_card).await;
        browser.quit().await;
    }
}
