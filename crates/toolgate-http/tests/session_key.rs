//! `session_key`: one session per caller and id, in bounded memory.

use toolgate_core::{Pipeline, User};
use toolgate_http::session_key;

#[test]
fn a_session_key_stays_short_and_distinct_per_caller_whatever_the_id() {
    let ann = User::new("ann").with_tenant("acme");
    let ann_elsewhere = User::new("ann").with_tenant("globex");
    let long = "x".repeat(1 << 20);

    let key = session_key(&ann, &long);
    assert!(key.len() <= 128, "{} bytes", key.len());
    assert_eq!(key, session_key(&ann, &long));
    assert_ne!(key, session_key(&ann_elsewhere, &long));
    assert_ne!(key, session_key(&ann, &format!("{long}!")));

    // The key is the id the pipeline keeps: a host seeding it finds it as given.
    let pipeline = Pipeline::builder().build().unwrap();
    assert_eq!(pipeline.session(&key).id(), key);
}
