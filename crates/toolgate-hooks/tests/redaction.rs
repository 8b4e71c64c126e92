//! Redaction: detectors against a labelled sample set, modes, paths, and the pipeline.

mod common;

use serde_json::json;
use toolgate_core::{InvokeOptions, Pipeline, ToolError};
use toolgate_hooks::redaction::{Detector, Redaction, RedactionMode};

/// (detector, text, whether the detector must find something in it).
const SAMPLES: &[(&str, &str, bool)] = &[
    // emails
    ("email", "write to ann.lee+tools@example.co.uk today", true),
    ("email", "ANN@EXAMPLE.COM", true),
    ("email", "user@localhost", false),
    ("email", "follow @handle on the site", false),
    ("email", "ann at example dot com", false),
    ("email", "a@b.c", false),
    // phones
    ("phone", "call +14155552671", true),
    ("phone", "call +1 415-555-2671 now", true),
    ("phone", "(555) 123-4567", true),
    ("phone", "020 7946 0958", true),
    ("phone", "released on 2024-01-15", false),
    ("phone", "version 10.4.1", false),
    ("phone", "host 10.100.200.300 is down", false),
    ("phone", "order 12345", false),
    ("phone", "card 4111 1111 1111 1112", false),
    // cards (Luhn)
    ("card", "4111 1111 1111 1111", true),
    ("card", "5500-0000-0000-0004", true),
    ("card", "paid with 378282246310005.", true),
    ("card", "4111 1111 1111 1112", false),
    ("card", "tracking 1234567890123456", false),
    ("card", "only 4111 1111", false),
    // IBANs (mod 97)
    ("iban", "DE89 3704 0044 0532 0130 00", true),
    ("iban", "pay GB82WEST12345698765432 now", true),
    ("iban", "DE89 3704 0044 0532 0130 01", false),
    ("iban", "GB82 WEST", false),
    // AWS access key ids
    ("aws_access_key", "AKIAIOSFODNN7EXAMPLE", true),
    ("aws_access_key", "key=ASIAY34FZKBOKMUTVV7A;", true),
    ("aws_access_key", "AKIAIOSFODNN7EXAMPL", false),
    ("aws_access_key", "akiaiosfodnn7example", false),
    // bearer tokens
    (
        "bearer_token",
        "Authorization: Bearer abcdef0123456789ABCDEF",
        true,
    ),
    ("bearer_token", "bearer mF_9.B5f-4.1JqM", true),
    ("bearer_token", "the bearer of bad news", false),
    ("bearer_token", "Bearer short", false),
    ("bearer_token", "use Bearer authentication", false),
    ("bearer_token", "the bearer instructions are clear", false),
    // JWTs
    (
        "jwt",
        "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        true,
    ),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9 alone", false),
    ("jwt", "file.name.with.dots", false),
    // private keys
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        true,
    ),
    (
        "private_key",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq (cut off)",
        true,
    ),
    (
        "private_key",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
        false,
    ),
];

fn detector(name: &str) -> Detector {
    Detector::builtins()
        .into_iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("no built-in detector {name}"))
}

#[test]
fn every_detector_finds_its_positives_and_ignores_look_alikes() {
    let mut wrong = Vec::new();
    for (name, text, expected) in SAMPLES {
        let found = !detector(name).find(text).is_empty();
        if found != *expected {
            wrong.push(format!(
                "{name}: {text:?} should {}be found",
                if *expected { "" } else { "not " }
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn ordinary_text_passes_every_detector_untouched() {
    let text = "Meeting at 10:30 on 2024-03-05 in room 42; budget 1,250.00 EUR; v2.3.1; see docs/README.md";
    let redaction = Redaction::new();
    let mut value = json!({ "text": text });
    let findings = redaction.redactor().redact_value(&mut value).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!(value["text"], text);
}

#[test]
fn each_mode_replaces_as_documented() {
    let text = "card 4111 1111 1111 1111";
    let run = |mode: RedactionMode| {
        let r = Redaction::builder().mode(mode).build();
        let mut v = json!(text);
        r.redactor().redact_value(&mut v).map(|_| v)
    };
    assert_eq!(
        run(RedactionMode::Redact).unwrap(),
        json!("card [REDACTED:card]")
    );
    assert_eq!(
        run(RedactionMode::Mask).unwrap(),
        json!("card ***************1111")
    );
    let hashed = run(RedactionMode::Hash { salt: "s".into() }).unwrap();
    assert!(
        hashed.as_str().unwrap().starts_with("card [card:"),
        "{hashed}"
    );
    assert_eq!(
        hashed,
        run(RedactionMode::Hash { salt: "s".into() }).unwrap(),
        "hashing is stable"
    );
    assert_ne!(
        hashed,
        run(RedactionMode::Hash { salt: "t".into() }).unwrap(),
        "the salt matters"
    );
    assert!(run(RedactionMode::Block).is_err());
}

#[test]
fn json_paths_redact_whole_values_and_user_patterns_apply() {
    let r = Redaction::builder()
        .path("patients[*].ssn")
        .path("meta.internal")
        .detect(Detector::pattern("ticket", r"\bTCK-\d{6}\b").unwrap())
        .build();
    let mut v = json!({
        "patients": [{ "ssn": "078-05-1120", "name": "A" }, { "ssn": 123456789 }],
        "meta": { "internal": { "nested": true } },
        "note": "see TCK-000042"
    });
    let findings = r.redactor().redact_value(&mut v).unwrap();
    assert_eq!(
        v,
        json!({
            "patients": [{ "ssn": "[REDACTED:path]", "name": "A" }, { "ssn": "[REDACTED:path]" }],
            "meta": { "internal": "[REDACTED:path]" },
            "note": "see [REDACTED:ticket]"
        })
    );
    assert_eq!(findings.get("path"), Some(&3));
    assert_eq!(findings.get("ticket"), Some(&1));
}

#[test]
fn an_invalid_user_pattern_is_a_typed_error() {
    let err = Detector::pattern("bad", "(unclosed").unwrap_err();
    assert!(err.to_string().contains("redaction pattern `bad`"), "{err}");
}

#[tokio::test]
async fn input_and_output_are_redacted_in_the_pipeline_and_counted_in_metadata() {
    let (audit, sink) = common::memory_audit();
    let p = Pipeline::builder()
        .tool(common::read_only("lookup", |input| {
            // The tool sees the redacted input, and leaks a card of its own.
            Ok(json!({ "seen": input["q"], "card": "4111 1111 1111 1111" }))
        }))
        .hook(Redaction::new())
        .hook(audit)
        .build()
        .unwrap();
    let out = p
        .invoke(
            "lookup",
            json!({ "q": "who is ann@example.com?" }),
            InvokeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        json!({ "seen": "who is [REDACTED:email]?", "card": "[REDACTED:card]" })
    );
    let record = common::only_record(&sink);
    assert_eq!(
        record.metadata["redactions"],
        json!({ "input": { "email": 1 }, "output": { "card": 1 } })
    );
}

#[tokio::test]
async fn block_mode_refuses_the_call_naming_the_detector_and_the_path() {
    let p = Pipeline::builder()
        .tool(common::read_only("lookup", |_| Ok(json!("never"))))
        .hook(
            Redaction::builder()
                .mode_for("private_key", RedactionMode::Block)
                .build(),
        )
        .build()
        .unwrap();
    let input = json!({ "files": ["-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----"] });
    let err = p
        .invoke("lookup", input, InvokeOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Aborted { .. }));
    assert_eq!((err.code(), err.status()), ("sensitive_data", 422));
    assert!(
        err.to_string().contains("private_key") && err.to_string().contains("`files[0]`"),
        "{err}"
    );
    assert!(!err.to_string().contains("abc"));
}

#[test]
fn object_keys_are_redacted_and_keys_that_collide_keep_their_values() {
    let r = Redaction::new();
    let mut v = json!({
        "ann@example.com": 3,
        "bob@example.com": { "note": "call +44 20 7946 0958" },
        "plain": "x",
    });
    let findings = r.redactor().redact_value(&mut v).unwrap();
    assert_eq!(
        v,
        json!({
            "[REDACTED:email]": 3,
            "[REDACTED:email] (2)": { "note": "call [REDACTED:phone]" },
            "plain": "x",
        })
    );
    assert_eq!(findings.get("email"), Some(&2));
    assert!(r.redactor().may_redact(&json!({ "ann@example.com": 1 })));
}

#[test]
fn a_blocking_detector_refuses_a_key_too_and_names_where() {
    let r = Redaction::builder()
        .mode_for("email", RedactionMode::Block)
        .build();
    let mut v = json!({ "to": { "ann@example.com": true } });
    let blocked = r.redactor().redact_value(&mut v).unwrap_err();
    assert_eq!(
        (blocked.detector.as_str(), blocked.path.as_str()),
        ("email", "to")
    );
}

#[tokio::test]
async fn a_refused_call_is_audited_with_its_input_redacted_by_the_same_rules() {
    use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};
    use toolgate_hooks::audit::{Audit, MemorySink};
    use toolgate_hooks::fingerprint::KeyedFingerprint;

    /// Refuses every call at `will_authorize`, before the input is redacted, quoting it.
    struct Refuse;
    #[hook]
    impl Hook for Refuse {
        fn name(&self) -> &str {
            "refuse"
        }
        fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
            let quoted = ctx.input()["q"].as_str().unwrap_or_default().to_owned();
            ctx.abort(format!("no lookups of {quoted}"), "forbidden", 403)
        }
    }

    let redaction = Redaction::builder()
        .mode_for("card", RedactionMode::Block)
        .build();
    let sink = MemorySink::new();
    let audit = Audit::builder()
        .sink(sink.clone())
        .include_values(true)
        .hash_key(common::AUDIT_KEY)
        .redact_with(redaction.redactor())
        .build();
    let p = Pipeline::builder()
        .tool(common::read_only("lookup", |_| Ok(json!("never"))))
        .hook(Refuse)
        .hook(redaction)
        .hook(audit)
        .build()
        .unwrap();

    let raw = json!({ "q": "ann@example.com paid 4111 1111 1111 1111", "ann@example.com": 1 });
    let err = p
        .invoke("lookup", raw.clone(), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    assert!(
        err.to_string().contains("ann@example.com"),
        "the caller's own answer is untouched: {err}"
    );

    let record = common::only_record(&sink);
    let redacted = json!({
        "q": "[REDACTED:email] paid [REDACTED:card]",
        "[REDACTED:email]": 1,
    });
    assert_eq!(record.input.as_ref(), Some(&redacted));
    assert_eq!(
        record.input_hash,
        KeyedFingerprint::new(common::AUDIT_KEY).of(&redacted),
        "the fingerprint is of the redacted input"
    );
    assert_eq!(
        record.error.as_deref(),
        Some("no lookups of [REDACTED:email] paid [REDACTED:card]")
    );
    let line = serde_json::to_string(&record).unwrap();
    assert!(!line.contains("ann@") && !line.contains("4111"), "{line}");
}

#[tokio::test]
async fn an_input_redacted_by_the_pipeline_is_not_redacted_twice_in_the_record() {
    use toolgate_hooks::audit::{Audit, MemorySink};

    // Hash mode is not idempotent: hashing a hash would change the recorded value.
    let redaction = Redaction::builder()
        .mode(RedactionMode::Hash { salt: "s".into() })
        .build();
    let sink = MemorySink::new();
    let audit = Audit::builder()
        .sink(sink.clone())
        .include_values(true)
        .redact_with(redaction.redactor())
        .build();
    let p = Pipeline::builder()
        .tool(common::read_only("lookup", |input| Ok(input["q"].clone())))
        .hook(redaction)
        .hook(audit)
        .build()
        .unwrap();
    let out = p
        .invoke(
            "lookup",
            json!({ "q": "ann@example.com" }),
            InvokeOptions::new(),
        )
        .await
        .unwrap();
    let record = common::only_record(&sink);
    assert_eq!(record.input.as_ref(), Some(&json!({ "q": out.clone() })));
    assert_eq!(record.output.as_ref(), Some(&out));
}

#[test]
fn the_text_of_mcp_content_is_redacted_and_binary_payloads_are_left_whole() {
    // Base64 that happens to hold a phone-like run of digits between `/` and `+`.
    let image = "iVBORw0KGgo/020 7946 0958+AAAA";
    let mut output = json!({
        "content": [
            { "type": "text", "text": "call ann@example.com" },
            { "type": "image", "data": image, "mimeType": "image/png" },
            { "type": "resource", "resource": { "uri": "test://b", "blob": image, "mimeType": "application/octet-stream" } },
            { "type": "resource", "resource": { "uri": "test://t", "text": "ann@example.com" } },
        ]
    });
    let redactor = Redaction::new();
    let mut as_text = json!(image);
    redactor.redactor().redact_value(&mut as_text).unwrap();
    assert_ne!(
        as_text,
        json!(image),
        "read as text, the payload would be changed"
    );
    redactor.redactor().redact_value(&mut output).unwrap();
    assert_eq!(output["content"][0]["text"], "call [REDACTED:email]");
    assert_eq!(output["content"][1]["data"], image);
    assert_eq!(output["content"][2]["resource"]["blob"], image);
    assert_eq!(output["content"][3]["resource"]["text"], "[REDACTED:email]");
}
