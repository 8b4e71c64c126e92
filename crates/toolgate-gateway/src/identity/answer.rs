//! Reading an identity provider's answer whole, up to a bound.
//!
//! What the gateway reads from an issuer it keeps: a key set, an exchanged credential, a
//! discovery document's endpoints, a refusal's words in callers' errors. An issuer, or
//! whoever answers at its address, must not make the gateway read or hold megabytes for
//! it, so every such answer is read in chunks and dropped past its bound.

use thiserror::Error;

/// The largest discovery document or key set read, in bytes (a key set of a few keys is a
/// few KiB).
pub(crate) const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// The largest answer of a token endpoint read, in bytes: a token response is a few KiB,
/// and what is read is kept (a credential in a cache or a session, a refusal's words in
/// callers' errors or the log).
pub(crate) const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

/// Why an answer was not read whole.
#[derive(Debug, Error)]
pub(crate) enum AnswerError {
    /// The connection failed, or the answer stopped, before its end.
    #[error("the answer was cut short")]
    CutShort(#[source] reqwest::Error),
    /// The answer is longer than it may be.
    #[error("it is larger than {0} bytes")]
    TooLarge(usize),
}

/// The body of `response`, read to its end, or [`AnswerError::TooLarge`] as soon as it is
/// known to be over `limit` bytes (from its `Content-Length`, or as its chunks arrive).
pub(crate) async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, AnswerError> {
    let too_large = || AnswerError::TooLarge(limit);
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(AnswerError::CutShort)? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::{Body, Bytes};
    use axum::routing::get;
    use futures::stream;

    use super::{AnswerError, read_bounded};

    /// A server on loopback answering `/sized` with a body of `len` bytes and its length,
    /// and `/streamed` with the same body in 1 KiB chunks and no length.
    async fn server(len: usize) -> String {
        let app = Router::new()
            .route("/sized", get(move || async move { vec![b'x'; len] }))
            .route(
                "/streamed",
                get(move || async move {
                    let chunks = (0..len.div_ceil(1024)).map(move |i| {
                        let size = 1024.min(len - i * 1024);
                        Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; size]))
                    });
                    Body::from_stream(stream::iter(chunks))
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{address}")
    }

    async fn read(url: &str, limit: usize) -> Result<Vec<u8>, AnswerError> {
        read_bounded(reqwest::get(url).await.unwrap(), limit).await
    }

    #[tokio::test]
    async fn an_answer_within_the_bound_is_read_whole_sized_or_streamed() {
        let base = server(10 * 1024).await;
        for path in ["sized", "streamed"] {
            let body = read(&format!("{base}/{path}"), 10 * 1024).await.unwrap();
            assert_eq!(body.len(), 10 * 1024, "{path}");
        }
    }

    #[tokio::test]
    async fn an_answer_over_the_bound_is_refused_sized_or_streamed() {
        let base = server(4 << 20).await;
        for path in ["sized", "streamed"] {
            let error = read(&format!("{base}/{path}"), 64 * 1024)
                .await
                .unwrap_err();
            assert!(
                matches!(error, AnswerError::TooLarge(65536)),
                "{path}: {error:?}"
            );
            assert_eq!(error.to_string(), "it is larger than 65536 bytes");
        }
    }
}
