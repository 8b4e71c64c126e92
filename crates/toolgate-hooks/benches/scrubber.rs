//! What searching a tool's output for secrets costs: `Scrubber::scrub_text` and
//! `Scrubber::occurs_in` over texts of about 2 KB, for one scrubber of two realistic secrets
//! (an AWS-style secret access key holding `/`, a 40-character base64 token holding `+`),
//! built once, with its lazily built escape regex built before anything is timed.
//!
//! The cases:
//!
//! - `plain`: JSON-ish text (a listing of records) with neither a `%` nor a `\`, and no
//!   secret: the automata alone search it;
//! - `url_query`: the same records with URLs whose queries carry percent escapes (`%2F`,
//!   `%3D`, `%20`…), and no secret: the escape regex and the unescaped base64 search run;
//! - `json_in_text`: a JSON document inside a text, as a tool result carrying PHP output
//!   holds it (`\"`, `\n`, `\/` in URLs and paths), and no secret;
//! - `json_in_text_secret`: as `json_in_text`, with the AWS-style key in it written with
//!   `\/` (as PHP's `json_encode` writes it). A scrubber that does not read JSON's escapes
//!   does not find it, and returns `None`;
//! - `url_query_base64_secret`: as `url_query`, with one query holding the base64 of
//!   `Basic ` and the AWS-style key, its padding escaped (`%3D%3D`): the one stretch of
//!   base64 and escapes long enough to hold a secret, which the base64 search reads
//!   unescaped (a copy of the text);
//! - `plain_lines`: the records of `plain`, one a line: raw line breaks, none of them in
//!   base64;
//! - `wrapped_base64`: 2 KB of base64 wrapped at 76 columns, as MIME writes it, and no
//!   secret: the base64 search reads it with its line breaks removed (a copy of the text).
//!
//! And `held`: the same `plain` and `json_in_text` texts through that scrubber of two
//! secrets and through one of twelve (the two and ten 32-character tokens), as a gateway
//! with several upstreams and callers' credentials gives every upstream's answers since
//! each is scrubbed of every credential it holds.
//!
//!     cargo bench -p toolgate-hooks --bench scrubber
//!
//! (`-- --warm-up-time 1 --measurement-time 3` for a short run.)

use std::hint::black_box;

use base64::Engine as _;

use criterion::{Criterion, criterion_group, criterion_main};
use toolgate_hooks::secrets::Scrubber;

/// An AWS-style secret access key (AWS's documented example), with `/`.
const AWS_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
/// A 40-character base64 token, with `+`.
const TOKEN: &str = "q8Vt3Xk+Lm2PzR9wYb4NcJ7dHf1GsA6eUi0Ko5Tn";

/// The base64 of `Basic ` and [`AWS_KEY`], its padding escaped as a URL query writes it.
const BASIC_KEY: &str = "QmFzaWMgd0phbHJYVXRuRkVNSS9LN01ERU5HL2JQeFJmaUNZRVhBTVBMRUtFWQ%3D%3D";

/// About 2 KB of JSON-ish records, with neither `%` nor `\`.
fn plain() -> String {
    let mut text = String::from(r#"{"results":["#);
    for n in 0..16 {
        if n > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#"{{"id":{n},"name":"item number {n}","owner":"team-{n}@example.com","url":"https://api.example.com/v2/items/{n}","tags":["alpha","beta"]}}"#
        ));
    }
    text.push_str(r#"],"next":null}"#);
    text
}

/// The records of [`plain`] with URL queries that carry percent escapes.
fn url_query() -> String {
    let mut text = String::from(r#"{"results":["#);
    for n in 0..14 {
        if n > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#"{{"id":{n},"name":"item {n}","url":"https://api.example.com/v2/search?q=items%2F{n}%3Fsort%3Dname&path=%2Fhome%2Fuser%2Fdocs&sig=abc%3D%3D&s=a%20b"}}"#
        ));
    }
    text.push_str(r#"],"next":null}"#);
    text
}

/// The records of [`plain`], one a line.
fn plain_lines() -> String {
    plain().replace("},{", "},\n{")
}

/// About 2 KB of base64 (of bytes that hold no secret), wrapped at 76 columns.
fn wrapped_base64() -> String {
    let bytes: Vec<u8> = (0..1536u32).map(|n| (n * 7919 % 251) as u8).collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    let lines: Vec<&str> = encoded
        .as_bytes()
        .chunks(76)
        .map(|line| std::str::from_utf8(line).expect("base64 is ASCII"))
        .collect();
    lines.join("\n")
}

/// A JSON document inside a text, as PHP's `json_encode` wrote it and a tool result carries
/// it unparsed; `secret` is put in one field, written as given.
fn json_in_text(secret: &str) -> String {
    let mut text =
        String::from("Command finished (exit 0). Output:\n{\"status\":\"ok\",\"config\":\"");
    text.push_str(secret);
    text.push_str("\",\"log\":[");
    for n in 0..12 {
        if n > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#""[{n}] GET https:\/\/shop.example.com\/api\/orders\/{n} -> \"200 OK\"\n  handler: \/var\/www\/app\/src\/Controller\/Order.php:{n}\n\tdone""#
        ));
    }
    text.push_str("]}\nEnd of output.\n");
    text
}

fn bench(c: &mut Criterion) {
    let scrubber = Scrubber::for_values([AWS_KEY, TOKEN]);
    let escaped_key = AWS_KEY.replace('/', r"\/");
    let cases = [
        ("plain", plain()),
        ("url_query", url_query()),
        ("json_in_text", json_in_text("region=eu-west-1")),
        ("json_in_text_secret", json_in_text(&escaped_key)),
        (
            "url_query_base64_secret",
            url_query().replacen("sig=abc%3D%3D", &format!("auth={BASIC_KEY}"), 1),
        ),
        ("plain_lines", plain_lines()),
        ("wrapped_base64", wrapped_base64()),
    ];
    // Build the escape regex (built on the first text with a `%` or a `\`) before timing.
    for (_, text) in &cases {
        black_box(scrubber.scrub_text(text));
        black_box(scrubber.occurs_in(text));
    }

    let mut group = c.benchmark_group("scrub_text");
    for (name, text) in &cases {
        group.bench_function(*name, |b| b.iter(|| scrubber.scrub_text(black_box(text))));
    }
    group.finish();

    let mut group = c.benchmark_group("occurs_in");
    for (name, text) in &cases {
        group.bench_function(*name, |b| b.iter(|| scrubber.occurs_in(black_box(text))));
    }
    group.finish();

    let more: Vec<String> = (0..10)
        .map(|n| format!("tg-held-{n:02}-Zq8Vt3Xk9Lm2PzR9wYb4NcJ7"))
        .collect();
    let twelve = Scrubber::for_values(
        [AWS_KEY, TOKEN]
            .into_iter()
            .chain(more.iter().map(String::as_str)),
    );
    let texts = [
        ("plain", plain()),
        ("json_in_text", json_in_text("region=eu-west-1")),
    ];
    for (_, text) in &texts {
        black_box(twelve.scrub_text(text));
    }
    let mut group = c.benchmark_group("held");
    for (name, text) in &texts {
        group.bench_function(format!("two_secrets/{name}"), |b| {
            b.iter(|| scrubber.scrub_text(black_box(text)))
        });
        group.bench_function(format!("twelve_secrets/{name}"), |b| {
            b.iter(|| twelve.scrub_text(black_box(text)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
