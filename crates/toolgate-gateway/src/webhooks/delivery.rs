//! [`Notifier`]: the webhooks of one configuration, each with its own bounded queue and
//! its own worker that delivers it, and the task that — while its configuration is the one
//! served — watches for expiries and, once retired, waits for the workers to finish.
//!
//! Each webhook has its own queue ([`QUEUE_CAPACITY`]) and its own delivery slots
//! ([`IN_FLIGHT`]), so that a receiver that is slow, down or never answers fills only its
//! own: it delays and drops only its own events, never another webhook's. Within a
//! webhook's queue each caller holds at most its `caller_share` of events
//! ([`CALLER_SHARE`](super::CALLER_SHARE) unless configured;
//! [`admission`](super::admission)), so that one
//! caller's flood drops only their own.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use toolgate_core::error::with_causes;
use toolgate_core::suspension::SuspensionStore;
use toolgate_hooks::concurrency::{KeyedShare, SharePlace};

use super::admission::{DropLog, Dropped, QUEUE_CAPACITY};
use super::event::Event;
use super::signature::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use crate::config::{WebhookConfig, WebhookEventName, WebhookFormatName};

/// The waiting calls a notifier watches for expiry while it serves: the process's
/// [`Notifications`](super::Notifications), behind a trait so that the notifier does not
/// name the hub that holds it.
pub(super) trait Expiries: Send + Sync {
    /// The earliest expiry watched.
    fn next_expiry(&self) -> Option<SystemTime>;

    /// Reports the calls whose expiry has come, as `store` confirms.
    fn expire_due<'a>(&'a self, store: &'a dyn SuspensionStore) -> BoxFuture<'a, ()>;

    /// Watches too the calls `store` keeps waiting that are not watched yet (up to `cap`
    /// in all): those that started on another replica, or before this process.
    fn adopt_stored<'a>(&'a self, store: &'a dyn SuspensionStore, cap: usize) -> BoxFuture<'a, ()>;
}

/// How often a serving notifier looks in the suspension store for waiting calls it does
/// not watch yet — those another replica parked since — so that their expiry is reported
/// even when that replica is gone by then, and claims the expiries nobody told (those of
/// calls that expired before any replica watching them came to them).
pub const ADOPT_EVERY: Duration = Duration::from_secs(30);

/// How a notifier's task reaches the [`Expiries`] it watches.
pub(super) struct Watch {
    /// The watched calls, while they exist: held weakly, so that dropped notifications
    /// end the task rather than being kept alive by it.
    pub upgrade: Box<dyn Fn() -> Option<Box<dyn Expiries>> + Send + Sync>,
    /// Wakes the task when a call is watched.
    pub wake_ups: watch::Receiver<()>,
}

/// Deliveries to one webhook in progress at once, retries included (each webhook has its
/// own, so a receiver that never answers holds only its own).
pub const IN_FLIGHT: usize = 16;

/// Attempts per delivery, the first included.
pub const MAX_ATTEMPTS: u32 = 5;

/// The wait before the second attempt; it doubles for each next one, up to
/// [`MAX_BACKOFF`], and is jittered down by up to half.
pub const BASE_BACKOFF: Duration = Duration::from_millis(500);

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// How long one attempt may take, connecting included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a notifier replaced by a reload has to deliver what it queued.
const RETIRED_GRACE: Duration = Duration::from_secs(60);

/// How many deliveries to webhooks ended, by event and outcome (`delivered`, `failed`,
/// `dropped`); a `dropped` one by `reason` too (`caller_share`, `queue_full`, `stopped`).
pub const DELIVERIES: &str = "toolgate_webhook_deliveries_total";

/// How many attempts were made again after a failed one, by event.
pub const RETRIES: &str = "toolgate_webhook_retries_total";

/// One configured webhook, ready to send.
struct Webhook {
    /// `policies.approval.webhooks[i]`, what logs name it by (its address may hold a
    /// token).
    name: String,
    url: reqwest::Url,
    secret: Vec<u8>,
    format: WebhookFormatName,
    events: Vec<WebhookEventName>,
    /// The most events one caller holds in its queue.
    caller_share: usize,
}

/// One event for one webhook.
struct Delivery {
    webhook: usize,
    event: Arc<Event>,
    /// Its place in its caller's share of the queue, freed when the delivery ends.
    _held: SharePlace<Arc<str>>,
}

/// One webhook's bounded queue, what each caller holds of it, and its drops.
struct Queue {
    sender: mpsc::Sender<Delivery>,
    shares: Arc<KeyedShare<Arc<str>>>,
    drops: Mutex<DropLog>,
}

/// The webhooks of one configuration, their queues and their task.
pub(crate) struct Notifier {
    webhooks: Arc<[Webhook]>,
    /// One queue per webhook, in the order of `webhooks`.
    queues: Vec<Queue>,
    retired: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Notifier {
    /// The notifier of `webhooks` (checked at load), with its task started. It watches the
    /// expiries of `watch` (confirming each with `store`, and taking in the calls `store`
    /// keeps waiting, up to `adopt_cap`) until it is retired.
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be made (no TLS backend).
    pub(super) fn start(
        webhooks: &[WebhookConfig],
        watch: Watch,
        store: Arc<dyn SuspensionStore>,
        adopt_cap: usize,
    ) -> Result<Arc<Notifier>, String> {
        let webhooks: Arc<[Webhook]> = webhooks
            .iter()
            .enumerate()
            .map(|(i, w)| {
                Ok(Webhook {
                    name: format!("policies.approval.webhooks[{i}]"),
                    url: reqwest::Url::parse(&w.url.0).map_err(|_| {
                        format!("`policies.approval.webhooks[{i}].url` is not an address")
                    })?,
                    secret: w.secret.0.as_bytes().to_vec(),
                    format: w.format,
                    events: w.events.clone(),
                    caller_share: w.caller_share,
                })
            })
            .collect::<Result<Vec<_>, String>>()?
            .into();
        let client = reqwest::Client::builder()
            .timeout(ATTEMPT_TIMEOUT)
            .connect_timeout(ATTEMPT_TIMEOUT)
            // A redirect would send the signed body where the configuration does not say.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("the webhook client cannot be made: {e}"))?;
        let retired = CancellationToken::new();
        let (queues, workers): (Vec<_>, Vec<_>) = (0..webhooks.len())
            .map(|webhook| {
                let (sender, received) = mpsc::channel(QUEUE_CAPACITY);
                let queue = Queue {
                    sender,
                    shares: KeyedShare::new(webhooks[webhook].caller_share),
                    drops: Mutex::default(),
                };
                let worker = Worker {
                    webhook,
                    received,
                    webhooks: webhooks.clone(),
                    client: client.clone(),
                    retired: retired.clone(),
                };
                (queue, worker)
            })
            .unzip();
        let task = tokio::spawn(run(Run {
            workers,
            watch,
            store,
            adopt_cap,
            retired: retired.clone(),
        }));
        Ok(Arc::new(Notifier {
            webhooks,
            queues,
            retired,
            task: Mutex::new(Some(task)),
        }))
    }

    /// Whether some webhook takes events of `kind`.
    pub(crate) fn subscribes(&self, kind: WebhookEventName) -> bool {
        self.webhooks.iter().any(|w| w.events.contains(&kind))
    }

    /// Queues `event` for every webhook that takes it, each in its own queue, never
    /// waiting. It is dropped for a webhook — that webhook only — when its caller holds
    /// the webhook's `caller_share` of that queue already, or the queue is full: counted, and told in
    /// the log once in a while ([`DROPS_LOGGED_EVERY`](super::DROPS_LOGGED_EVERY)).
    pub(crate) fn enqueue(&self, event: Arc<Event>) {
        let caller = event.call.caller_key();
        for (i, (webhook, queue)) in self.webhooks.iter().zip(&self.queues).enumerate() {
            if !webhook.events.contains(&event.kind) {
                continue;
            }
            let Some(held) = queue.shares.take(Arc::clone(&caller)) else {
                dropped(webhook, queue, &event, Dropped::CallerShare);
                continue;
            };
            let delivery = Delivery {
                webhook: i,
                event: event.clone(),
                _held: held,
            };
            // A refused delivery is dropped here, and its place in the share with it.
            if let Err(refused) = queue.sender.try_send(delivery) {
                let reason = match refused {
                    TrySendError::Full(_) => Dropped::QueueFull,
                    TrySendError::Closed(_) => Dropped::Stopped,
                };
                dropped(webhook, queue, &event, reason);
            }
        }
    }

    /// Stops watching for expiries and taking events; what is queued is still delivered.
    pub(crate) fn retire(&self) {
        self.retired.cancel();
    }

    /// Waits up to `wait` for the task to end (after [`retire`](Self::retire)), then stops
    /// it, and with it the webhooks' workers.
    pub(crate) async fn finished(&self, wait: Duration) {
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(mut task) = task
            && tokio::time::timeout(wait, &mut task).await.is_err()
        {
            tracing::warn!(
                wait_ms = wait.as_millis() as u64,
                "webhook deliveries still pending at shutdown are abandoned"
            );
            task.abort();
        }
    }

    #[cfg(test)]
    pub(super) fn take_task(&self) -> Option<JoinHandle<()>> {
        self.task.lock().ok().and_then(|mut t| t.take())
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.retired.cancel();
    }
}

struct Run {
    /// The webhooks' workers, started by the task.
    workers: Vec<Worker>,
    watch: Watch,
    store: Arc<dyn SuspensionStore>,
    /// The most calls watched for expiry.
    adopt_cap: usize,
    retired: CancellationToken,
}

/// The task: starts one [`work`]er per webhook, and fires expiries while the notifier
/// serves, taking in the store's waiting calls at once and every [`ADOPT_EVERY`]. Once
/// retired it waits for the workers to end, and ends; stopped, it stops them.
async fn run(mut run: Run) {
    let mut workers = JoinSet::new();
    for worker in run.workers.drain(..) {
        workers.spawn(work(worker));
    }
    let mut next_adoption = tokio::time::Instant::now();
    loop {
        run.watch.wake_ups.borrow_and_update();
        let watching = !run.retired.is_cancelled();
        let next_expiry = watching
            .then(|| (run.watch.upgrade)())
            .flatten()
            .and_then(|n| n.next_expiry());
        let until_expiry = next_expiry
            .map(|at| at.duration_since(SystemTime::now()).unwrap_or_default())
            .unwrap_or(Duration::MAX);
        tokio::select! {
            () = tokio::time::sleep_until(next_adoption), if watching => {
                if let Some(notifications) = (run.watch.upgrade)() {
                    notifications.adopt_stored(&*run.store, run.adopt_cap).await;
                }
                next_adoption = tokio::time::Instant::now() + ADOPT_EVERY;
            }
            () = tokio::time::sleep(until_expiry), if next_expiry.is_some() => {
                if let Some(notifications) = (run.watch.upgrade)() {
                    notifications.expire_due(&*run.store).await;
                }
            }
            changed = run.watch.wake_ups.changed(), if watching => {
                if changed.is_err() {
                    run.retired.cancel();
                }
            }
            () = run.retired.cancelled(), if watching => {}
            joined = workers.join_next(), if !watching => {
                if joined.is_none() {
                    break;
                }
            }
            else => break,
        }
    }
}

/// One webhook's worker: its queue and what it needs to deliver it.
struct Worker {
    /// Which of `webhooks` it delivers to.
    webhook: usize,
    received: mpsc::Receiver<Delivery>,
    webhooks: Arc<[Webhook]>,
    client: reqwest::Client,
    retired: CancellationToken,
}

/// A worker: delivers its webhook's queue, up to [`IN_FLIGHT`] at once. Once retired it
/// delivers what is queued for up to [`RETIRED_GRACE`], abandons the rest (counted
/// `dropped`) and ends.
async fn work(mut worker: Worker) {
    let abandon = CancellationToken::new();
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    let mut give_up = None;
    loop {
        let give_up_at = give_up.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            received = worker.received.recv(), if open && in_flight.len() < IN_FLIGHT => {
                match received {
                    Some(delivery) => in_flight.push(deliver(
                        worker.client.clone(),
                        worker.webhooks.clone(),
                        delivery,
                        abandon.clone(),
                    )),
                    None => open = false,
                }
            }
            () = worker.retired.cancelled(), if give_up.is_none() => {
                worker.received.close();
                give_up = Some(tokio::time::Instant::now() + RETIRED_GRACE);
            }
            () = tokio::time::sleep_until(give_up_at), if give_up.is_some() && !abandon.is_cancelled() => {
                abandon.cancel();
                // What is still queued is dropped too.
                while let Ok(delivery) = worker.received.try_recv() {
                    count_dropped(&delivery.event, Dropped::Stopped);
                }
            }
            else => break,
        }
        if !open && in_flight.is_empty() {
            break;
        }
    }
    tracing::debug!(
        webhook = %worker.webhooks[worker.webhook].name,
        "a webhook's worker ended"
    );
}

/// How one attempt ended.
enum Attempt {
    Delivered,
    /// Worth trying again (a timeout, a refused connection, 408, 429, 5xx).
    Retry(String),
    /// Not worth trying again (another 4xx, a redirect).
    Refused(String),
}

/// Delivers one event to one webhook: up to [`MAX_ATTEMPTS`], with backoff, each attempt
/// signed afresh under the same id; counted once by its outcome.
async fn deliver(
    client: reqwest::Client,
    webhooks: Arc<[Webhook]>,
    delivery: Delivery,
    abandon: CancellationToken,
) {
    let webhook = &webhooks[delivery.webhook];
    let event = &delivery.event;
    let body = event.body(webhook.format);
    let mut attempt = 1;
    loop {
        let ended = tokio::select! {
            ended = send(&client, webhook, event, &body) => ended,
            () = abandon.cancelled() => return abandoned(webhook, event),
        };
        let why = match ended {
            Attempt::Delivered => {
                count(event, "delivered");
                tracing::debug!(webhook = %webhook.name, event = event.type_name(), event_id = %event.id, attempt, "webhook delivered");
                return;
            }
            Attempt::Refused(why) => {
                return failed(webhook, event, attempt, &why, "the receiver refused it");
            }
            Attempt::Retry(why) if attempt >= MAX_ATTEMPTS => {
                return failed(webhook, event, attempt, &why, "no attempt succeeded");
            }
            Attempt::Retry(why) => why,
        };
        tracing::debug!(webhook = %webhook.name, event_id = %event.id, attempt, error = %why, "webhook attempt failed; trying again");
        metrics::counter!(RETRIES, "event" => event.kind.as_str()).increment(1);
        tokio::select! {
            () = tokio::time::sleep(backoff(attempt)) => {}
            () = abandon.cancelled() => return abandoned(webhook, event),
        }
        attempt += 1;
    }
}

async fn send(client: &reqwest::Client, webhook: &Webhook, event: &Event, body: &[u8]) -> Attempt {
    let timestamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let signature = sign(&webhook.secret, &event.id, timestamp, body);
    let sent = client
        .post(webhook.url.clone())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(ID_HEADER, &event.id)
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, signature)
        .body(body.to_vec())
        .send()
        .await;
    let status = match sent {
        Ok(response) => response.status(),
        // Without the address: it may hold a token.
        Err(error) => {
            return Attempt::Retry(without_host(
                &webhook.url,
                with_causes(&error.without_url()),
            ));
        }
    };
    let code = status.as_u16();
    match code {
        200..=299 => Attempt::Delivered,
        408 | 429 | 500..=599 => Attempt::Retry(format!("answered {status}")),
        _ => Attempt::Refused(format!("answered {status}")),
    }
}

/// `why` with the host of `url` left out, should a cause quote it (a certificate not valid
/// for the name asked, say): logs name a webhook by its field, never by its address.
fn without_host(url: &reqwest::Url, why: String) -> String {
    match url.host_str() {
        Some(host) if why.contains(host) => why.replace(host, "the webhook's host"),
        _ => why,
    }
}

/// The wait after failed attempt `attempt` (1-based): [`BASE_BACKOFF`] doubled per attempt,
/// at most [`MAX_BACKOFF`], less a random part of up to half, so that receivers coming back
/// are not met by every sender at once.
fn backoff(attempt: u32) -> Duration {
    let full = BASE_BACKOFF
        .saturating_mul(1 << (attempt - 1).min(16))
        .min(MAX_BACKOFF);
    let half = full / 2;
    half + half.mul_f64(fastrand::f64())
}

fn count(event: &Event, outcome: &'static str) {
    metrics::counter!(DELIVERIES, "event" => event.kind.as_str(), "outcome" => outcome)
        .increment(1);
}

fn count_dropped(event: &Event, reason: Dropped) {
    metrics::counter!(
        DELIVERIES,
        "event" => event.kind.as_str(),
        "outcome" => "dropped",
        "reason" => reason.label(),
    )
    .increment(1);
}

/// `event` was not queued for `webhook`, for `reason`: counted, and told in the log when
/// the webhook's [`DropLog`] says so. The caller is named only for their own share's
/// drops, the one reason that is theirs.
fn dropped(webhook: &Webhook, queue: &Queue, event: &Event, reason: Dropped) {
    count_dropped(event, reason);
    let told = queue
        .drops
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .dropped(reason, tokio::time::Instant::now());
    let Some(dropped) = told else { return };
    let call = &event.call;
    let (user, tenant) = match reason {
        Dropped::CallerShare => (Some(&*call.user), call.tenant.as_deref()),
        Dropped::QueueFull | Dropped::Stopped => (None, None),
    };
    tracing::warn!(
        webhook = %webhook.name,
        reason = reason.label(),
        event = event.type_name(),
        event_id = %event.id,
        suspension_id = %call.id,
        user,
        tenant,
        dropped,
        capacity = QUEUE_CAPACITY,
        caller_share = webhook.caller_share,
        "{}",
        reason.why()
    );
}

/// `event` was not delivered to `webhook`: counted, and logged with the webhook's field, the
/// attempts and the last error — never with the webhook's address, which may hold a token.
fn failed(webhook: &Webhook, event: &Event, attempts: u32, why: &str, summary: &str) {
    count(event, "failed");
    tracing::warn!(
        webhook = %webhook.name,
        event = event.type_name(),
        event_id = %event.id,
        suspension_id = %event.call.id,
        attempts,
        error = %why,
        "a webhook was not delivered: {summary}"
    );
}

fn abandoned(webhook: &Webhook, event: &Event) {
    count_dropped(event, Dropped::Stopped);
    tracing::warn!(
        webhook = %webhook.name,
        event = event.type_name(),
        event_id = %event.id,
        "a webhook still being delivered when its notifier stopped was abandoned"
    );
}

#[cfg(test)]
mod tests {
    use toolgate_core::User;
    use toolgate_core::suspension::InMemorySuspensionStore;

    use super::super::admission::CALLER_SHARE;
    use super::*;
    use crate::config::EnvString;
    use crate::webhooks::CallSummary;

    /// A notifier of one webhook that takes every event, its task not yet run.
    fn notifier() -> (Arc<Notifier>, watch::Sender<()>) {
        notifier_sharing(CALLER_SHARE)
    }

    /// [`notifier`], each caller holding at most `caller_share` events of the queue.
    fn notifier_sharing(caller_share: usize) -> (Arc<Notifier>, watch::Sender<()>) {
        let (wake, wake_ups) = watch::channel(());
        let watch = Watch {
            upgrade: Box::new(|| None),
            wake_ups,
        };
        let webhook = WebhookConfig {
            url: EnvString("http://127.0.0.1:9/hook".into()),
            secret: EnvString("0123456789abcdef".into()),
            format: WebhookFormatName::Json,
            events: WebhookEventName::ALL.to_vec(),
            caller_share,
        };
        let store = Arc::new(InMemorySuspensionStore::default());
        let notifier = Notifier::start(&[webhook], watch, store, 10).unwrap();
        (notifier, wake)
    }

    /// A `suspension.waiting` event of a call by `user` of `tenant`.
    fn waiting(user: &str, tenant: &str) -> Arc<Event> {
        let call = CallSummary {
            id: "susp-1".into(),
            tool: "deploy".into(),
            user: user.into(),
            tenant: Some(tenant.into()),
            reason: "needs approval".into(),
            suspended_at: SystemTime::now(),
            expires_at: None,
        };
        let kind = WebhookEventName::Waiting;
        Arc::new(Event::new(kind, SystemTime::now(), Arc::new(call), None))
    }

    #[tokio::test]
    async fn a_callers_events_past_their_share_are_dropped_and_another_callers_still_queued() {
        let (notifier, _wake) = notifier();

        // No await: the worker has taken nothing out of the queue yet.
        for _ in 0..CALLER_SHARE + 10 {
            notifier.enqueue(waiting("ann", "acme"));
        }
        notifier.enqueue(waiting("ann", "globex"));

        let queue = &notifier.queues[0];
        assert_eq!(
            QUEUE_CAPACITY - queue.sender.capacity(),
            CALLER_SHARE + 1,
            "ann of acme's share, and ann of globex's one event"
        );
        let of_acme = User::new("ann").with_tenant("acme");
        assert_eq!(
            queue.shares.held_by(&Arc::from(of_acme.caller_key())),
            CALLER_SHARE
        );
    }

    #[tokio::test]
    async fn a_webhook_sharing_two_events_per_caller_drops_a_callers_third() {
        let (notifier, _wake) = notifier_sharing(2);

        // No await: the worker has taken nothing out of the queue yet.
        for _ in 0..5 {
            notifier.enqueue(waiting("ann", "acme"));
        }
        notifier.enqueue(waiting("bob", "acme"));

        let queue = &notifier.queues[0];
        assert_eq!(
            QUEUE_CAPACITY - queue.sender.capacity(),
            3,
            "ann's two, and bob's one"
        );
        let ann = User::new("ann").with_tenant("acme");
        assert_eq!(queue.shares.held_by(&Arc::from(ann.caller_key())), 2);
    }

    #[test]
    fn an_attempts_error_quoting_the_webhooks_host_leaves_it_out() {
        let url = reqwest::Url::parse("https://hooks-token-1234.example/x").unwrap();
        let why =
            "invalid peer certificate: certificate not valid for name \"hooks-token-1234.example\"";
        let shown = without_host(&url, why.to_owned());
        assert!(!shown.contains("hooks-token-1234"), "{shown}");
        assert!(shown.contains("certificate not valid for name"), "{shown}");
        let unrelated = "tcp connect error: Connection refused (os error 111)";
        assert_eq!(without_host(&url, unrelated.to_owned()), unrelated);
    }

    #[test]
    fn the_backoff_doubles_up_to_its_bound_with_jitter_of_up_to_half() {
        for attempt in 1..=8 {
            let full = BASE_BACKOFF
                .saturating_mul(1 << (attempt - 1))
                .min(MAX_BACKOFF);
            let wait = backoff(attempt);
            assert!(wait >= full / 2 && wait <= full, "{attempt}: {wait:?}");
        }
        assert!(backoff(30) <= MAX_BACKOFF);
    }
}
