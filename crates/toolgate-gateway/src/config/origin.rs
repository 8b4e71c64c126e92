//! Browser origins (`scheme://host[:port]`), as the `Origin` header and
//! `server.mcp_allowed_origins` spell them.

use std::fmt;

use serde::Deserialize;
use serde::de::Deserializer;

/// A web origin: scheme, host and port (the scheme's default port when not written).
#[derive(Clone, PartialEq, Eq)]
pub struct WebOrigin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl WebOrigin {
    /// Reads `scheme://host[:port]`; `None` for anything else (a path, a query, no host,
    /// `null`).
    pub fn parse(text: &str) -> Option<WebOrigin> {
        let uri: http::Uri = text.trim().parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        if uri.query().is_some()
            || !matches!(uri.path(), "" | "/")
            || authority.as_str().contains('@')
        {
            return None;
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = authority.port_u16().or(match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        Some(WebOrigin { scheme, host, port })
    }

    /// Whether this is a page served from this host's loopback interface
    /// (`http(s)://localhost`, `127.0.0.1` or `[::1]`, any port).
    pub fn is_loopback(&self) -> bool {
        matches!(self.scheme.as_str(), "http" | "https")
            && matches!(self.host.as_str(), "localhost" | "127.0.0.1" | "::1")
    }
}

impl fmt::Debug for WebOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl<'de> Deserialize<'de> for WebOrigin {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::values::parse_str(deserializer, |text| {
            WebOrigin::parse(text).ok_or_else(|| {
                format!("`{text}` is not an origin: write `scheme://host` or `scheme://host:port`, e.g. `https://app.example.com`")
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::WebOrigin;

    #[test]
    fn origins_match_by_scheme_host_and_port() {
        let parse = |t| WebOrigin::parse(t).expect(t);
        assert_eq!(
            parse("https://App.example.com"),
            parse("https://app.example.com:443")
        );
        assert_ne!(
            parse("http://app.example.com"),
            parse("https://app.example.com")
        );
        assert_ne!(
            parse("https://app.example.com:8443"),
            parse("https://app.example.com")
        );
        assert!(parse("http://localhost:5173").is_loopback());
        assert!(parse("http://[::1]:3000").is_loopback());
        assert!(!parse("http://localhost.evil.example").is_loopback());
        assert!(WebOrigin::parse("null").is_none());
        assert!(WebOrigin::parse("https://a.example/path").is_none());
    }
}
