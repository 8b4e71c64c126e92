//! The place of a request given up before its answer — its caller cancelled, went away
//! or ran out of time — among its upstream's requests in flight and in its caller's share
//! ([`places`](super::places)).
//!
//! Giving a request up does not stop it. The upstream is told (`notifications/cancelled`),
//! but it may finish the work anyway, or take its time to stop; and a connection closed
//! under a request's stream is no cancellation in MCP. Were the place given back with the
//! cancel, a caller that starts calls and cancels them in a loop would keep any number of
//! them running at the upstream, past its share (`max_connections_per_caller`) and the
//! upstream's bound (`max_connections`): the share would isolate nobody. So the place is
//! kept, by a task of its own — the caller's cancel returns at once — until the upstream
//! is known to be done with the request:
//!
//! - the request's answer comes on its stream, or the stream ends or fails: what is left
//!   of the stream is read here for that, and dropped;
//! - at the latest, at the hold limit ([`Place::held_until`]): the upstream's
//!   `call_timeout` after the request was given up (its deadline, if later), so an
//!   upstream that says nothing makes a cancelled request hold its place no longer than
//!   the upstream may run a request. Not the request's own deadline: a caller chooses
//!   that, and one that gave its calls 50 ms would keep any number of them running at the
//!   upstream, a place each given back 2 s later. What is left of its answer (its stream,
//!   its POST under way) is let go sooner, at its deadline ([`Place::answer_let_go_at`]):
//!   a server may stop a request whose client has gone, and its connection is not held
//!   for nothing.
//!
//! Not when toolgate's connection to the upstream closes: over HTTP that says nothing of
//! what the upstream runs. A reload drops the connections of the configuration it
//! replaces while the upstream still runs their calls, and giving their places back then
//! let a reload every quarter second send the upstream five times its `max_connections`.
//!
//! A request given up while it waited for its place was never sent, and holds nothing. One
//! given up while its POST is under way — before the answer's head came — is not dropped
//! (hyper would close its HTTP connection, and nothing would tell when the upstream is
//! done): the POST is handed here, and goes on until its answer's head comes, within the
//! same limits. An answer that is a stream is then read as above; any other — the answer
//! itself, a failure status, no answer, the connection failing — says the upstream is
//! done, and the place is given back at once. One toolgate sends from the calling task,
//! given up between a stream the upstream ended and its resume, may be running at the
//! upstream with nothing to tell when it ends: its place is kept until the hold limit.
//! So is the place of a request rmcp sends (a list, a read, a
//! call toolgate leaves to rmcp) given up while its POST is under way, or while rmcp's
//! GET that resumes its stream (`Last-Event-ID`) is: rmcp drops the POST or the GET as
//! the request is given up, reqwest's request with it, and the place is handed here from
//! the guard that held it ([`streams`](super::streams)).
//!
//! Nothing here runs for a request that is answered: it costs a cancelled request one
//! task, and an answered one nothing.

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::time::Instant;

use super::places::Place;
use super::response_stream::{Carried, SseStream, carried};

/// What tells when the upstream is done with a request given up (see the module).
pub(crate) enum Watched {
    /// Nothing: the place is kept until the hold limit.
    Nothing,
    /// The request's stream: until its answer or its end.
    Stream(SseStream),
    /// The request's POST, under way: the stream its answer brings, watched as
    /// [`Stream`](Self::Stream); `None` when the answer brings none (the upstream is done).
    Posting(BoxFuture<'static, Option<SseStream>>),
}

/// Keeps `place`, of a request given up at `given_up` before its answer, until the
/// upstream is done with the request (see the module): as `watched` tells — the answer to
/// `origin` (the request's id as answers carry it) or the end of the request's stream;
/// or the hold limit.
pub(crate) async fn keep(place: Place, watched: Watched, origin: Option<Value>, given_up: Instant) {
    let done = async {
        let stream = match watched {
            Watched::Nothing => std::future::pending().await,
            Watched::Stream(stream) => stream,
            Watched::Posting(posting) => match posting.await {
                Some(stream) => stream,
                None => return,
            },
        };
        answered_or_ended(stream, origin.as_ref()).await;
    };
    tokio::select! {
        () = done => return,
        () = tokio::time::sleep_until(place.answer_let_go_at(given_up)) => {}
    }
    // What is left of the answer is let go (a server may stop a request whose client has
    // gone); the upstream may still run the request, and the place is kept.
    tokio::time::sleep_until(place.held_until(given_up)).await;
    tracing::debug!(
        "a request given up before its answer kept its place among the MCP server's requests in flight until its hold limit, with no word from the server that it stopped"
    );
}

/// [`keep`], from a task of its own, given up now; `place` is given back at once when
/// there is no runtime to run the task (it is shutting down).
pub(crate) fn keep_in_task(place: Place, watched: Watched, origin: Option<Value>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(keep(place, watched, origin, Instant::now()));
    }
}

/// Reads `stream` until the answer to `origin` comes on it, or it ends or fails.
async fn answered_or_ended(mut stream: SseStream, origin: Option<&Value>) {
    while let Some(Ok(event)) = stream.next().await {
        let answered = match (event.data.as_deref(), origin) {
            (Some(data), Some(origin)) => {
                matches!(carried(data), Carried::AnswerTo(id) if id == *origin)
            }
            _ => false,
        };
        if answered {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::places::Places;
    use super::super::response_stream::LET_GO;
    use super::*;

    fn event(data: &str) -> Result<sse_stream::Sse, sse_stream::Error> {
        Ok(sse_stream::Sse {
            data: Some(data.to_owned()),
            ..Default::default()
        })
    }

    /// A stream that sends `events`, then stays open until `end` fires.
    fn stream_until(
        events: Vec<Result<sse_stream::Sse, sse_stream::Error>>,
        end: tokio::sync::oneshot::Receiver<()>,
    ) -> SseStream {
        let tail = futures::stream::once(async move {
            let _ = end.await;
        })
        .filter_map(|()| async { None });
        futures::stream::iter(events).chain(tail).boxed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_given_up_requests_place_is_kept_until_its_stream_ends() {
        let places = Places::new("crm", 2, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        let (end, ended) = tokio::sync::oneshot::channel();
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        let stream = stream_until(vec![event(progress)], ended);
        keep_in_task(place, Watched::Stream(stream), Some(Value::from(1)));
        tokio::time::sleep(LET_GO * 5).await;
        assert_eq!(places.free(), 1, "the upstream may still run it");
        drop(end);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(places.free(), 2, "its stream ended: given back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_given_up_requests_place_is_given_back_with_its_answer() {
        let places = Places::new("crm", 2, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        let (_end, ended) = tokio::sync::oneshot::channel();
        let events = vec![
            event(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
            event(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        ];
        let task = tokio::spawn(keep(
            place,
            Watched::Stream(stream_until(events, ended)),
            Some(Value::from(1)),
            Instant::now(),
        ));
        task.await
            .expect("done at its answer, another's being no end");
        assert_eq!(places.free(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_given_up_requests_place_is_given_back_at_the_hold_limit() {
        let places = Places::new("crm", 2, 1, Duration::from_secs(30));
        // A deadline of its caller's, sooner than the upstream's `call_timeout`: the
        // upstream may still run the request, and the place is held for `call_timeout`.
        let given_up = Instant::now();
        let deadline = given_up + Duration::from_millis(50);
        let place = places.take(None, Some(deadline)).await.expect("a place");
        let (_end, ended) = tokio::sync::oneshot::channel();
        let silent = stream_until(Vec::new(), ended);
        keep_in_task(place, Watched::Stream(silent), None);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(places.free(), 1, "past the caller's deadline: still held");
        tokio::time::sleep_until(given_up + Duration::from_secs(30) - Duration::from_millis(1))
            .await;
        assert_eq!(places.free(), 1);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(
            places.free(),
            2,
            "the hold limit: the upstream's call_timeout"
        );

        // A deadline later than that: held until it.
        let deadline = Instant::now() + Duration::from_secs(40);
        let place = places.take(None, Some(deadline)).await.expect("a place");
        keep_in_task(place, Watched::Nothing, None);
        tokio::time::sleep_until(deadline - Duration::from_millis(1)).await;
        assert_eq!(places.free(), 1);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(places.free(), 2, "the hold limit: its deadline");

        // A `call_timeout` under LET_GO: kept for LET_GO, the floor.
        let quick = Places::new("crm", 2, 1, Duration::from_millis(100));
        let place = quick.take(None, None).await.expect("a place");
        keep_in_task(place, Watched::Nothing, None);
        tokio::time::sleep(LET_GO - Duration::from_millis(1)).await;
        assert_eq!(quick.free(), 1);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(quick.free(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_given_up_while_its_post_is_under_way_is_kept_until_its_answer_comes() {
        let places = Places::new("crm", 2, 1, Duration::from_secs(30));

        // Answered without a stream (JSON, a failure, the connection failing): given
        // back as the answer comes.
        let place = places.take(None, None).await.expect("a place");
        let (answer, answered) = tokio::sync::oneshot::channel::<Option<SseStream>>();
        let posting = Box::pin(async move { answered.await.ok().flatten() });
        keep_in_task(place, Watched::Posting(posting), Some(Value::from(1)));
        tokio::time::sleep(LET_GO * 5).await;
        assert_eq!(places.free(), 1, "no answer yet: the upstream may run it");
        assert!(answer.send(None).is_ok(), "kept");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(places.free(), 2, "answered: given back");

        // Answered with a stream: kept until the answer comes on it.
        let place = places.take(None, None).await.expect("a place");
        let (answer, answered) = tokio::sync::oneshot::channel::<Option<SseStream>>();
        let posting = Box::pin(async move { answered.await.ok().flatten() });
        keep_in_task(place, Watched::Posting(posting), Some(Value::from(1)));
        let (events, events_in) = futures::channel::mpsc::unbounded();
        assert!(answer.send(Some(events_in.boxed())).is_ok(), "kept");
        tokio::time::sleep(LET_GO * 5).await;
        assert_eq!(places.free(), 1, "a stream, and no answer on it yet");
        events
            .unbounded_send(event(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#))
            .expect("read");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(places.free(), 2, "its answer came on the stream");
    }

    #[tokio::test(start_paused = true)]
    async fn a_post_under_way_is_given_up_at_the_hold_limit() {
        let places = Places::new("crm", 2, 1, Duration::from_secs(30));
        let given_up = Instant::now();
        let deadline = given_up + Duration::from_secs(10);
        let place = places.take(None, Some(deadline)).await.expect("a place");
        let posting = Box::pin(std::future::pending());
        keep_in_task(place, Watched::Posting(posting), None);
        let limit = given_up + Duration::from_secs(30);
        tokio::time::sleep_until(limit - Duration::from_millis(1)).await;
        assert_eq!(places.free(), 1);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(
            places.free(),
            2,
            "the hold limit: the upstream's call_timeout"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_deadline_the_hold_limit_is_the_upstreams_call_timeout() {
        let places = Places::new("crm", 1, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        keep_in_task(place, Watched::Nothing, None);
        tokio::time::sleep(Duration::from_secs(30) - Duration::from_millis(1)).await;
        assert_eq!(places.free(), 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(places.free(), 1);
    }
}
