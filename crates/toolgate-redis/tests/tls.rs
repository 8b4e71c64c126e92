//! `rediss://`: a TLS-enabled `redis-server` of the test's own, with certificates the test
//! makes with `openssl` (a CA, the server's certificate for 127.0.0.1, a client certificate,
//! and a second CA that signed nothing of this server's). The server requires client
//! certificates, so one connection proves both directions of mutual TLS.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use toolgate_hooks::quota::{QuotaBackend, QuotaDecision, QuotaRequest, Rate};
use toolgate_redis::{RedisConfig, RedisError, RedisState};

use common::certificates::{Certificates, make_certificates};
use common::namespace;

/// A `redis-server` listening for TLS only, on a free loopback port, requiring client
/// certificates signed by the CA; stopped on drop.
struct TlsRedis {
    child: Child,
    port: u16,
}

impl TlsRedis {
    fn start(certs: &Certificates) -> TlsRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--tls-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(certs.path("server.crt"))
            .arg("--tls-key-file")
            .arg(certs.path("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(certs.path("ca.crt"))
            .args(["--tls-auth-clients", "yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let server = TlsRedis { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the TLS redis-server did not listen on {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The certificates and a TLS Redis, when `redis-server` and `openssl` are here. Outside CI
/// their absence skips the test (with the reason printed); with `CI=true` it fails it.
fn tls_redis_or_skip(test: &str) -> Option<(Certificates, TlsRedis)> {
    let missing = ["redis-server", "openssl"].into_iter().find(|program| {
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
            "{test}: `{program}` is required in CI"
        );
        common::report_skip(test, &format!("`{program}` is not installed"));
        return None;
    }
    let certs = make_certificates();
    let server = TlsRedis::start(&certs);
    Some((certs, server))
}

async fn connect(url: &str, config: RedisConfig) -> Result<RedisState, RedisError> {
    RedisState::connect(url, config).await
}

#[tokio::test]
async fn a_quota_on_redis_over_mutual_tls_grants_and_limits() {
    let Some((certs, server)) =
        tls_redis_or_skip("a_quota_on_redis_over_mutual_tls_grants_and_limits")
    else {
        return;
    };
    let config = RedisConfig::builder()
        .key_prefix(namespace())
        .deadline(Duration::from_secs(2))
        .tls_root_certificate(certs.read("ca.crt"))
        .tls_client_certificate(certs.read("client.crt"), certs.read("client.key"))
        .build();
    let state = connect(&server.url(), config)
        .await
        .expect("the CA signed the server's certificate, and the server accepts ours");
    let quota = state.quota();
    let rate = Rate::per_minute(1).unwrap();
    let first = quota
        .acquire(QuotaRequest { key: "k", rate })
        .await
        .unwrap();
    assert!(matches!(first, QuotaDecision::Granted(_)), "{first:?}");
    let second = quota
        .acquire(QuotaRequest { key: "k", rate })
        .await
        .unwrap();
    assert!(
        matches!(second, QuotaDecision::Limited { .. }),
        "one a minute: the second is limited by the budget kept on the TLS Redis ({second:?})"
    );
    assert_eq!(quota.unavailable_decisions().total(), 0);
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused_with_a_clear_error() {
    let Some((certs, server)) =
        tls_redis_or_skip("a_server_certificate_from_another_ca_is_refused_with_a_clear_error")
    else {
        return;
    };
    let config = RedisConfig::builder()
        .tls_root_certificate(certs.read("other-ca.crt"))
        .tls_client_certificate(certs.read("client.crt"), certs.read("client.key"))
        .build();
    let error = connect(&server.url(), config)
        .await
        .expect_err("the server's certificate is not signed by the CA we trust");
    let message = error.to_string();
    assert!(matches!(error, RedisError::Unreachable { .. }), "{message}");
    assert!(
        message.to_lowercase().contains("certificate"),
        "the error says the certificate is the problem: {message}"
    );
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused_by_a_server_that_requires_one() {
    let Some((certs, server)) = tls_redis_or_skip(
        "a_client_without_a_certificate_is_refused_by_a_server_that_requires_one",
    ) else {
        return;
    };
    let config = RedisConfig::builder()
        .tls_root_certificate(certs.read("ca.crt"))
        .build();
    let error = connect(&server.url(), config)
        .await
        .expect_err("the server requires a client certificate");
    assert!(matches!(error, RedisError::Unreachable { .. }), "{error}");
}

#[tokio::test]
async fn certificates_with_a_plain_redis_url_are_refused_before_connecting() {
    let config = RedisConfig::builder()
        .tls_root_certificate(b"not used".to_vec())
        .build();
    let error = connect("redis://127.0.0.1:6379", config)
        .await
        .expect_err("certificates need rediss://");
    assert!(matches!(error, RedisError::InvalidConfig(_)), "{error}");
    assert!(error.to_string().contains("rediss://"), "{error}");
}

#[tokio::test]
async fn a_certificate_that_is_not_pem_is_a_configuration_error() {
    let config = RedisConfig::builder()
        .tls_root_certificate(b"-----BEGIN NONSENSE-----".to_vec())
        .build();
    let error = connect("rediss://127.0.0.1:1", config)
        .await
        .expect_err("not a certificate");
    assert!(matches!(error, RedisError::InvalidConfig(_)), "{error}");
}
