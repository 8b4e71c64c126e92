//! A Redis Cluster of the test's own: six `redis-server --cluster-enabled yes` processes on
//! free loopback ports (three primaries, three replicas), joined by `redis-cli --cluster
//! create`, optionally over TLS, all stopped on drop — a panicking test included.
//!
//! The cluster detects a dead node after `cluster-node-timeout` (1 s here), so that a test
//! can kill a primary — or pause it with `SIGSTOP`, the way a hung host or a partition that
//! drops packets looks — and watch its replica take over within seconds.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use super::certificates::Certificates;
use super::namespace;

/// How long a node may be silent before the others count it as failed.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

const NODES: usize = 6;

/// The next port to try; each process starts from its own random base so that two test
/// binaries running at once rarely meet, and each cluster of this process takes new ones.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A port `p` free on loopback with `p + 10000` (the cluster bus) free too, both below the
/// kernel's ephemeral range (32768 and up), where client sockets could take them.
fn free_port_pair() -> u16 {
    let _ = NEXT_PORT.compare_exchange(
        0,
        fastrand::u16(15_000..20_000),
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let port = NEXT_PORT.fetch_add(1, Ordering::SeqCst);
        assert!(port < 22_000, "no free port pair below 22000");
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
}

/// TLS settings of a cluster: the files of `redis-server` and of `redis-cli`.
struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// Six nodes of one cluster; all stopped (SIGKILL) and their files removed on drop.
pub struct Cluster {
    dir: PathBuf,
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
    /// Nodes paused with `SIGSTOP` (they accept connections and never answer): left out of
    /// [`live_ports`](Cluster::live_ports), which the harness asks.
    paused: Mutex<Vec<u16>>,
    tls: Option<Tls>,
}

/// A node paused with `SIGSTOP`; `SIGCONT` when dropped (a failing test included). The
/// cluster's own drop kills it either way.
pub struct Paused<'a> {
    cluster: &'a Cluster,
    port: u16,
    pid: u32,
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        signal("-CONT", self.pid);
        self.cluster
            .paused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|p| *p != self.port);
    }
}

fn signal(which: &str, pid: u32) {
    let sent = Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        sent || std::thread::panicking(),
        "kill {which} {pid} failed"
    );
}

/// Whether `redis-server` and `redis-cli` are here. Outside CI their absence skips the
/// test (with the reason printed); with `CI=true` it fails it.
pub fn binaries_or_skip(test: &str) -> bool {
    let missing = ["redis-server", "redis-cli"].into_iter().find(|program| {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
    });
    if let Some(program) = missing {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{test}: `{program}` is required in CI (apt-get install redis-server redis-tools)"
        );
        super::report_skip(test, &format!("`{program}` is not installed"));
        return false;
    }
    true
}

impl Cluster {
    /// A plain cluster, or `None` (test skipped) when the binaries are missing outside CI.
    pub fn start_or_skip(test: &str) -> Option<Cluster> {
        binaries_or_skip(test).then(|| Cluster::start(None))
    }

    /// A cluster reached only over TLS (client certificates required), its bus and
    /// replication over TLS too.
    pub fn start_tls(certs: &Certificates) -> Cluster {
        Cluster::start(Some(Tls {
            cert: certs.path("server.crt"),
            key: certs.path("server.key"),
            ca: certs.path("ca.crt"),
            client_cert: certs.path("client.crt"),
            client_key: certs.path("client.key"),
        }))
    }

    fn start(tls: Option<Tls>) -> Cluster {
        let dir = std::env::temp_dir().join(format!("toolgate-cluster-{}", namespace()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Cluster {
            dir,
            ports: Vec::new(),
            children: Vec::new(),
            paused: Mutex::new(Vec::new()),
            tls,
        };
        for _ in 0..NODES {
            let port = free_port_pair();
            let child = cluster.spawn_node(port);
            cluster.ports.push(port);
            cluster.children.push(Some(child));
        }
        let started = Instant::now();
        for &port in &cluster.ports {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "redis-server on {port} did not listen within 10 s; see {}",
                    cluster.dir.display()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mut create = Command::new("redis-cli");
        cluster.tls_args(&mut create);
        create.arg("--cluster").arg("create");
        for port in &cluster.ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let log = cluster.dir.join("create.log");
        let mut creating = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("redis-cli runs");
        // It waits for the nodes to agree; nodes that cannot talk never do.
        let status = loop {
            if let Some(status) = creating.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = creating.kill();
                let _ = creating.wait();
                panic!(
                    "redis-cli --cluster create did not finish within 30 s: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            status.success(),
            "redis-cli --cluster create failed: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        cluster.wait_until_ok(Duration::from_secs(20));
        cluster
    }

    fn spawn_node(&self, port: u16) -> Child {
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .arg("--cluster-config-file")
            .arg(format!("nodes-{port}.conf"))
            .arg("--cluster-node-timeout")
            .arg(NODE_TIMEOUT.as_millis().to_string())
            // A replica takes over however long it was cut off from its primary.
            .args(["--cluster-replica-validity-factor", "0"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join(format!("{port}.log")));
        match &self.tls {
            None => {
                command.arg("--port").arg(port.to_string());
            }
            Some(tls) => {
                command
                    .args(["--port", "0", "--tls-port"])
                    .arg(port.to_string())
                    .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
                    .arg("--tls-cert-file")
                    .arg(&tls.cert)
                    .arg("--tls-key-file")
                    .arg(&tls.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.ca)
                    // The bus and replication connect to other nodes, which require a
                    // client certificate: the server's is for serving only.
                    .arg("--tls-client-cert-file")
                    .arg(&tls.client_cert)
                    .arg("--tls-client-key-file")
                    .arg(&tls.client_key)
                    .args(["--tls-auth-clients", "yes"]);
            }
        }
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts")
    }

    fn tls_args(&self, command: &mut Command) {
        if let Some(tls) = &self.tls {
            command
                .arg("--tls")
                .arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
    }

    /// `redis-cli -p port args…`: its output, or `None` when the node does not answer.
    pub fn cli(&self, port: u16, args: &[&str]) -> Option<String> {
        let mut command = Command::new("redis-cli");
        self.tls_args(&mut command);
        let output = command
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.success() && !text.starts_with("Could not connect")).then_some(text)
    }

    /// The URL of the whole cluster: `redis+cluster://` (or `rediss+cluster://`) with every
    /// node.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss+cluster://"
        } else {
            "redis+cluster://"
        };
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("{scheme}{}", hosts.join(","))
    }

    /// The ports of the nodes still running and not paused.
    pub fn live_ports(&self) -> Vec<u16> {
        let paused = self.paused.lock().unwrap().clone();
        self.ports
            .iter()
            .zip(&self.children)
            .filter(|(port, child)| child.is_some() && !paused.contains(port))
            .map(|(port, _)| *port)
            .collect()
    }

    /// Pauses the node on `port` with `SIGSTOP` until the returned guard is dropped: its
    /// sockets stay open and it answers nothing, like a hung host.
    pub fn pause(&self, port: u16) -> Paused<'_> {
        let index = self
            .ports
            .iter()
            .position(|p| *p == port)
            .expect("a node of this cluster");
        let pid = self.children[index].as_ref().expect("a running node").id();
        self.paused.lock().unwrap().push(port);
        signal("-STOP", pid);
        Paused {
            cluster: self,
            port,
            pid,
        }
    }

    /// Waits until every running node says `cluster_state:ok` and every running node's
    /// view of who is a primary matches what each node says of itself (`ROLE`).
    ///
    /// `cluster_state:ok` alone is not enough: right after `--cluster create`, a node can
    /// still list a new replica as a primary until gossip tells it otherwise, and a test
    /// that picks "another primary" from that view would send `SETSLOT` to a replica.
    pub fn wait_until_ok(&self, within: Duration) {
        let started = Instant::now();
        loop {
            let live = self.live_ports();
            let states_ok = live.iter().all(|&port| {
                self.cli(port, &["cluster", "info"])
                    .is_some_and(|info| info.contains("cluster_state:ok"))
            });
            let ok = states_ok && {
                let primaries: std::collections::BTreeSet<u16> = live
                    .iter()
                    .copied()
                    .filter(|&port| {
                        self.cli(port, &["role"])
                            .is_some_and(|role| role.lines().next() == Some("master"))
                    })
                    .collect();
                live.iter().all(|&asked| {
                    self.primaries_seen_by(asked).is_some_and(|seen| {
                        let seen: std::collections::BTreeSet<u16> = seen
                            .into_iter()
                            .filter(|port| live.contains(port))
                            .collect();
                        seen == primaries
                    })
                })
            };
            if ok {
                return;
            }
            assert!(
                started.elapsed() < within,
                "the cluster did not reach cluster_state:ok within {within:?}; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The slot of `key`, as the cluster computes it.
    pub fn slot(&self, key: &str) -> u16 {
        let port = self.live_ports()[0];
        self.cli(port, &["cluster", "keyslot", key])
            .expect("a node answers")
            .trim()
            .parse()
            .expect("a slot number")
    }

    /// The port of the primary that serves `slot`, as the running node `asked` sees it.
    pub fn primary_of_slot_seen_by(&self, asked: u16, slot: u16) -> Option<u16> {
        let nodes = self.cli(asked, &["cluster", "nodes"])?;
        nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let serves = fields.iter().skip(8).any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                match (low.parse::<u16>(), high.parse::<u16>()) {
                    (Ok(low), Ok(high)) => (low..=high).contains(&slot),
                    _ => false,
                }
            });
            if !serves {
                return None;
            }
            // `ip:port@bus` (a TLS node shows its TLS port here).
            let address = fields.get(1)?.split('@').next()?;
            address.rsplit_once(':')?.1.parse().ok()
        })
    }

    /// The port of the primary that serves `key` now.
    pub fn primary_of(&self, key: &str) -> u16 {
        let slot = self.slot(key);
        let asked = self.live_ports()[0];
        self.primary_of_slot_seen_by(asked, slot)
            .expect("a primary serves every slot")
    }

    /// The ports of the primaries (as a running node sees them).
    pub fn primaries(&self) -> Vec<u16> {
        self.primaries_seen_by(self.live_ports()[0])
            .expect("a node answers")
    }

    /// The ports of the primaries not marked failed, as the node on `asked` sees them, or
    /// `None` when it does not answer.
    fn primaries_seen_by(&self, asked: u16) -> Option<Vec<u16>> {
        let nodes = self.cli(asked, &["cluster", "nodes"])?;
        let primaries = nodes
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let flags = fields.get(2)?;
                (flags.contains("master") && !flags.contains("fail")).then_some(())?;
                let address = fields.get(1)?.split('@').next()?;
                address.rsplit_once(':')?.1.parse().ok()
            })
            .collect();
        Some(primaries)
    }

    /// The cluster's id of the node on `port`.
    pub fn node_id(&self, port: u16) -> String {
        self.cli(port, &["cluster", "myid"])
            .expect("the node answers")
            .trim()
            .to_owned()
    }

    /// Runs `redis-cli -p port args…` and fails unless the node answered `OK`.
    pub fn expect_ok(&self, port: u16, args: &[&str]) {
        let answer = self.cli(port, args).unwrap_or_default();
        assert_eq!(answer.trim(), "OK", "redis-cli -p {port} {args:?}");
    }

    /// Kills the node on `port` (SIGKILL: no goodbye to the cluster).
    pub fn kill(&mut self, port: u16) {
        let index = self
            .ports
            .iter()
            .position(|p| *p == port)
            .expect("a node of this cluster");
        if let Some(mut child) = self.children[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every key under `prefix` on every primary, with its `PTTL` (-1: no expiry).
    pub fn keys_under(&self, prefix: &str) -> Vec<(String, i64)> {
        let mut keys = Vec::new();
        for port in self.primaries() {
            let listed = self
                .cli(port, &["--scan", "--pattern", &format!("{prefix}:*")])
                .unwrap_or_default();
            for key in listed.lines().filter(|k| !k.is_empty()) {
                let pttl = self
                    .cli(port, &["pttl", key])
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(-2);
                keys.push((key.to_owned(), pttl));
            }
        }
        keys
    }

    /// Fails when a key under `prefix` has no expiry.
    pub fn assert_every_key_expires(&self, prefix: &str) {
        for (key, pttl) in self.keys_under(prefix) {
            assert_ne!(pttl, -1, "`{key}` has no expiry");
        }
    }

    /// The sum over the running primaries of `INFO commandstats` calls, by command
    /// (`evalsha`, `get`, …).
    pub fn command_calls(&self) -> std::collections::BTreeMap<String, u64> {
        let mut calls = std::collections::BTreeMap::new();
        for port in self.primaries() {
            let stats = self
                .cli(port, &["info", "commandstats"])
                .unwrap_or_default();
            for line in stats.lines() {
                // cmdstat_evalsha:calls=12,usec=…
                let Some((name, rest)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.split_once(':'))
                else {
                    continue;
                };
                let count = rest
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                *calls.entry(name.to_owned()).or_insert(0) += count;
            }
        }
        calls
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
