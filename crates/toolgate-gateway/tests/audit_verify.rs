//! `toolgate audit verify` against audit files the real gateway wrote through real calls,
//! intact and tampered with: an edited field, a deleted record, two swapped, the tail cut
//! below a checkpoint, lines spliced from two replicas, a forged checkpoint; records no
//! signed checkpoint covers (a rewritten file without its checkpoints, a record or chain
//! added after the last one), an empty file, a copied checkpoint, a rotated file given
//! twice, a record deleted where a copy took its place, a blank line, lines that are not
//! records, and a file with no newline at all.

mod common;

use std::path::{Path, PathBuf};

use common::{AUDIT_SEED, Gateway, audit_public_key, invoke, run, user_yaml};
use serde_json::{Value, json};

/// One replica's audit file after `calls` echo calls, with a checkpoint every 3 records;
/// its lines, and the directory that holds it.
async fn audit_lines(calls: usize) -> (Vec<String>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let yaml = format!(
        "tools:\n  builtin: [echo]\nusers:\n{}audit:\n  sink: file\n  path: {}\n  flush_every: 0s\n  \
signing_key: ${{AUDIT_SIGNING_KEY}}\n  checkpoint_every: 3\n",
        user_yaml("alice", &["admin"]),
        path.display()
    );
    let gateway = Gateway::start_with_env(&yaml, &[("AUDIT_SIGNING_KEY", AUDIT_SEED)]);
    for i in 0..calls {
        let answer = invoke(
            &gateway,
            "alice",
            "echo",
            json!({"text": format!("call {i}")}),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    drop(gateway);
    let text = std::fs::read_to_string(&path).unwrap();
    (text.lines().map(str::to_owned).collect(), dir)
}

/// Writes `lines` to `name` in `dir`.
fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// `toolgate audit verify FILES [--key KEY]`: (success, stdout, stderr).
fn verify(files: &[&Path], key: Option<&str>) -> (bool, String, String) {
    let (code, stdout, stderr) = verify_code(files, key);
    (code == Some(0), stdout, stderr)
}

/// `toolgate audit verify FILES [--key KEY]`: (exit code, stdout, stderr).
fn verify_code(files: &[&Path], key: Option<&str>) -> (Option<i32>, String, String) {
    let mut args = vec!["audit".to_owned(), "verify".to_owned()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    if let Some(key) = key {
        args.extend(["--key".to_owned(), key.to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, stdout, stderr) = run(&args, "");
    (status.code(), stdout, stderr)
}

fn is_checkpoint(line: &str) -> bool {
    line.starts_with(r#"{"checkpoint":"#)
}

fn field(line: &str, name: &str) -> Value {
    serde_json::from_str::<Value>(line).unwrap()[name].clone()
}

#[tokio::test]
async fn an_intact_file_verifies_with_the_published_key_and_without_one() {
    let (lines, dir) = audit_lines(6).await;
    assert_eq!(lines.len(), 8, "6 records and 2 checkpoints: {lines:#?}");
    assert_eq!(field(&lines[0], "seq"), 1);
    assert_eq!(field(&lines[0], "prev"), "genesis");
    assert_eq!(field(&lines[0], "tool"), "echo");
    assert!(lines[3].starts_with(r#"{"checkpoint":"#), "{}", lines[3]);
    let file = write(dir.path(), "intact.jsonl", &lines);
    let key = audit_public_key(dir.path());

    let (ok, stdout, stderr) = verify(&[&file], Some(&key));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("1 chain(s), 6 record(s), 2 checkpoint(s), every signature valid"),
        "{stdout}"
    );
    let (ok, stdout, stderr) = verify(&[&file], None);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("signatures were not checked"), "{stdout}");
}

#[tokio::test]
async fn an_edited_field_is_reported_with_its_seq() {
    let (mut lines, dir) = audit_lines(4).await;
    assert_eq!(field(&lines[1], "seq"), 2);
    lines[1] = lines[1].replace(r#""user_id":"alice""#, r#""user_id":"mallory""#);
    let file = write(dir.path(), "edited.jsonl", &lines);
    let (ok, _, stderr) = verify(&[&file], None);
    assert!(!ok);
    assert!(
        stderr.contains("line 2: record seq 2 of chain") && stderr.contains("was changed"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_deleted_record_is_reported_missing() {
    let (mut lines, dir) = audit_lines(3).await;
    lines.remove(1);
    let file = write(dir.path(), "deleted.jsonl", &lines);
    let (ok, _, stderr) = verify(&[&file], None);
    assert!(!ok);
    assert!(
        stderr.contains("record seq 2 of chain")
            && stderr.contains("is missing (expected seq 2, found 3)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn two_swapped_records_are_reported_out_of_order() {
    let (mut lines, dir) = audit_lines(3).await;
    lines.swap(0, 1);
    let file = write(dir.path(), "swapped.jsonl", &lines);
    let (ok, _, stderr) = verify(&[&file], None);
    assert!(!ok);
    assert!(
        stderr.contains("line 1: record seq 2 of chain")
            && stderr.contains("out of order (expected seq 1)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_tail_cut_below_a_checkpoint_is_reported_truncated() {
    let (mut lines, dir) = audit_lines(6).await;
    // Records 5 and 6 go; the checkpoint that signed seq 6 stays.
    assert_eq!(field(&lines[6], "seq"), 6);
    lines.drain(5..7);
    let file = write(dir.path(), "cut.jsonl", &lines);
    let key = audit_public_key(dir.path());
    let (ok, _, stderr) = verify(&[&file], Some(&key));
    assert!(!ok);
    assert!(
        stderr.contains("no further than seq 4")
            && stderr.contains("signed seq 6")
            && stderr.contains("truncated"),
        "{stderr}"
    );
}

#[tokio::test]
async fn lines_spliced_from_two_replicas_are_reported() {
    let ((a, dir), (b, _other)) = tokio::join!(audit_lines(4), audit_lines(4));
    assert_ne!(
        field(&a[0], "chain"),
        field(&b[0], "chain"),
        "each replica has its own chain"
    );
    // Replica A's first two records, then replica B's from its third on.
    let spliced: Vec<String> = a[..2].iter().chain(&b[2..]).cloned().collect();
    let file = write(dir.path(), "spliced.jsonl", &spliced);
    let (ok, _, stderr) = verify(&[&file], None);
    assert!(!ok);
    assert!(
        stderr.contains("line 3: record seq 1 of chain") && stderr.contains("is missing"),
        "{stderr}"
    );

    // Both files whole, given together: two intact chains.
    let (a_file, b_file) = (
        write(dir.path(), "a.jsonl", &a),
        write(dir.path(), "b.jsonl", &b),
    );
    let (ok, stdout, stderr) = verify(&[&a_file, &b_file], None);
    assert!(
        ok && stdout.contains("2 chain(s), 8 record(s)"),
        "{stdout}{stderr}"
    );
}

#[tokio::test]
async fn a_forged_checkpoint_fails_under_the_key_and_the_chain_is_checked_without_one() {
    let (mut lines, dir) = audit_lines(3).await;
    let key = audit_public_key(dir.path());
    // An edited last record with its checkpoint's hash "fixed" to match: only the
    // signature can tell.
    let edited = lines[2].replace(r#""user_id":"alice""#, r#""user_id":"mallory""#);
    assert_ne!(edited, lines[2]);
    lines[2] = edited;
    let checkpoint: Value = serde_json::from_str(&lines[3]).unwrap();
    let old_hash = checkpoint["checkpoint"]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let new_hash = sha256_hex(lines[2].as_bytes());
    lines[3] = lines[3].replace(&old_hash, &new_hash);
    let file = write(dir.path(), "forged.jsonl", &lines);

    let (ok, _, stderr) = verify(&[&file], Some(&key));
    assert!(!ok);
    assert!(
        stderr.contains("line 4: the checkpoint of seq 3 of chain")
            && stderr.contains("bad signature"),
        "{stderr}"
    );
    let (ok, stdout, _) = verify(&[&file], None);
    assert!(
        ok,
        "without a key the forged hash passes: the chain alone cannot tell"
    );
    assert!(stdout.contains("signatures were not checked"), "{stdout}");

    // Without a key, the chain is still checked.
    let mut broken = lines.clone();
    broken.remove(1);
    let file = write(dir.path(), "broken.jsonl", &broken);
    let (code, _, stderr) = verify_code(&[&file], None);
    assert!(code == Some(2) && stderr.contains("is missing"), "{stderr}");
    // The first record removed: what is left reads as an excerpt from seq 2, never as
    // the whole chain (exit 4, not 0), its first link named as taken on trust.
    let mut headless = lines.clone();
    headless.remove(0);
    let file = write(dir.path(), "headless.jsonl", &headless);
    let (code, stdout, stderr) = verify_code(&[&file], None);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(
        stdout.contains("starts at seq 2") && stdout.contains("taken on trust"),
        "{stdout}"
    );
}

/// A rotated series that a gateway stopped cleanly wrote (rotating every KiB): its files
/// oldest first, as `audit.jsonl.* audit.jsonl` expands in a shell, with the directory that
/// holds them and how many records (calls) they hold in all.
async fn rotated_series() -> (Vec<PathBuf>, tempfile::TempDir, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let yaml = format!(
        "tools:\n  builtin: [echo]\nusers:\n{}audit:\n  sink: file\n  path: {}\n  flush_every: 0s\n  \
signing_key: ${{AUDIT_SIGNING_KEY}}\n  rotate_bytes: 1KiB\n",
        user_yaml("alice", &["admin"]),
        path.display()
    );
    let gateway = Gateway::start_with_env(&yaml, &[("AUDIT_SIGNING_KEY", AUDIT_SEED)]);
    // Eight calls at least, and as many more as leave a record in the file being written
    // (a call whose record fills a file leaves the next one empty), whatever a record's
    // size.
    let mut calls = 0;
    while calls < 8 || std::fs::metadata(&path).map_or(true, |m| m.len() == 0) {
        assert!(calls < 20, "the file being written stays empty");
        let answer = invoke(
            &gateway,
            "alice",
            "echo",
            json!({"text": format!("call {calls}")}),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        calls += 1;
    }
    // Stopped cleanly: the close signs the last file's records.
    let mut gateway = gateway;
    gateway.signal("TERM");
    let status = gateway.wait_exit(std::time::Duration::from_secs(30)).await;
    assert!(status.is_some_and(|s| s.success()), "{}", gateway.stderr());
    let mut series: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        // Neither the file being written, the configuration, nor the sink's lock file
        // (`.audit.jsonl.lock`).
        .filter(|p| {
            p.extension().is_some_and(|e| e != "jsonl" && e != "yaml")
                && !p.file_name().unwrap().to_string_lossy().starts_with('.')
        })
        .collect();
    series.sort();
    // A file lost from the series must not hold the last records: that would be a cut
    // tail.
    assert!(
        series.len() >= 2,
        "records of ~450 bytes fill 1 KiB every two or three: {series:?}"
    );
    assert!(std::fs::metadata(&path).unwrap().len() > 0, "{series:?}");
    series.push(path);
    (series, dir, calls)
}

#[tokio::test]
async fn a_rotated_series_verifies_in_order_and_a_lost_file_shows() {
    let (series, dir, calls) = rotated_series().await;
    let series: Vec<&Path> = series.iter().map(PathBuf::as_path).collect();
    let key = audit_public_key(dir.path());

    let (ok, stdout, stderr) = verify(&series, Some(&key));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(&format!("1 chain(s), {calls} record(s)")),
        "{stdout}"
    );

    let mut lost = series.clone();
    lost.remove(1);
    let (ok, _, stderr) = verify(&lost, Some(&key));
    assert!(!ok);
    assert!(stderr.contains("is missing"), "{stderr}");
}

#[tokio::test]
async fn a_rotated_file_given_twice_is_named_as_given_twice() {
    let (series, dir, _) = rotated_series().await;
    let series: Vec<&Path> = series.iter().map(PathBuf::as_path).collect();
    let key = audit_public_key(dir.path());
    // The second file again right after it (its records start past seq 1), and the first
    // file again at the end.
    let second = series[1];
    let first_seq = field(
        std::fs::read_to_string(second)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
        "seq",
    );
    assert!(first_seq.as_u64().unwrap() > 1, "{first_seq}");
    for (files, again) in [
        ([&series[..2], &[second]].concat(), second),
        ([&series[..], &[series[0]]].concat(), series[0]),
    ] {
        let (code, stdout, stderr) = verify_code(&files, Some(&key));
        assert_eq!(code, Some(2), "{stdout}{stderr}");
        let again = again.display();
        assert!(
            stderr.contains(&format!("{again} line 1: chain "))
                && stderr.contains(&format!("records from file {again} line 1 on come twice"))
                && stderr.contains("given or copied twice"),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn a_reload_and_a_shutdown_sign_the_last_records_of_their_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let yaml = format!(
        "tools:\n  builtin: [echo]\nusers:\n{}audit:\n  sink: file\n  path: {}\n  \
signing_key: ${{AUDIT_SIGNING_KEY}}\n",
        user_yaml("alice", &["admin"]),
        path.display()
    );
    let mut gateway = Gateway::start_with_env(&yaml, &[("AUDIT_SIGNING_KEY", AUDIT_SEED)]);
    for i in 0..2 {
        let answer = invoke(
            &gateway,
            "alice",
            "echo",
            json!({"text": format!("call {i}")}),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    // A reload starts a new chain and signs the old one's last records.
    gateway.reload(1).await;
    let answer = invoke(&gateway, "alice", "echo", json!({"text": "after"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    gateway.signal("TERM");
    let status = gateway.wait_exit(std::time::Duration::from_secs(30)).await;
    assert!(status.is_some_and(|s| s.success()), "{}", gateway.stderr());

    let text = std::fs::read_to_string(&path).unwrap();
    let checkpoints: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with(r#"{"checkpoint":"#))
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["checkpoint"].clone())
        .collect();
    let mut signed: Vec<u64> = checkpoints
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    signed.sort();
    assert_eq!(signed, [1, 2], "{text}");
    assert_ne!(checkpoints[0]["chain"], checkpoints[1]["chain"], "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with(r#"{"checkpoint":"#),
        "{text}"
    );
    assert!(
        gateway.stderr().contains("audit checkpoint signed"),
        "{}",
        gateway.stderr()
    );

    let key = audit_public_key(dir.path());
    let (ok, stdout, stderr) = verify(&[&path], Some(&key));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("2 chain(s), 3 record(s), 2 checkpoint(s)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_bad_signing_key_is_refused_with_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(
        &config,
        "tools:\n  builtin: [echo]\naudit:\n  sink: file\n  path: /tmp/x.jsonl\n  signing_key: short\n",
    )
    .unwrap();
    let (status, _, stderr) = run(&["check", "--config", config.to_str().unwrap()], "");
    assert!(!status.success());
    assert!(
        stderr.contains("audit.signing_key") && stderr.contains("openssl rand -base64 32"),
        "{stderr}"
    );
}

#[tokio::test]
async fn with_a_key_records_no_signed_checkpoint_covers_are_reported_not_called_intact() {
    // Four calls with a checkpoint every three, and the gateway killed: record 4 unsigned,
    // as in the file of a running gateway.
    let (lines, dir) = audit_lines(4).await;
    assert_eq!(lines.len(), 5, "{lines:#?}");
    assert!(is_checkpoint(&lines[3]) && !is_checkpoint(&lines[4]));
    let file = write(dir.path(), "running.jsonl", &lines);
    let key = audit_public_key(dir.path());
    let (code, stdout, stderr) = verify_code(&[&file], Some(&key));
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let chain = field(&lines[0], "chain");
    let chain = chain.as_str().unwrap();
    assert!(
        stdout.starts_with("not all signed: 1 of 4 record(s) covered by no signed checkpoint")
            && stdout.contains(&format!(
                "chain {chain} seq 4, file {} line 5: after the chain's last signed checkpoint, of seq 3",
                file.display()
            ))
            && stdout.contains("within `checkpoint_after`"),
        "{stdout}"
    );
    assert!(!stdout.contains("every signature valid"), "{stdout}");
}

#[tokio::test]
async fn a_file_with_every_checkpoint_removed_is_not_signed() {
    let (lines, dir) = audit_lines(6).await;
    let key = audit_public_key(dir.path());
    // Every record rewritten and relinked, every checkpoint gone: the hashes link up.
    let mut prev = "genesis".to_owned();
    let forged: Vec<String> = lines
        .iter()
        .filter(|l| !is_checkpoint(l))
        .map(|l| {
            let mut value: Value = serde_json::from_str(l).unwrap();
            value["user_id"] = "mallory".into();
            value["prev"] = prev.clone().into();
            let line = serde_json::to_string(&value).unwrap();
            prev = sha256_hex(line.as_bytes());
            line
        })
        .collect();
    let unsigned: Vec<String> = lines
        .iter()
        .filter(|l| !is_checkpoint(l))
        .cloned()
        .collect();
    for (name, lines) in [("rewritten.jsonl", forged), ("unsigned.jsonl", unsigned)] {
        let file = write(dir.path(), name, &lines);
        let (code, stdout, stderr) = verify_code(&[&file], Some(&key));
        assert_eq!(code, Some(1), "{name}: {stdout}{stderr}");
        assert!(
            stdout.contains("6 of 6 record(s) covered by no signed checkpoint")
                && stdout.contains("seq 1 to 6")
                && stdout.contains("lines 1 to 6: the chain has no signed checkpoint")
                && !stdout.contains("every signature valid"),
            "{name}: {stdout}"
        );
        // Without the key: the hashes link up, and nothing more is claimed.
        let (code, stdout, _) = verify_code(&[&file], None);
        assert_eq!(code, Some(0));
        assert!(
            stdout.starts_with("the hashes link up")
                && stdout.contains("does not show that the gateway wrote")
                && !stdout.contains("intact"),
            "{stdout}"
        );
    }
}

#[tokio::test]
async fn a_chain_or_record_added_after_the_shutdown_checkpoint_is_reported_unsigned() {
    let (lines, dir) = audit_lines(6).await;
    assert!(is_checkpoint(lines.last().unwrap()));
    let key = audit_public_key(dir.path());
    let last = &lines[lines.len() - 2];
    // The next record of the chain, linked to the last one.
    let mut next: Value = serde_json::from_str(last).unwrap();
    next["seq"] = 7.into();
    next["prev"] = sha256_hex(last.as_bytes()).into();
    next["user_id"] = "mallory".into();
    // A new chain of one record.
    let mut invented: Value = serde_json::from_str(&lines[0]).unwrap();
    invented["chain"] = "f".repeat(32).into();
    let cases = [
        (
            "appended.jsonl",
            next,
            "seq 7",
            "after the chain's last signed checkpoint, of seq 6",
        ),
        (
            "new-chain.jsonl",
            invented,
            "seq 1",
            "the chain has no signed checkpoint",
        ),
    ];
    for (name, added, seq, why) in cases {
        let mut tampered = lines.clone();
        tampered.push(serde_json::to_string(&added).unwrap());
        let file = write(dir.path(), name, &tampered);
        let (code, stdout, stderr) = verify_code(&[&file], Some(&key));
        assert_eq!(code, Some(1), "{name}: {stdout}{stderr}");
        assert!(
            stdout.contains("1 of 7 record(s) covered by no signed checkpoint")
                && stdout.contains(&format!("{seq}, file {} line 9: {why}", file.display())),
            "{name}: {stdout}"
        );
        assert!(!stdout.contains("every signature valid"), "{stdout}");
    }
    // The invented record alone.
    let file = write(
        dir.path(),
        "invented.jsonl",
        &[serde_json::to_string(&{
            let mut v: Value = serde_json::from_str(&lines[0]).unwrap();
            v["chain"] = "e".repeat(32).into();
            v
        })
        .unwrap()],
    );
    let (code, stdout, _) = verify_code(&[&file], Some(&key));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("1 of 1 record(s)"), "{stdout}");
}

#[tokio::test]
async fn a_chain_id_with_newlines_or_bidi_controls_cannot_forge_a_line_of_the_report() {
    let (lines, dir) = audit_lines(3).await;
    let key = audit_public_key(dir.path());
    // A chain appended by hand, whose id would print an `intact: …` line of its own (and
    // push the real verdict off the screen), then reverse what follows it.
    let forged_id = format!(
        "\nintact: 1 chain(s), 3 record(s), 1 checkpoint(s), every signature valid, every \
         record covered by a signed checkpoint{}\u{202e}",
        "\n".repeat(40)
    );
    let mut invented: Value = serde_json::from_str(&lines[0]).unwrap();
    invented["chain"] = forged_id.clone().into();
    let mut appended = lines.clone();
    appended.push(serde_json::to_string(&invented).unwrap());
    let file = write(dir.path(), "forged-id.jsonl", &appended);
    let (code, stdout, stderr) = verify_code(&[&file], Some(&key));
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    // A broken chain of that id: the problem names it on one line too.
    let mut second = invented.clone();
    second["seq"] = 3.into();
    let broken = write(
        dir.path(),
        "forged-gap.jsonl",
        &[
            serde_json::to_string(&invented).unwrap(),
            serde_json::to_string(&second).unwrap(),
        ],
    );
    let (gap_code, gap_stdout, gap_stderr) = verify_code(&[&broken], None);
    assert_eq!(gap_code, Some(2), "{gap_stdout}{gap_stderr}");
    for (report, lines) in [(&stdout, 3), (&gap_stderr, 1)] {
        assert!(
            !report.lines().any(|line| line.starts_with("intact")),
            "a line of the report was forged: {report}"
        );
        assert_eq!(report.lines().count(), lines, "{report}");
        assert!(
            !report.contains('\u{202e}')
                && report.contains(r"\u{a}intact")
                && report.contains(r"\u{202e}"),
            "{report}"
        );
    }
}

#[tokio::test]
async fn an_empty_file_is_not_intact() {
    let dir = tempfile::tempdir().unwrap();
    let key = audit_public_key(dir.path());
    for (name, contents) in [("empty.jsonl", ""), ("blank.jsonl", "\n")] {
        let file = dir.path().join(name);
        std::fs::write(&file, contents).unwrap();
        for key in [Some(key.as_str()), None] {
            let (code, stdout, stderr) = verify_code(&[&file], key);
            assert_eq!(code, Some(1), "{stdout}{stderr}");
            assert!(
                stdout.starts_with("no records") && !stdout.contains("intact"),
                "{stdout}"
            );
        }
    }
}

#[tokio::test]
async fn a_duplicated_checkpoint_line_is_reported() {
    let (mut lines, dir) = audit_lines(6).await;
    assert!(is_checkpoint(&lines[3]));
    lines.insert(4, lines[3].clone());
    let file = write(dir.path(), "dup.jsonl", &lines);
    let key = audit_public_key(dir.path());
    let (code, stdout, stderr) = verify_code(&[&file], Some(&key));
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("line 5: the checkpoint of seq 3 of chain")
            && stderr.contains("is there a second time")
            && stderr.contains("line 4"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_deleted_record_whose_place_a_copy_of_the_one_before_took_is_reported_as_both() {
    // Records 1-3, the checkpoint of 3, records 4-6, the checkpoint of 6.
    let (mut lines, dir) = audit_lines(6).await;
    assert_eq!(field(&lines[5], "seq"), 5);
    // Record 5 goes; a copy of record 4 keeps the line count.
    lines[5] = lines[4].clone();
    let file = write(dir.path(), "copied.jsonl", &lines);
    let (code, stdout, stderr) = verify_code(&[&file], Some(&audit_public_key(dir.path())));
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("line 6: record seq 4 of chain")
            && stderr.contains("is there a second time (first at file")
            && stderr.contains("record seq 5 is missing after it (found seq 6)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_blank_line_added_between_records_is_reported() {
    let (mut lines, dir) = audit_lines(3).await;
    lines.insert(2, String::new());
    let file = write(dir.path(), "blank-line.jsonl", &lines);
    for key in [Some(audit_public_key(dir.path())), None] {
        let (code, stdout, stderr) = verify_code(&[&file], key.as_deref());
        assert_eq!(code, Some(2), "{stdout}{stderr}");
        assert!(
            stderr.contains("line 3: the line is blank, and the gateway writes no blank line"),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn lines_that_are_not_records_are_explained_in_json_words_not_rust_types() {
    let (lines, dir) = audit_lines(3).await;
    let first = &lines[0];
    let cases = [
        (
            first.replacen(r#""seq":1,"#, r#""seq":1e23,"#, 1),
            "`seq` is the number 1e+23",
        ),
        (
            first.replacen(r#""seq":1,"#, r#""seq":"1","#, 1),
            "`seq` is the string \"1\"",
        ),
        ("[1,2,3]".to_owned(), "a JSON array"),
        (r#"{"hello":1}"#.to_owned(), "the record has no `seq`"),
    ];
    for (line, expected) in cases {
        let file = write(dir.path(), "bad.jsonl", std::slice::from_ref(&line));
        let (code, _, stderr) = verify_code(&[&file], None);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{line}: {stderr}");
        for rust in [
            "u64",
            "struct",
            "Link",
            "floating point",
            "integer",
            "column",
        ] {
            assert!(!stderr.contains(rust), "{line}: {stderr}");
        }
    }
    // The file cut in the middle of its last line.
    let text = lines.join("\n") + "\n";
    let file = dir.path().join("cut.jsonl");
    std::fs::write(&file, &text[..text.len() - 40]).unwrap();
    let (code, _, stderr) = verify_code(&[&file], None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("line {}:", lines.len()))
            && stderr.contains("cut short")
            && stderr.contains("truncated")
            && !stderr.contains("EOF"),
        "{stderr}"
    );
}

#[test]
fn a_line_longer_than_64_mib_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.jsonl");
    let record = format!(
        r#"{{"seq":1,"chain":"c","prev":"genesis","pad":"{}"}}"#,
        "x".repeat(65 << 20)
    );
    std::fs::write(&file, record + "\n").unwrap();
    let (code, _, stderr) = verify_code(&[&file], None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("line 1: the line is longer than 64 MiB"),
        "{stderr}"
    );
}

#[test]
fn dev_zero_fails_fast_instead_of_filling_memory() {
    let started = std::time::Instant::now();
    let mut child = std::process::Command::new(common::BIN)
        .args(["audit", "verify", "/dev/zero"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`toolgate audit verify /dev/zero` still running after 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/dev/zero line 1: the line is longer than 64 MiB"),
        "{stderr}"
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The lines of `path`.
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_rotated_out_segment_alone_verifies_as_an_excerpt_naming_its_unchecked_first_link() {
    let (series, dir, calls) = rotated_series().await;
    let key = audit_public_key(dir.path());
    let first = lines_of(&series[0]);
    let second = lines_of(&series[1]);
    let start = field(&second[0], "seq").as_u64().unwrap();
    let last_record = first.iter().rev().find(|l| !is_checkpoint(l)).unwrap();
    assert_eq!(field(last_record, "seq").as_u64().unwrap() + 1, start);
    let hash = sha256_hex(last_record.as_bytes());
    assert_eq!(field(&second[0], "prev"), hash.as_str());

    // The second file alone, and every file but the first: an excerpt, exit 4.
    let rest: Vec<&Path> = series[1..].iter().map(PathBuf::as_path).collect();
    for files in [&rest[..1], &rest[..]] {
        let (code, stdout, stderr) = verify_code(files, Some(&key));
        assert_eq!(code, Some(4), "{stdout}{stderr}");
        assert!(
            stdout.starts_with("excerpt: 1 chain(s) start past seq 1")
                && stdout.contains(&format!(
                    "starts at seq {start}, file {} line 1: the record before it, seq {} with \
                     hash {hash}, is not in these files, so the link to it is taken on trust",
                    series[1].display(),
                    start - 1
                ))
                && stdout.contains("verify again with the file that holds the record before")
                && stdout.contains("every signature valid"),
            "{stdout}"
        );
    }
    // With the file before it, the first link is checked: intact, exit 0.
    let all: Vec<&Path> = series.iter().map(PathBuf::as_path).collect();
    let (code, stdout, stderr) = verify_code(&all, Some(&key));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(!stdout.contains("excerpt"), "{stdout}");

    // Segments concatenated into one file verify as one chain: from the start (exit 0) or
    // from the second (exit 4).
    let records_from = |from: usize| -> usize {
        series[from..]
            .iter()
            .flat_map(|p| lines_of(p))
            .filter(|l| !is_checkpoint(l))
            .count()
    };
    assert_eq!(records_from(0), calls);
    for (from, expected) in [(0, 0), (1, 4)] {
        let joined: Vec<String> = series[from..].iter().flat_map(|p| lines_of(p)).collect();
        let file = write(dir.path(), &format!("joined-{from}.txt"), &joined);
        let (code, stdout, stderr) = verify_code(&[&file], Some(&key));
        assert_eq!(code, Some(expected), "{stdout}{stderr}");
        assert!(
            stdout.contains(&format!("1 chain(s), {} record(s)", records_from(from))),
            "{stdout}"
        );
    }

    // Given newest first: named as such, exit 2.
    let (code, stdout, stderr) = verify_code(&[&series[1], &series[0]], Some(&key));
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} line 1: record seq 1 of chain",
            series[0].display()
        )) && stderr.contains(&format!(
            "comes after the chain's records from seq {start} on"
        )) && stderr.contains("give them oldest first"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_excerpt_cut_from_a_real_log_is_checked_link_by_link() {
    // Records 1-3, checkpoint 3, records 4-6, checkpoint 6, records 7-9, checkpoint 9.
    let (lines, dir) = audit_lines(9).await;
    assert_eq!(lines.len(), 12, "{lines:#?}");
    assert!(is_checkpoint(&lines[3]) && is_checkpoint(&lines[7]));
    let key = audit_public_key(dir.path());
    let chain = field(&lines[0], "chain");
    let chain = chain.as_str().unwrap();

    // From record 4: the first link taken on trust.
    let excerpt = write(dir.path(), "from-4.jsonl", &lines[4..]);
    let (code, stdout, stderr) = verify_code(&[&excerpt], Some(&key));
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("chain {chain} starts at seq 4"))
            && stdout.contains("taken on trust")
            && stdout.contains("6 record(s), 2 checkpoint(s), every signature valid"),
        "{stdout}"
    );
    // From the checkpoint of 3: the first link checked against it.
    let anchored = write(dir.path(), "from-checkpoint-3.jsonl", &lines[3..]);
    let (code, stdout, stderr) = verify_code(&[&anchored], Some(&key));
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(
        stdout.contains("checked against the checkpoint of seq 3 at file")
            && stdout.contains("whose signature is valid")
            && !stdout.contains("taken on trust"),
        "{stdout}"
    );

    // Disorder and tampering within the excerpt (records 4, 5, 6, checkpoint 6, 7, 8, 9,
    // checkpoint 9): exit 2, with the seqs.
    let excerpt = &lines[4..];
    let mut swapped = excerpt.to_vec();
    swapped.swap(1, 2);
    let mut removed = excerpt.to_vec();
    removed.remove(4);
    let mut copied = excerpt.to_vec();
    copied.insert(5, excerpt[4].clone());
    let mut first_moved = excerpt.to_vec();
    first_moved.swap(0, 1);
    let mut edited = excerpt.to_vec();
    edited[1] = edited[1].replace(r#""user_id":"alice""#, r#""user_id":"mallory""#);
    assert_ne!(edited[1], excerpt[1]);
    for (name, lines, expected) in [
        (
            "swapped",
            swapped,
            "line 2: record seq 6 of chain {chain} is out of order (expected seq 5)".to_owned(),
        ),
        (
            "removed",
            removed,
            "record seq 7 of chain {chain} is missing (expected seq 7, found 8)".to_owned(),
        ),
        (
            "copied",
            copied,
            "line 6: record seq 7 of chain {chain} is there a second time (first at file"
                .to_owned(),
        ),
        (
            "first-moved",
            first_moved,
            "line 1: record seq 5 of chain {chain} is out of order (expected seq 4)".to_owned(),
        ),
        (
            "edited",
            edited,
            "line 2: record seq 5 of chain {chain} was changed".to_owned(),
        ),
    ] {
        let file = write(dir.path(), &format!("{name}.jsonl"), &lines);
        let (code, stdout, stderr) = verify_code(&[&file], Some(&key));
        assert_eq!(code, Some(2), "{name}: {stdout}{stderr}");
        let expected = expected.replace("{chain}", chain);
        assert!(stderr.contains(&expected), "{name}: {stderr}");
    }
}

#[tokio::test]
async fn the_verdict_is_the_exit_code_when_the_reader_of_the_report_goes_away() {
    let (lines, dir) = audit_lines(3).await;
    let key = audit_public_key(dir.path());
    let unsigned: Vec<String> = lines.into_iter().filter(|l| !is_checkpoint(l)).collect();
    let file = write(dir.path(), "unsigned.jsonl", &unsigned);
    // `toolgate audit verify … | head -0`: the report's reader has gone before it is
    // written, and the unsigned records must still fail the command.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["audit", "verify", file.to_str().unwrap(), "--key", &key])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "unsigned records read as intact");
}

#[tokio::test]
async fn a_second_gateway_on_one_audit_file_stops_at_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let yaml = format!(
        "tools:\n  builtin: [echo]\nusers:\n{}audit:\n  sink: file\n  path: {}\n  \
flush_every: 0s\n  rotate_bytes: 4KiB\n",
        user_yaml("alice", &["admin"]),
        path.display()
    );
    let config = dir.path().join("second.yaml");
    std::fs::write(&config, &yaml).unwrap();
    let mut first = Gateway::start(&yaml);
    let answer = invoke(&first, "alice", "echo", json!({"text": "one"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    // The second stops at start: it would lose the first's records at its rotations.
    let mut second = std::process::Command::new(common::BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + common::STARTUP;
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = second.kill();
            panic!("a second gateway serves the same audit file");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("audit file `{}`", path.display()))
            && stderr.contains("is written by another process")
            && stderr.contains("its own `audit.path`"),
        "{stderr}"
    );

    // The first goes on writing, and once it has stopped the file is free.
    let answer = invoke(&first, "alice", "echo", json!({"text": "two"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    first.signal("TERM");
    assert!(
        first
            .wait_exit(std::time::Duration::from_secs(30))
            .await
            .is_some_and(|s| s.success())
    );
    let again = Gateway::start_file(&config);
    let answer = invoke(&again, "alice", "echo", json!({"text": "three"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let records = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(r#"{"checkpoint""#))
        .count();
    assert_eq!(records, 3, "each gateway's records, none lost");
}
