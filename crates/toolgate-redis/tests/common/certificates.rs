//! Certificates for the TLS tests, made with `openssl`: a CA, a server certificate for
//! 127.0.0.1 and a client certificate it signed, and a second CA that signed nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::namespace;

/// The certificates of one test run, as PEM files in a directory of its own.
pub struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("a certificate file the test wrote")
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate it signed, and a
/// second CA.
pub fn make_certificates() -> Certificates {
    let dir = std::env::temp_dir().join(format!("toolgate-tls-{}", namespace()));
    std::fs::create_dir_all(&dir).unwrap();
    let quiet = |args: &[&str]| openssl(&dir, args);
    for ca in ["ca", "other-ca"] {
        quiet(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN=toolgate test {ca}"),
        ]);
    }
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, ext) in [("server", "server.ext"), ("client", "client.ext")] {
        quiet(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN=toolgate test {name}"),
        ]);
        quiet(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            ext,
            "-out",
            &format!("{name}.crt"),
        ]);
    }
    Certificates { dir }
}
