//! The environment a stdio upstream's program starts with.
//!
//! A stdio upstream is often a third party's program, and the host's environment holds
//! the host's own secrets (a Redis URL with its password, identity-provider client
//! secrets, API keys, its own settings). So the program inherits none of it but the few
//! variables any program needs to run ([`STDIO_PASSED_ENV`]), the ones its configuration
//! names ([`UpstreamConfig::inherit_env`]), the values its configuration sets
//! ([`UpstreamConfig::env`]) and its credential
//! ([`UpstreamConfig::credential_env`](super::UpstreamConfig::credential_env)), in that
//! order: a later one overrides an earlier one of the same name.

use tokio::process::Command;

#[cfg(doc)]
use super::UpstreamConfig;

/// The variables of the host's environment every stdio upstream's program gets, when
/// set: what finding programs, the user's home and files, the language, the time zone,
/// the place for temporary files and the certificates to trust need. Anything else is
/// passed on only when named by [`UpstreamConfig::inherit_env`].
///
/// The certificates to trust are named by paths, not secrets: `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` (OpenSSL's, which Python's `ssl`, Ruby, curl, Go and Rust's
/// `rustls-native-certs` read too), `NODE_EXTRA_CA_CERTS` (Node's own: it trusts its
/// bundled list and that) and `REQUESTS_CA_BUNDLE` (Python `requests`' own: it trusts
/// `certifi`'s list otherwise). Behind a proxy that inspects TLS, a server cannot reach
/// its own API without them. The proxy variables (`HTTPS_PROXY`…) are not passed: their
/// URLs may carry the proxy's password.
///
/// ```
/// assert!(toolgate_mcp::STDIO_PASSED_ENV.contains(&"PATH"));
/// ```
#[cfg(not(windows))]
pub const STDIO_PASSED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
];

/// The variables of the host's environment every stdio upstream's program gets, when
/// set: what finding programs, the user's profile, the system's own directories (without
/// which many Windows programs cannot start), the place for temporary files and the
/// certificates to trust (as on other systems) need. Anything else is passed on only
/// when named by [`UpstreamConfig::inherit_env`].
#[cfg(windows)]
pub const STDIO_PASSED_ENV: &[&str] = &[
    "PATH",
    "PATHEXT",
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "USERNAME",
    "USERPROFILE",
    "HOMEDRIVE",
    "HOMEPATH",
    "APPDATA",
    "LOCALAPPDATA",
    "PROGRAMDATA",
    "TEMP",
    "TMP",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
];

/// Whether `name` can be an environment variable's name that toolgate passes on: ASCII
/// letters, digits and `_`, not starting with a digit.
///
/// ```
/// use toolgate_mcp::is_env_name;
///
/// assert!(is_env_name("GITHUB_TOKEN") && is_env_name("_x1"));
/// assert!(!is_env_name("") && !is_env_name("1X") && !is_env_name("A=B") && !is_env_name("A B"));
/// ```
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The first name of `names` that cannot be an environment variable's, if any.
pub(crate) fn first_invalid<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names.into_iter().find(|name| !is_env_name(name))
}

/// Why the variables of a stdio program named in `inherit`, set in `env` or holding its
/// credential (`credential`) cannot be given to it, if they cannot: a name that is not
/// one of letters, digits and `_` (`A=B` would set `A`, an empty one nothing sensible).
pub(crate) fn refused_name(
    inherit: &[String],
    env: &[(String, String)],
    credential: Option<&str>,
) -> Option<String> {
    let plain = "is not a variable's name: use letters, digits and `_`, not starting with a digit";
    if let Some(name) = first_invalid(inherit.iter().map(String::as_str)) {
        return Some(format!(
            "`{name}` in the variables to pass on from the environment {plain}"
        ));
    }
    if let Some(name) = first_invalid(env.iter().map(|(name, _)| name.as_str())) {
        return Some(format!("`{name}` in the variables to set {plain}"));
    }
    let name = first_invalid(credential)?;
    Some(format!("`{name}`, the credential's variable, {plain}"))
}

/// `program` with `args`, to start with an environment of [`STDIO_PASSED_ENV`], the
/// variables of `inherit` that the host has, then `env`.
pub(crate) fn command(
    program: &str,
    args: &[String],
    env: &[(String, String)],
    inherit: &[String],
) -> Command {
    let mut command = Command::new(program);
    command.args(args).env_clear();
    let passed = STDIO_PASSED_ENV.iter().copied();
    for name in passed.chain(inherit.iter().map(String::as_str)) {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The environment `command` was given.
    fn given(command: &Command) -> Vec<(String, Option<String>)> {
        command
            .as_std()
            .get_envs()
            .map(|(k, v)| {
                let value = v.map(|v| v.to_string_lossy().into_owned());
                (k.to_string_lossy().into_owned(), value)
            })
            .collect()
    }

    #[test]
    fn only_the_passed_on_named_and_configured_variables_are_given() {
        // Cargo sets these for every test binary: the "host's secrets" here.
        let command = command(
            "true",
            &[],
            &[("CARGO_PKG_NAME".to_owned(), "set".to_owned())],
            &[
                "CARGO_MANIFEST_DIR".to_owned(),
                "NOT_SET_ANYWHERE_42".to_owned(),
            ],
        );
        let given = given(&command);
        let names: Vec<&str> = given.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            names
                .iter()
                .all(|n| STDIO_PASSED_ENV.contains(n) || n.starts_with("CARGO_")),
            "{names:?}"
        );
        assert!(
            !names.contains(&"CARGO_PKG_VERSION"),
            "not named: {names:?}"
        );
        assert!(
            !names.contains(&"NOT_SET_ANYWHERE_42"),
            "not set: {names:?}"
        );
        let value = |name: &str| {
            given
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.clone())
        };
        assert_eq!(
            value("CARGO_PKG_NAME").as_deref(),
            Some("set"),
            "configured wins"
        );
        assert_eq!(
            value("CARGO_MANIFEST_DIR").as_deref(),
            Some(env!("CARGO_MANIFEST_DIR"))
        );
    }

    #[test]
    fn a_name_with_other_than_letters_digits_and_underscores_is_refused() {
        let names = ["OK_1", "NOT-OK"];
        assert_eq!(first_invalid(names), Some("NOT-OK"));
        assert_eq!(first_invalid(names[..1].iter().copied()), None);
        let inherit = ["OK".to_owned()];
        let env = [("A=B".to_owned(), "x".to_owned())];
        let why = refused_name(&inherit, &env, None).expect("refused");
        assert!(why.contains("`A=B` in the variables to set"), "{why}");
        assert!(refused_name(&inherit, &[], Some("")).is_some());
        assert!(refused_name(&inherit, &[], Some("TOKEN")).is_none());
    }
}
