//! The credentials an upstream configuration holds, and scrubbing them from whatever
//! comes back from the upstream.

use std::sync::Arc;

use toolgate_core::secret::Secret;
use toolgate_hooks::secrets::Scrubber;

use super::{UpstreamConfig, UpstreamTransport};

/// Words that mark an environment variable or a URL query parameter as a credential.
const CREDENTIAL_WORDS: [&str; 9] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
];

/// Values chosen by their name alone are treated as credentials only from this length
/// on: a flag such as `USE_API_KEY=true` must not turn every `true` in every output into
/// a placeholder. The configured credential is always one, whatever its length.
pub const MIN_GUESSED_SECRET_LEN: usize = 8;

/// Whether a variable or parameter called `name` holds a credential, by its name:
/// `GITHUB_TOKEN`, `api_key`, `DB_PASSWORD`, `X-Auth`…
///
/// ```
/// use toolgate_mcp::is_credential_name;
/// assert!(is_credential_name("GITHUB_TOKEN") && is_credential_name("api_key"));
/// assert!(!is_credential_name("LOG_LEVEL") && !is_credential_name("HOME"));
/// ```
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_WORDS.iter().any(|word| upper.contains(word))
}

impl UpstreamConfig {
    /// Every credential this configuration holds, which the upstream must never get to
    /// echo back through toolgate. Recognised:
    ///
    /// - the value of [`credential_env`](Self::credential_env), read from the environment
    ///   now, whatever its length;
    /// - by name, the whole value of each of the stdio program's environment variables
    ///   whose name marks it as a credential ([`is_credential_name`]: `GITHUB_TOKEN`,
    ///   `DB_PASSWORD`…);
    /// - by shape, in every environment value whatever its variable's name
    ///   (`DATABASE_URL`, `DSN`, `OPTS`…):
    ///   - a URL's password (`postgres://app:s3cr3t@db/app`), both as it is written in the
    ///     URL (percent-encoded) and decoded, and its query parameters named like
    ///     credentials (`…?password=s3cr3t`, `…?api_key=…`), as written and decoded;
    ///     its user name too when that looks like a token — 20 characters or more of
    ///     ASCII letters, digits, `_`, `-`, `.`, with a letter and a digit
    ///     (`https://ghp_…@github.com/org/repo.git`, with or without a password: git
    ///     URLs carry tokens there), never a role such as `app` or `x-access-token`;
    ///   - such a URL inside a longer text (`--dsn=postgres://…`, `-x 1 --db
    ///     postgres://… -v`, prose): from each `scheme://` (an RFC 3986 scheme) to the
    ///     next whitespace or quote, less trailing punctuation (`.`, `)`…);
    ///   - in a key=value connection string, the value of each key named like a
    ///     credential, or called `PWD`: libpq style (`host=db user=app password=s3cr3t`,
    ///     pairs separated by whitespace, `key = value` allowed, values optionally in
    ///     single quotes with backslash escapes) and ODBC/ADO.NET style
    ///     (`Server=db;Uid=app;Pwd=s3cr3t;`, pairs separated by `;`, values optionally in
    ///     `{…}` or quotes). Keys are words (ASCII letters, digits, `_`, `-`, `.`, and
    ///     spaces in the ODBC style), so a URL's `?a=b` is not read as a key; any such
    ///     pair counts, wherever it is in the value (`--db-password=…` in an option
    ///     string too);
    ///   - in a value that is a JSON object or array (it starts with `{` or `[`, and
    ///     parses), at any depth up to 32: each string, or integer (`"password":
    ///     12345678`, as its text), under a key named like a credential or `PWD`
    ///     (`private_key`, `client_secret`, `{"auth":{"token":…}}`), or in an array under
    ///     one — except keys naming a location (`token_uri`, `auth_url`: a service
    ///     account's public endpoints); an object under such a key is read key by key,
    ///     not taken whole. Every string in it is also read by the shapes above (a URL
    ///     or a connection string in a JSON string). A private key is held whole, not
    ///     line by line: an upstream echoes a PEM whole (raw or JSON-escaped, both
    ///     scrubbed), and its ~25 lines would each be another pattern every answer is
    ///     searched for;
    /// - the stdio program's arguments by the same shapes (`postgres://app:s3cr3t@db/app`,
    ///   `--db-password=s3cr3t`, a JSON blob), and the argument after an option named like
    ///   a credential (`--password s3cr3t`, `--api-key …`);
    /// - the password, token-like user name and credential query parameters of an HTTP
    ///   upstream's URL, the same way.
    ///
    /// Values guessed by name or shape count from [`MIN_GUESSED_SECRET_LEN`] characters.
    ///
    /// Not recognised: a secret under any other shape in a variable not named like a
    /// credential — inside a YAML or TOML blob, JSON nested in a JSON string, a
    /// base64-encoded document, a bearer header spelled out in text, a URL's user name
    /// that looks like a person's or role's, a URL without `scheme://` (`user:pw@host`),
    /// a part of a private key echoed alone, a file the value points to. Name such a
    /// variable like a credential, or pass the secret through
    /// [`credential_env`](Self::credential_env).
    ///
    /// The tools [`Upstream`](crate::Upstream) imports scrub these from every result and
    /// error before the pipeline sees them; a host adds them to its log and audit
    /// scrubbing.
    pub fn secrets(&self) -> Vec<Secret> {
        let mut found: Vec<String> = Vec::new();
        if let Some(value) = self
            .credential_env
            .as_ref()
            .and_then(|var| std::env::var(var).ok())
        {
            found.push(value);
        }
        let mut guessed = Vec::new();
        match &self.transport {
            UpstreamTransport::Stdio {
                args,
                env,
                inherit_env,
                ..
            } => {
                // Passed on from the host's environment: as much the program's as `env`.
                let inherited = inherit_env
                    .iter()
                    .filter_map(|name| Some((name.clone(), std::env::var(name).ok()?)));
                for (name, value) in env.iter().cloned().chain(inherited) {
                    secrets_by_shape(&value, &mut guessed);
                    if is_credential_name(&name) {
                        guessed.push(value);
                    }
                }
                for (at, arg) in args.iter().enumerate() {
                    secrets_by_shape(arg, &mut guessed);
                    if let Some(value) = args.get(at + 1)
                        && is_credential_option(arg)
                        && !value.starts_with('-')
                    {
                        guessed.push(value.clone());
                    }
                }
            }
            UpstreamTransport::Http { url } => {
                if let Ok(url) = url::Url::parse(url) {
                    url_secrets(&url, &mut guessed);
                }
            }
        }
        found.extend(
            guessed
                .into_iter()
                .filter(|v| v.chars().count() >= MIN_GUESSED_SECRET_LEN),
        );
        found.sort();
        found.dedup();
        found.into_iter().map(Secret::new).collect()
    }

    /// A scrubber for [`secrets`](Self::secrets), and what the host asked to be scrubbed
    /// too ([`scrub_also`](Self::scrub_also)), and `extra`.
    pub(crate) fn scrubber(&self, extra: Option<&Secret>) -> Scrubber {
        let own = self.secrets();
        let held = own.iter().chain(self.scrubbed_too.0.iter()).chain(extra);
        Scrubber::for_secrets(held)
    }
}

/// Credentials held elsewhere that an upstream's answers are scrubbed of too
/// ([`UpstreamConfig::scrub_also`]). Shown by count only; equal when they hold the same
/// values.
#[derive(Clone, Default)]
pub(crate) struct ScrubbedToo(pub(crate) Arc<Vec<Secret>>);

impl std::fmt::Debug for ScrubbedToo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScrubbedToo({} secrets)", self.0.len())
    }
}

impl PartialEq for ScrubbedToo {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && (self.0.iter().zip(other.0.iter())).all(|(a, b)| a.expose() == b.expose())
    }
}

/// The secrets `value` holds by its shape, whatever its variable's name: in a JSON object
/// or array, the values under credential-named keys and the secrets of each of its
/// strings; in any other text, its [`text_secrets`].
fn secrets_by_shape(value: &str, out: &mut Vec<String>) {
    if !json_secrets(value, out) {
        text_secrets(value, out);
    }
}

/// The secrets a text holds by its shape: a URL's (the text as a whole, or each URL in
/// it), a connection string's credential values.
fn text_secrets(text: &str, out: &mut Vec<String>) {
    let whole = url::Url::parse(text).ok();
    if let Some(url) = &whole {
        url_secrets(url, out);
    }
    for (start, candidate) in embedded_urls(text) {
        // A text that is a URL was read whole above, spaces in its password included.
        if start == 0 && whole.is_some() {
            continue;
        }
        if let Ok(url) = url::Url::parse(candidate) {
            url_secrets(&url, out);
        }
    }
    let pairs = libpq_pairs(text).into_iter().chain(odbc_pairs(text));
    out.extend(
        pairs
            .filter(|(key, _)| is_credential_key(key))
            .map(|(_, value)| value),
    );
}

/// How deep [`json_secrets`] reads into nested objects and arrays. serde_json refuses
/// documents nested deeper than 128 anyway; this bounds the walk on its own.
const MAX_JSON_DEPTH: usize = 32;

/// If `text` is a JSON object or array, adds its secrets and returns `true`: every string
/// or integer under a key named like a credential ([`is_credential_key`], except a key
/// naming a location: `token_uri`, `auth_url`), or in an array under one, at any depth up
/// to [`MAX_JSON_DEPTH`]; and the [`text_secrets`] of every string in it. A text that is
/// not (or not valid) JSON returns `false`: only one starting with `{` or `[` is parsed.
fn json_secrets(text: &str, out: &mut Vec<String>) -> bool {
    if !text.trim_start().starts_with(['{', '[']) {
        return false;
    }
    let Ok(document) = serde_json::from_str::<serde_json::Value>(text) else {
        return false;
    };
    // An explicit stack rather than recursion: a value's nesting must not be the stack's.
    let mut stack = vec![(&document, false, 0)];
    while let Some((value, named, depth)) = stack.pop() {
        match value {
            serde_json::Value::String(text) => {
                if named {
                    out.push(text.clone());
                }
                text_secrets(text, out);
            }
            serde_json::Value::Number(number) if named && !number.is_f64() => {
                out.push(number.to_string());
            }
            serde_json::Value::Array(items) if depth < MAX_JSON_DEPTH => {
                stack.extend(items.iter().map(|item| (item, named, depth + 1)));
            }
            serde_json::Value::Object(members) if depth < MAX_JSON_DEPTH => {
                stack.extend(members.iter().map(|(key, member)| {
                    let named = is_credential_key(key) && !names_a_location(key);
                    (member, named, depth + 1)
                }));
            }
            _ => {}
        }
    }
    true
}

/// Whether a key names where a credential is used rather than the credential:
/// `token_uri`, `auth_provider_x509_cert_url`, `authUrl`.
fn names_a_location(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    upper.ends_with("URL") || upper.ends_with("URI")
}

/// Each URL in `text`, with where it starts: from a `scheme://` (an RFC 3986 scheme, a
/// letter then letters, digits, `+`, `-` or `.`) to the next whitespace or quote, or to
/// the next URL's scheme, without trailing punctuation (`…/app.`, `…/app)`). The URLs do
/// not overlap, so reading them all is linear in the text.
fn embedded_urls(text: &str) -> Vec<(usize, &str)> {
    let is_scheme_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
    let starts: Vec<(usize, usize)> = text
        .match_indices("://")
        .filter_map(|(at, _)| {
            let run = text[..at].trim_end_matches(is_scheme_char).len();
            let letter = text[run..at].find(|c: char| c.is_ascii_alphabetic())?;
            Some((run + letter, at))
        })
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(i, &(start, at))| {
            let limit = starts.get(i + 1).map_or(text.len(), |&(next, _)| next);
            let end = text[at..limit]
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
                .map_or(limit, |stop| at + stop);
            let url = text[start..end]
                .trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '}', '>']);
            (start, url)
        })
        .collect()
}

/// `url`'s password and its query values named like credentials, each as written in the
/// URL and decoded (when that differs): an upstream may echo either. Also its user name
/// if that looks like a token ([`is_token_like`]): `https://ghp_…@github.com/org/repo`.
fn url_secrets(url: &url::Url, out: &mut Vec<String>) {
    if is_token_like(url.username()) {
        out.push(url.username().to_owned());
    }
    if let Some(password) = url.password() {
        out.push(password.to_owned());
        out.push(percent_decode(password));
    }
    for pair in url.query().unwrap_or_default().split('&') {
        let Some((name, value)) = url::form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        if is_credential_name(&name) {
            out.push(pair.split_once('=').map_or("", |(_, raw)| raw).to_owned());
            out.push(value.into_owned());
        }
    }
}

/// The length from which a URL's user name that [looks like a token](is_token_like) is
/// one. The shortest common tokens: an AWS access key id (20), a GitLab token (26).
const MIN_TOKEN_USER_NAME_LEN: usize = 20;

/// Whether a URL's user name looks like a token rather than a person or a role: at
/// least [`MIN_TOKEN_USER_NAME_LEN`] characters of ASCII letters, digits, `_`, `-` and `.`,
/// with both a letter and a digit (`ghp_…`, `glpat-…`, an Azure DevOps PAT), where
/// `app`, `git`, `oauth2` or `x-access-token` are not.
fn is_token_like(user: &str) -> bool {
    user.len() >= MIN_TOKEN_USER_NAME_LEN
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && user.chars().any(|c| c.is_ascii_digit())
        && user.chars().any(|c| c.is_ascii_alphabetic())
}

/// `text` percent-decoded (`%40` is `@`; a `%` not followed by two hex digits stays), as
/// UTF-8 with invalid sequences replaced.
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Whether a program's argument is an option named like a credential whose value is the
/// next argument: `--password`, `--api-key`, `-token` (not `--password=…`, read as a pair).
/// A next argument that starts with `-` is taken for another option, not a value.
fn is_credential_option(arg: &str) -> bool {
    let name = arg.trim_start_matches('-');
    name.len() < arg.len() && !name.contains('=') && is_credential_key(name)
}

/// Whether a connection string's key names a credential: named like one, or ODBC's `PWD`
/// (not a credential name on its own: `PWD` is also the working directory's variable).
fn is_credential_key(key: &str) -> bool {
    let is_word = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' '));
    !key.is_empty() && is_word && (is_credential_name(key) || key.eq_ignore_ascii_case("pwd"))
}

/// The key=value pairs of a libpq-style connection string: `host=db password='a b\'c'`.
/// Words without `=` are skipped; nothing is rejected.
fn libpq_pairs(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    let skip_spaces = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_spaces(&mut chars);
        if chars.peek().is_none() {
            return pairs;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        skip_spaces(&mut chars);
        if chars.next_if_eq(&'=').is_none() {
            continue;
        }
        skip_spaces(&mut chars);
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                value.push(c);
            }
        }
        pairs.push((key, value));
    }
}

/// The key=value pairs of an ODBC/ADO.NET-style connection string:
/// `Server=db;Uid=app;Pwd={a;b}};c};`. Keys and unquoted values are trimmed; a value may be
/// in braces (`}}` for `}`) or in single or double quotes (doubled to escape).
fn odbc_pairs(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ';').is_some() {}
        if chars.peek().is_none() {
            return pairs;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && *c != ';') {
            key.push(c);
        }
        if chars.next_if_eq(&'=').is_none() {
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let close = match chars.peek() {
            Some('{') => Some('}'),
            Some(q @ ('\'' | '"')) => Some(*q),
            _ => None,
        };
        let mut value = String::new();
        if let Some(close) = close {
            chars.next();
            while let Some(c) = chars.next() {
                if c == close && chars.next_if_eq(&close).is_none() {
                    break;
                }
                value.push(c);
            }
            // Whatever follows the closing brace or quote up to the next `;` is not part
            // of the value.
            while chars.next_if(|c| *c != ';').is_some() {}
        } else {
            while let Some(c) = chars.next_if(|c| *c != ';') {
                value.push(c);
            }
            value.truncate(value.trim_end().len());
        }
        pairs.push((key.trim().to_owned(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The secrets of a stdio upstream with this environment, exposed and sorted.
    fn env_secrets(env: &[(&str, &str)]) -> Vec<String> {
        let config = env.iter().fold(
            UpstreamConfig::stdio("db", "server", Vec::<String>::new()),
            |config, (name, value)| config.env(*name, *value),
        );
        exposed(&config)
    }

    fn exposed(config: &UpstreamConfig) -> Vec<String> {
        let secrets = config.secrets();
        secrets.iter().map(|s| s.expose().to_owned()).collect()
    }

    #[test]
    fn a_urls_password_is_a_secret_whatever_the_variables_name() {
        assert_eq!(
            env_secrets(&[("DATABASE_URL", "postgres://app:s3cr3t-pa55word@db/app")]),
            ["s3cr3t-pa55word"]
        );
        assert_eq!(
            env_secrets(&[("REDIS", "redis://:another-s3cret@cache:6379/0")]),
            ["another-s3cret"]
        );
    }

    #[test]
    fn a_percent_encoded_password_is_a_secret_as_written_and_decoded() {
        assert_eq!(
            env_secrets(&[("DATABASE_URL", "postgres://app:p%40ss%2Fw0rd%3A@db/app")]),
            ["p%40ss%2Fw0rd%3A", "p@ss/w0rd:"]
        );
        // Written unencoded, the URL parser encodes it: both forms again.
        assert_eq!(
            env_secrets(&[("DATABASE_URL", "mysql://app:p@ss w0rd!@db/app")]),
            ["p%40ss%20w0rd!", "p@ss w0rd!"]
        );
    }

    #[test]
    fn a_urls_credential_query_parameters_are_secrets() {
        assert_eq!(
            env_secrets(&[(
                "JDBC",
                "jdbc:postgresql://db/app?user=app&password=s3cr3t%2B42&ssl=true"
            )]),
            ["s3cr3t%2B42", "s3cr3t+42"]
        );
        let http = UpstreamConfig::http(
            "remote",
            "https://user:pa%24%24word@mcp.example/mcp?api_key=k3y%2Fvalue+1&page=12345678",
        );
        assert_eq!(
            exposed(&http),
            ["k3y%2Fvalue+1", "k3y/value 1", "pa$$word", "pa%24%24word"]
        );
    }

    #[test]
    fn the_programs_arguments_give_up_their_secrets_by_the_same_shapes() {
        let config = UpstreamConfig::stdio(
            "db",
            "server",
            [
                "--db",
                "postgres://app:s3cr3t-in-url@db/app",
                "--api-key",
                "k3y-after-option",
                "--auth-token=t0ken-in-pair",
                "--password",
                "--verbose",
                "--log-level",
                "debug-verbose",
            ],
        );
        let mut secrets = exposed(&config);
        secrets.sort();
        // `--password` followed by another option has no value (a flag asking for one).
        assert_eq!(
            secrets,
            ["k3y-after-option", "s3cr3t-in-url", "t0ken-in-pair"]
        );
        // A last option has no value to take; a bare dash is no option.
        let config = UpstreamConfig::stdio("db", "server", ["-", "--token"]);
        assert!(exposed(&config).is_empty());
    }

    #[test]
    fn a_libpq_connection_strings_credential_values_are_secrets() {
        assert_eq!(
            env_secrets(&[("PG_DSN", "host=db port=5432 user=app password=s3cr3t-pa55")]),
            ["s3cr3t-pa55"]
        );
        assert_eq!(
            env_secrets(&[(
                "PG_DSN",
                r"host=db password = 'it\'s a s3cret' sslpassword='key-pass-99'"
            )]),
            ["it's a s3cret", "key-pass-99"]
        );
        // An option string is read the same way.
        assert_eq!(
            env_secrets(&[("SERVER_OPTS", "--verbose --db-password=hunter2-hunter2")]),
            ["hunter2-hunter2"]
        );
    }

    #[test]
    fn an_odbc_connection_strings_credential_values_are_secrets() {
        assert_eq!(
            env_secrets(&[("MSSQL", "Server=tcp:db,1433;Password=s3cr3t-pa55;")]),
            ["s3cr3t-pa55"]
        );
        assert_eq!(
            env_secrets(&[(
                "ODBC",
                "Driver={ODBC Driver 18};Server=db;UID=app;PWD={s3c;r}}3t pw};Encrypt=yes"
            )]),
            ["s3c;r}3t pw"]
        );
        assert_eq!(
            env_secrets(&[(
                "STORAGE",
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=bXlrZXk9PQ==;EndpointSuffix=core.windows.net"
            )]),
            ["bXlrZXk9PQ=="]
        );
        // (The libpq reading, which knows no double quotes, adds the quoted text too.)
        assert!(
            env_secrets(&[(
                "ADO",
                "Data Source=db; User ID=app; Password=\"a;b\"\"c-d-e\""
            )])
            .contains(&"a;b\"c-d-e".to_owned())
        );
    }

    #[test]
    fn values_without_a_credential_are_no_secrets() {
        let secrets = env_secrets(&[
            ("DATABASE_URL", "postgres://app@db:5432/app?sslmode=require"),
            (
                "UPSTREAM",
                "https://auth.example.com/path?client=web-frontend",
            ),
            ("PG_DSN", "host=db port=5432 dbname=application"),
            (
                "MSSQL",
                "Server=db;Database=application;Trusted_Connection=yes",
            ),
            ("GREETING", "hello=world; see https://example.com/?a=b"),
            ("PWD", "/home/app/workdir"),
            ("LOG_LEVEL", "debug"),
            (
                "DB_CONFIG",
                r#"{"host":"db","port":5432,"user":"app","options":{"sslmode":"require"}}"#,
            ),
            (
                "GOOGLE_ENDPOINTS",
                r#"{"token_uri":"https://oauth2.googleapis.com/token","max_tokens":4096}"#,
            ),
            ("LIST", r#"["postgres://app@db/app", "host=db user=app"]"#),
            (
                "OPTS",
                "-x 1 --db postgres://app@db:5432/app?sslmode=require -v",
            ),
            (
                "NOTE",
                "see https://docs.example.com/guide?page=2. Or ssh://git@github.com/org/repo.git",
            ),
            ("READER", "postgres://analytics_readonly_user:@db/app"),
            ("PUSH", "https://x-access-token@github.com/org/repo.git"),
        ]);
        assert!(secrets.is_empty(), "{secrets:?}");
    }

    #[test]
    fn a_service_accounts_private_key_in_a_json_blob_is_a_secret() {
        let key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n";
        let account = serde_json::json!({
            "type": "service_account",
            "project_id": "my-project-123456",
            "private_key_id": "0123456789abcdef0123456789abcdef01234567",
            "private_key": key,
            "client_email": "svc@my-project-123456.iam.gserviceaccount.com",
            "client_id": "123456789012345678901",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": "https://oauth2.googleapis.com/token",
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        });
        // Held whole, not line by line; the public endpoints under `*_uri`/`*_url` keys
        // are not credentials.
        assert_eq!(
            env_secrets(&[("GCP_SA", &account.to_string())]),
            [key, "0123456789abcdef0123456789abcdef01234567"]
        );
        // Pretty-printed, as an argument, the same.
        let config = UpstreamConfig::stdio(
            "gcp",
            "server",
            ["--account".to_owned(), format!("  {account:#}")],
        );
        assert!(exposed(&config).contains(&key.to_owned()));
    }

    #[test]
    fn credential_named_keys_at_any_depth_of_a_json_blob_are_secrets() {
        assert_eq!(
            env_secrets(&[("UPSTREAM_CONFIG", r#"{"auth":{"token":"t0ken-nested-99"}}"#)]),
            ["t0ken-nested-99"]
        );
        assert_eq!(
            env_secrets(&[(
                "DB_CONFIG",
                r#"{"host":"db","password":"s3cr3t-pass","replicas":[{"host":"r1","pwd":12345678}],
                   "client_secret":"cl1ent-s3cret","apiKeys":["first-k3y-1","second-k3y-2"]}"#
            )]),
            [
                "12345678",
                "cl1ent-s3cret",
                "first-k3y-1",
                "s3cr3t-pass",
                "second-k3y-2"
            ]
        );
    }

    #[test]
    fn the_strings_of_a_json_blob_are_read_by_shape() {
        assert_eq!(
            env_secrets(&[(
                "SETTINGS",
                r#"[{"db":{"url":"postgres://app:json-s3cr3t@db/app"}},"host=db password=libpq-in-json"]"#
            )]),
            ["json-s3cr3t", "libpq-in-json"]
        );
    }

    #[test]
    fn a_url_inside_a_longer_argument_is_read() {
        let config = UpstreamConfig::stdio(
            "db",
            "server",
            [
                "--dsn=postgres://app:dsn-s3cr3t@db/app",
                "-x 1 --db postgres://app:opts-s3cr3t@db:5432/app?sslmode=require -v",
            ],
        );
        let mut secrets = exposed(&config);
        secrets.sort();
        assert_eq!(secrets, ["dsn-s3cr3t", "opts-s3cr3t"]);
    }

    #[test]
    fn a_url_inside_prose_in_an_env_value_is_read() {
        assert_eq!(
            env_secrets(&[
                (
                    "NOTES",
                    "cache at redis://:hunter2hunter2@cache:6379/0, primary \"mysql://app:quoted-s3cr3t@db/app\"."
                ),
                (
                    "MIRROR",
                    "(mirror: https://u:paren-s3cret@m.example/x?token=query-t0ken-1)"
                ),
            ]),
            [
                "hunter2hunter2",
                "paren-s3cret",
                "query-t0ken-1",
                "quoted-s3cr3t"
            ]
        );
    }

    #[test]
    fn a_token_like_user_name_is_a_secret() {
        let token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
        for url in [
            format!("https://{token}@github.com/org/repo.git"),
            format!("https://{token}:@api.example/v1"),
            format!("git clone https://{token}:x-oauth-basic@github.com/org/repo.git"),
        ] {
            assert!(
                env_secrets(&[("REPO", &url)]).contains(&token.to_owned()),
                "{url}"
            );
        }
        let http = UpstreamConfig::http("remote", format!("https://{token}@mcp.example/mcp"));
        assert_eq!(exposed(&http), [token]);
        // A role or a person is no token.
        assert_eq!(
            env_secrets(&[(
                "REPO",
                "https://x-access-token:ghs_access-t0ken-value@github.com/org/repo.git"
            )]),
            ["ghs_access-t0ken-value"]
        );
    }

    #[test]
    fn hostile_json_and_embedded_urls_neither_panic_nor_make_secrets() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let deep_open = "{\"a\":".repeat(10_000);
        let huge = serde_json::to_string(
            &(0..100_000)
                .map(|i| format!("ordinary value number {i}"))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let schemes = "a://".repeat(50_000);
        let hostile = [
            deep.as_str(),
            deep_open.as_str(),
            huge.as_str(),
            schemes.as_str(),
            "{",
            "[",
            "{\"password\": \"unterminated-s3cret",
            "{\"password\": \"ok-s3cret-value\",}",
            "{\"password\": null, \"token\": true, \"key\": 1.5e300}",
            "://",
            "text ending in ://",
            "postgres://",
            "1://u:digit-scheme@h",
            "+://u:plus-scheme1@h",
            "://u:no-scheme-pw@h",
            "ünïcode://ü:ü@ü",
            "«postgres://app:ünï-s3cr3t-ü@db/app» and 🔑://x:🔑🔑🔑🔑🔑🔑🔑🔑@h",
        ];
        for value in hostile {
            let secrets = env_secrets(&[("VALUE", value)]);
            let _ = exposed(&UpstreamConfig::stdio("x", "server", [value]));
            if value.starts_with('«') {
                // Written percent-encoded in the URL, and decoded.
                assert_eq!(
                    secrets,
                    ["%C3%BCn%C3%AF-s3cr3t-%C3%BC", "ünï-s3cr3t-ü"],
                    "{value}"
                );
            } else {
                assert!(secrets.is_empty(), "{value}: {secrets:?}");
            }
        }
        // Past the depth limit nothing is read, though serde_json parses it.
        let nested = "[".repeat(40) + "{\"password\":\"too-deep-s3cret\"}" + &"]".repeat(40);
        assert!(env_secrets(&[("VALUE", &nested)]).is_empty());
        let shallow = "[".repeat(20) + "{\"password\":\"deep-s3cret\"}" + &"]".repeat(20);
        assert_eq!(env_secrets(&[("VALUE", &shallow)]), ["deep-s3cret"]);
    }

    #[test]
    fn short_guessed_values_are_no_secrets() {
        assert!(
            env_secrets(&[
                ("DATABASE_URL", "postgres://app:short@db/app"),
                ("PG_DSN", "host=db password=short"),
                ("MSSQL", "Server=db;Pwd=short;"),
            ])
            .is_empty()
        );
    }

    #[test]
    fn a_credential_named_variable_stays_a_secret_whole() {
        assert_eq!(
            env_secrets(&[("DB_PASSWORD", "host=db password=inner-s3cret")]),
            ["host=db password=inner-s3cret", "inner-s3cret"]
        );
    }

    #[test]
    fn hostile_values_neither_panic_nor_make_secrets() {
        let long = "password=".repeat(10_000) + &"=;'{\\".repeat(10_000);
        let hostile = [
            "",
            "=",
            "==",
            ";",
            "'",
            "{",
            "password=",
            "password='",
            "password='\\",
            "pwd={",
            "pwd={}}",
            "Password=\"",
            " = ; = ",
            "%",
            "%zz%4",
            "postgres://:@",
            "postgres://u:%@h",
            "postgres://u:%F0%9F@h",
            "x://u:p%ZZ@h?password&=&&token=%",
            long.as_str(),
            "mot de passe=pässwörd-ünïcode password=пароль-секрет",
            "Server=db;Password=🔑🔑🔑🔑🔑🔑🔑🔑;",
        ];
        for value in hostile {
            let _ = env_secrets(&[("VALUE", value)]);
            let _ = exposed(&UpstreamConfig::http("remote", value));
        }
        assert_eq!(
            env_secrets(&[(
                "DSN",
                "mot de passe=pässwörd-ünïcode password=пароль-секрет"
            )]),
            ["пароль-секрет"]
        );
        assert_eq!(
            env_secrets(&[("DSN", "Server=db;Password=🔑🔑🔑🔑🔑🔑🔑🔑;")]),
            ["🔑🔑🔑🔑🔑🔑🔑🔑"]
        );
        assert_eq!(percent_decode("%F0%9F"), "\u{FFFD}");
        assert_eq!(percent_decode("%+1%4"), "%+1%4");
    }
}
