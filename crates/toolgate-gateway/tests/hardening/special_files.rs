//! Files the configuration names that are not regular files — a pipe, a device, a
//! directory — refused by `check` and `serve` at once, with the setting named, instead of
//! waiting on a pipe for ever or reading a device without end.

#![cfg(unix)]

use std::path::Path;

use crate::common::run;

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

/// Runs `toolgate <command>` on `yaml`, expecting a refusal (within `run`'s bound): its
/// standard error.
fn refused(dir: &Path, command: &str, yaml: &str) -> String {
    let config = dir.join("gateway.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut args = vec![command, "--config", config.to_str().unwrap()];
    if command == "serve" {
        args.extend(["--listen", "127.0.0.1:0"]);
    }
    let (status, stdout, stderr) = run(&args, "");
    assert!(!status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("OK"), "{stdout}");
    stderr
}

#[test]
fn check_and_serve_refuse_a_pipe_or_a_device_as_pins_path_and_make_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pins.json");
    mkfifo(&fifo);
    for command in ["check", "serve"] {
        for (path, what) in [
            (fifo.as_path(), "a pipe"),
            (Path::new("/dev/zero"), "a device"),
        ] {
            let yaml = format!(
                "tools:\n  builtin: [echo]\npins:\n  path: {}\n",
                path.display()
            );
            let stderr = refused(dir.path(), command, &yaml);
            assert!(
                stderr.contains(&format!(
                    "`pins.path`: {} is {what}, not a regular file: name a file the gateway can read and write",
                    path.display()
                )),
                "{command}: {stderr}"
            );
        }
    }
    assert!(!dir.path().join("pins.json.lock").exists());
}

#[test]
fn check_refuses_a_directory_or_a_pipe_nothing_reads_as_audit_path_as_serve_does() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("audit.jsonl");
    mkfifo(&fifo);
    for (path, said) in [
        (dir.path(), "is a directory: give the path of a file"),
        (fifo.as_path(), "is a pipe nothing reads from"),
    ] {
        let yaml = format!(
            "tools:\n  builtin: [echo]\naudit:\n  sink: file\n  path: {}\n",
            path.display()
        );
        let checked = refused(dir.path(), "check", &yaml);
        assert!(checked.contains("`audit.path`: "), "{checked}");
        assert!(checked.contains(said), "{checked}");
        let served = refused(dir.path(), "serve", &yaml);
        assert!(served.contains("`audit.path`: "), "{served}");
        assert!(served.contains(said), "{served}");
    }
    assert!(!dir.path().join(".audit.jsonl.lock").exists());
}

#[test]
fn check_and_serve_refuse_a_configuration_pipe_nothing_writes_to_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("gateway.yaml");
    mkfifo(&fifo);
    for command in ["check", "serve"] {
        let (status, _, stderr) = run(&[command, "--config", fifo.to_str().unwrap()], "");
        assert!(!status.success(), "{command}: {stderr}");
        assert!(
            stderr.contains("it is a pipe nothing writes to"),
            "{command}: {stderr}"
        );
    }
}
