//! What a person sees when a sign-in through the issuer fails.
//!
//! `GET /console/oauth/start` and `GET /console/oauth/callback` are navigations of a
//! browser: a person followed the console's link, or the issuer sent them back. A refusal
//! there is answered to a browser (an `Accept` that names `text/html`) with a small page of
//! the console's look that says what went wrong in words, with its code, and links back to
//! the console. Anything else (a script, a probe, the tests) keeps the JSON error of every
//! other route, whose status and `code` it can act on.
//!
//! The page keeps the refusal's status and headers (`Retry-After`): a refused sign-in is
//! still a 401 to the browser and in the metrics, an issuer that cannot be reached a 502.
//! It is marked as a page of the gateway's own ([`OwnPage`]), which the gateway's rewriting
//! of plain-text 4xx answers into JSON errors leaves alone.
//!
//! The issuer's own `error` and `error_description` come in the callback's address, which
//! anyone can write and send a person to: they are shown only for a `state` this browser
//! started (any other callback gets a fixed page, quoting nothing), and then as quoted
//! text, held to the characters RFC 6749 allows in them (others shown as `\u{…}`) and to a
//! length, and escaped as HTML.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use toolgate_http::HttpError as ApiError;

use crate::http::OwnPage;

/// The most characters of the issuer's `error` that are shown.
pub const MAX_ISSUER_ERROR_CHARS: usize = 64;

/// The most characters of the issuer's `error_description` that are shown.
pub const MAX_ISSUER_DESCRIPTION_CHARS: usize = 300;

/// Whether the request is a browser's navigation, which is answered with a page.
pub fn wants_page(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|kind| {
            kind.split(';')
                .next()
                .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("text/html"))
        })
}

/// `error` answered as the request asks: a page for a browser, JSON otherwise.
pub fn refusal(headers: &HeaderMap, error: ApiError) -> Response {
    if wants_page(headers) {
        page(error)
    } else {
        error.into_response()
    }
}

/// The page for `error`: its status and headers (`Retry-After`), its message and code in
/// the body.
pub fn page(error: ApiError) -> Response {
    let html = render(&error.body().message, error.code());
    let mut response = error.into_response();
    response.extensions_mut().insert(OwnPage);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response.headers_mut().remove(header::CONTENT_LENGTH);
    *response.body_mut() = Body::from(html);
    response
}

fn render(message: &str, code: &str) -> String {
    // The message starts in lower case, as every API message does: the page gives it a
    // capital and a full stop.
    let mut sentence = String::with_capacity(message.len() + 1);
    let mut chars = message.chars();
    if let Some(first) = chars.next() {
        sentence.extend(first.to_uppercase());
        sentence.push_str(chars.as_str());
    }
    if !sentence.ends_with('.') {
        sentence.push('.');
    }
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<meta name=\"referrer\" content=\"no-referrer\">\n\
<title>Not signed in · toolgate console</title>\n\
<link rel=\"stylesheet\" href=\"/console/app.css\">\n</head>\n<body>\n\
<header><h1>toolgate <span>console</span></h1></header>\n<main>\n\
<section id=\"sign-in-failed\" aria-labelledby=\"failed-title\">\n\
<h2 id=\"failed-title\">You are not signed in</h2>\n\
<p id=\"status\" class=\"error\" role=\"alert\">{}</p>\n\
<p class=\"hint\">Error code: <code>{}</code></p>\n\
<p><a class=\"button\" href=\"/console\">Back to the console</a></p>\n\
</section>\n</main>\n</body>\n</html>\n",
        escape(&sentence),
        escape(code),
    )
}

/// `text` as HTML text or attribute value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the issuer said, as a message quotes it: `error` and, when given,
/// `error_description`, each held to the characters RFC 6749 allows in them (printable
/// ASCII; anything else, such as a bidirectional control, is shown as `\u{…}`) and to
/// [`MAX_ISSUER_ERROR_CHARS`] and [`MAX_ISSUER_DESCRIPTION_CHARS`].
pub fn issuer_said(error: &str, description: Option<&str>) -> String {
    let error = shown(error, MAX_ISSUER_ERROR_CHARS);
    match description.map(str::trim).filter(|d| !d.is_empty()) {
        Some(description) => format!(
            "`{error}`, \"{}\"",
            shown(description, MAX_ISSUER_DESCRIPTION_CHARS)
        ),
        None => format!("`{error}`"),
    }
}

fn shown(text: &str, most: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == most {
            out.push('…');
            break;
        }
        if c == ' ' || c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.push_str(&c.escape_unicode().to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    async fn body_of(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn a_browsers_navigation_wants_a_page_and_a_script_json() {
        // What Chromium sends when it follows a link or a redirect.
        let chromium =
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";
        assert!(wants_page(&accept(chromium)));
        assert!(wants_page(&accept("Text/HTML; q=1")));
        assert!(!wants_page(&accept("*/*")));
        assert!(!wants_page(&accept("application/json")));
        assert!(!wants_page(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn a_refusal_is_a_page_in_words_escaped_with_its_retry_after() {
        let error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_sign_ins_from_address",
            "wait <b>a</b> \"while\" & 'retry'",
        )
        .retry_after(std::time::Duration::from_secs(90));
        let headers = accept("text/html");
        let response = refusal(&headers, error);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "90");
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        let body = body_of(response).await;
        assert!(
            body.contains("Wait &lt;b&gt;a&lt;/b&gt; &quot;while&quot; &amp; &#39;retry&#39;."),
            "{body}"
        );
        assert!(body.contains("<code>too_many_sign_ins_from_address</code>"));
        assert!(body.contains("href=\"/console\""), "{body}");
        assert!(!body.contains("<b>"), "{body}");
    }

    #[test]
    fn a_server_error_keeps_its_status_on_the_page() {
        let error = ApiError::new(StatusCode::BAD_GATEWAY, "issuer_unavailable", "down");
        let response = page(error);
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    }

    #[tokio::test]
    async fn a_script_keeps_the_json_error() {
        let error = ApiError::new(StatusCode::UNAUTHORIZED, "sign_in_refused", "no");
        let response = refusal(&accept("*/*"), error);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: serde_json::Value = serde_json::from_str(&body_of(response).await).unwrap();
        assert_eq!(body["error"]["code"], "sign_in_refused", "{body}");
    }

    #[test]
    fn what_the_issuer_said_is_held_to_printable_ascii_and_a_length() {
        assert_eq!(issuer_said("access_denied", None), "`access_denied`");
        assert_eq!(
            issuer_said("access_denied", Some("  ")),
            "`access_denied`",
            "a blank description is none"
        );
        assert_eq!(
            issuer_said("access_denied", Some("The user said no")),
            "`access_denied`, \"The user said no\""
        );
        // A bidirectional control and a line break are shown, not obeyed.
        assert_eq!(
            issuer_said("x\u{202E}y", Some("a\nb")),
            "`x\\u{202e}y`, \"a\\u{a}b\""
        );
        let long = "d".repeat(10_000);
        let said = issuer_said(&"e".repeat(1_000), Some(&long));
        assert_eq!(
            said,
            format!(
                "`{}…`, \"{}…\"",
                "e".repeat(MAX_ISSUER_ERROR_CHARS),
                "d".repeat(MAX_ISSUER_DESCRIPTION_CHARS)
            )
        );
    }
}
