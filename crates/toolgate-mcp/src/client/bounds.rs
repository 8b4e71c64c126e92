//! The bound on the requests in flight to an HTTP upstream, kept across its connections
//! ([`UpstreamBounds`]).
//!
//! Each [`Upstream`](super::Upstream) bounds the requests in flight to its server
//! (`max_connections`, each caller's share of it: [`places`](super::places)). A host that
//! reconnects its upstreams — the gateway on a reload — has two of them for a while: the
//! old one still carries the calls made before, the new one takes the calls made after.
//! With a bound each, the server would be sent up to twice its `max_connections`, and a
//! caller up to twice its share, until the old calls end; a caller could even reload-time
//! its calls to get past its share. Connected with the same [`UpstreamBounds`], an upstream
//! takes the bound of the one before it when both name the same server at the same address
//! with the same bound, share and `call_timeout`: the requests of both count against one
//! bound. A changed bound starts afresh (the old connection's requests count against the
//! old one until they end).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::places::Places;

/// The bounds on the requests in flight to HTTP upstreams, kept for as long as the
/// upstreams connected with it live, so that one connected again — on a host's reload —
/// shares its bound with the one before it (see
/// [`UpstreamConfig::bounds`](super::UpstreamConfig::bounds)). Clones share the bounds.
///
/// It holds no upstream alive: a bound is kept while an upstream using it lives, and
/// forgotten with the last of them.
///
/// ```
/// use toolgate_mcp::{UpstreamBounds, UpstreamConfig};
///
/// // Made once for the process, and given to each configuration's upstreams.
/// let bounds = UpstreamBounds::new();
/// let crm = UpstreamConfig::http("crm", "http://127.0.0.1:9001/mcp")
///     .max_connections(64)
///     .bounds(&bounds);
/// ```
#[derive(Clone, Default)]
pub struct UpstreamBounds(Arc<Mutex<HashMap<Key, Weak<Places>>>>);

/// What must be the same for two upstreams to share a bound.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    server: String,
    url: String,
    max: usize,
    share: usize,
    hold: Duration,
}

impl UpstreamBounds {
    /// No bound kept yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bound of upstream `server` at `url` (`None` for a stdio upstream, whose bound
    /// is always new: it has none to share): at most `max` requests in flight, `share` of
    /// them a caller's, the place of one given up kept at most `hold`. The one kept for
    /// the same server, address, bound, share and hold, when an upstream still uses it;
    /// else a new one, kept from now on. `true` with one taken over.
    pub(crate) fn places(
        &self,
        server: &str,
        url: Option<&str>,
        max: usize,
        share: usize,
        hold: Duration,
    ) -> (Arc<Places>, bool) {
        let Some(url) = url else {
            return (Places::new(server, max, share, hold), false);
        };
        let key = Key {
            server: server.to_owned(),
            url: url.to_owned(),
            max,
            share,
            hold,
        };
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Those no upstream uses any more go: the table holds at most one bound per
        // upstream alive, and the one made last.
        kept.retain(|_, places| places.strong_count() > 0);
        if let Some(places) = kept.get(&key).and_then(Weak::upgrade) {
            return (places, true);
        }
        let places = Places::new(server, max, share, hold);
        kept.insert(key, Arc::downgrade(&places));
        (places, false)
    }

    /// How many bounds are kept: those of the upstreams alive.
    #[cfg(test)]
    fn len(&self) -> usize {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.values().filter(|p| p.strong_count() > 0).count()
    }
}

impl PartialEq for UpstreamBounds {
    /// The same bounds: clones of one another.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for UpstreamBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBounds").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:9001/mcp";
    const HOLD: Duration = Duration::from_secs(30);

    /// The bound of `crm` at [`URL`], 4 requests in flight, 2 a caller's.
    fn crm(bounds: &UpstreamBounds) -> Arc<Places> {
        bounds.places("crm", Some(URL), 4, 2, HOLD).0
    }

    #[test]
    fn an_upstream_connected_again_alike_shares_the_bound_of_the_one_before() {
        let bounds = UpstreamBounds::new();
        let (old, taken_over) = bounds.places("crm", Some(URL), 4, 2, HOLD);
        assert!(!taken_over, "the first is new");
        let (new, taken_over) = bounds.places("crm", Some(URL), 4, 2, HOLD);
        assert!(Arc::ptr_eq(&old, &new) && taken_over);
        let _held = old.try_take().expect("a place");
        assert_eq!(
            new.free(),
            3,
            "a request of the old one counts in the new one's"
        );
    }

    #[test]
    fn a_changed_bound_share_hold_address_or_name_starts_afresh() {
        let bounds = UpstreamBounds::new();
        let old = crm(&bounds);
        let other = "http://127.0.0.1:9002/mcp";
        for changed in [
            bounds.places("crm", Some(URL), 5, 2, HOLD).0,
            bounds.places("crm", Some(URL), 4, 1, HOLD).0,
            bounds
                .places("crm", Some(URL), 4, 2, Duration::from_secs(5))
                .0,
            bounds.places("crm", Some(other), 4, 2, HOLD).0,
            bounds.places("sales", Some(URL), 4, 2, HOLD).0,
            crm(&UpstreamBounds::new()),
        ] {
            assert!(!Arc::ptr_eq(&old, &changed));
        }
    }

    #[test]
    fn a_bound_no_upstream_uses_is_forgotten() {
        let bounds = UpstreamBounds::new();
        let old = crm(&bounds);
        let _held = old.try_take().expect("a place");
        drop(old);
        assert_eq!(crm(&bounds).free(), 4, "a new bound");
        let kept = crm(&bounds);
        for port in 0..100 {
            let url = format!("http://127.0.0.1:{port}/mcp");
            drop(bounds.places("crm", Some(&url), 4, 2, HOLD).0);
        }
        assert_eq!(bounds.len(), 1, "only the bound in use is kept");
        let entries = bounds.0.lock().expect("not poisoned").len();
        assert_eq!(entries, 2, "the one made last is forgotten at the next");
        drop(kept);
    }

    #[test]
    fn a_stdio_upstream_shares_nothing() {
        let bounds = UpstreamBounds::new();
        let files = || bounds.places("files", None, 4, 2, HOLD).0;
        assert!(!Arc::ptr_eq(&files(), &files()));
        assert_eq!(bounds.len(), 0);
    }
}
