//! The checks on a request that comes with a console session cookie instead of an
//! `Authorization` header: the cookie, where it came from, and the token of a state change.

use axum::http::{HeaderMap, Method, header};

/// The name of the session cookie on a loopback host, over plain HTTP.
pub const COOKIE: &str = "toolgate_console";

/// The name of the session cookie everywhere else: a browser takes a cookie of this name
/// only with `Secure`, `Path=/` and no `Domain`, so a page of a sibling subdomain, or one
/// served over plain HTTP, cannot plant a session of its choosing in its place.
pub const SECURE_COOKIE: &str = "__Host-toolgate_console";

/// The session cookie's name: [`SECURE_COOKIE`] when it is sent `Secure`.
pub fn cookie_name(secure: bool) -> &'static str {
    if secure { SECURE_COOKIE } else { COOKIE }
}

/// The header a state-changing request carries its session's token in.
pub const CSRF_HEADER: &str = "x-toolgate-csrf";

/// Why a request with a session cookie is refused before its route sees it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Forgery {
    /// Sent by a page of another site (`Origin` or `Sec-Fetch-Site` says so).
    #[error(
        "refused: this request comes from another site; the console's own pages may change things, other sites may not"
    )]
    CrossSite,
    /// No token, or not the session's.
    #[error(
        "refused: a request that changes something must carry the session's token in `x-toolgate-csrf` (the console sends it; reload the page if it is missing)"
    )]
    BadToken,
}

/// The value of the session cookie, if the request has one: of the name [`set_cookie`]
/// gives it when `secure`, and no other.
pub fn session_cookie(headers: &HeaderMap, secure: bool) -> Option<&str> {
    cookie(headers, cookie_name(secure))
}

/// Whether the request carries the session cookie (of the name read when `secure`) more
/// than once, in one `Cookie` header or in several. A browser sends two of one name when a
/// page of another port of the same host, or of a sibling subdomain, set one with another
/// path: which of them comes first is theirs to choose, so neither is taken.
pub fn session_cookie_repeated(headers: &HeaderMap, secure: bool) -> bool {
    let name = cookie_name(secure);
    pairs(headers).filter(|(n, _)| *n == name).nth(1).is_some()
}

/// The value of the cookie `name`, if the request has one that is not empty.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    pairs(headers)
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

/// The request's cookies, as name and value, in the order sent.
fn pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Whether a request with this method may change something (everything but reads).
pub fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Refuses a request a browser says another site sent: `Sec-Fetch-Site` other than
/// `same-origin`, or an `Origin` whose host is not the `Host` the request was sent to.
/// A request without either (not from a browser) passes: it cannot carry the browser's
/// cookie against its owner's will.
///
/// # Errors
///
/// [`Forgery::CrossSite`].
pub fn same_origin(headers: &HeaderMap) -> Result<(), Forgery> {
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or(""));
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && site != "same-origin"
    {
        return Err(Forgery::CrossSite);
    }
    if let Some(origin) = text(header::ORIGIN) {
        let authority = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"));
        let host = text(header::HOST);
        match (authority, host) {
            (Some(authority), Some(host)) if authority.eq_ignore_ascii_case(host) => {}
            _ => return Err(Forgery::CrossSite),
        }
    }
    Ok(())
}

/// Whether `host` (a `Host` header: name or address, maybe a port) is this machine's
/// loopback, where the cookie may go without `Secure` over plain HTTP.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `Set-Cookie` value of a session: `HttpOnly`, `SameSite=Strict`, the whole site
/// (the console's pages call `/v1`), `Secure` and named [`SECURE_COOKIE`] unless served on
/// loopback. `max_age_s` 0 deletes it.
pub fn set_cookie(value: &str, max_age_s: u64, secure: bool) -> String {
    format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{}",
        cookie_name(secure),
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; toolgate_console=abc ; b=2")]);
        assert_eq!(session_cookie(&h, false), Some("abc"));
        assert_eq!(
            session_cookie(&headers(&[("cookie", "toolgate_consoleX=1")]), false),
            None
        );
        assert_eq!(
            session_cookie(&headers(&[("cookie", "toolgate_console=")]), false),
            None
        );
        assert_eq!(session_cookie(&HeaderMap::new(), false), None);
    }

    #[test]
    fn served_securely_the_session_is_read_from_the_host_prefixed_cookie_only() {
        // A sibling subdomain or a plain-HTTP page can set `toolgate_console` for this
        // host, never `__Host-toolgate_console`.
        let planted = headers(&[("cookie", "toolgate_console=planted")]);
        assert_eq!(session_cookie(&planted, true), None);
        let both = headers(&[(
            "cookie",
            "toolgate_console=planted; __Host-toolgate_console=own",
        )]);
        assert_eq!(session_cookie(&both, true), Some("own"));
        let set = set_cookie("own", 60, true);
        assert!(
            set.starts_with("__Host-toolgate_console=own; Path=/;"),
            "{set}"
        );
        assert!(
            set.ends_with("; Secure") && !set.contains("Domain"),
            "{set}"
        );
        assert!(set_cookie("own", 60, false).starts_with("toolgate_console=own;"));
    }

    #[test]
    fn a_request_from_the_same_host_passes_and_one_from_another_site_is_refused() {
        let same = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert_eq!(same_origin(&same), Ok(()));
        let foreign = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://evil.example"),
        ]);
        assert_eq!(same_origin(&foreign), Err(Forgery::CrossSite));
        let other_port = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:9999"),
        ]);
        assert_eq!(same_origin(&other_port), Err(Forgery::CrossSite));
        let opaque = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert_eq!(same_origin(&opaque), Err(Forgery::CrossSite));
        let sibling = headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-site")]);
        assert_eq!(same_origin(&sibling), Err(Forgery::CrossSite));
        assert_eq!(
            same_origin(&headers(&[("host", "h")])),
            Ok(()),
            "not a browser"
        );
    }

    #[test]
    fn loopback_hosts_are_told_from_others() {
        for host in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:8080",
            "127.9.9.9",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "gateway.example",
            "10.0.0.1:8080",
            "[2001:db8::1]:443",
            "localhost.evil",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_outside_loopback() {
        let c = set_cookie("id", 60, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("; Secure"));
        assert!(!set_cookie("id", 60, false).contains("Secure"));
    }

    #[test]
    fn only_reads_leave_state_unchanged() {
        assert!(!changes_state(&Method::GET));
        assert!(!changes_state(&Method::HEAD));
        assert!(changes_state(&Method::POST));
        assert!(changes_state(&Method::DELETE));
    }

    #[test]
    fn the_session_cookie_sent_twice_is_told_apart_from_other_cookies_and_the_other_name() {
        let twice = headers(&[("cookie", "toolgate_console=a; x=1; toolgate_console=b")]);
        assert!(session_cookie_repeated(&twice, false));
        let in_two_headers = headers(&[
            ("cookie", "toolgate_console=a"),
            ("cookie", "toolgate_console=b"),
        ]);
        assert!(session_cookie_repeated(&in_two_headers, false));
        let once = headers(&[("cookie", "toolgate_console=a; toolgate_console_flow=b")]);
        assert!(!session_cookie_repeated(&once, false));
        // Served securely, only the `__Host-` cookie is read: a planted plain one is not
        // the session's, and does not lock its owner out.
        let planted = headers(&[(
            "cookie",
            "toolgate_console=planted; __Host-toolgate_console=mine",
        )]);
        assert!(!session_cookie_repeated(&planted, true));
        assert_eq!(session_cookie(&planted, true), Some("mine"));
    }
}
