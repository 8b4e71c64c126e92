//! The connections of each caller, for an upstream called as the caller.

use std::sync::Arc;

use toolgate_core::secret::Secret;
use toolgate_core::{ToolError, ToolInvokeContext};

use super::Link;
use crate::client::UpstreamConfig;
use crate::client::per_caller::CallerLinks;

impl Link {
    /// The link of one caller, with `credential`: scrubbed from what comes back as well
    /// as the configuration's own credentials.
    pub fn for_caller(mut config: UpstreamConfig, credential: Secret) -> Self {
        // Its places are the upstream's link's (set by [`Link::as_caller`]): the shared
        // bounds are not looked up for a link that would drop what they hand back.
        config.bounds = None;
        let scrubber = config.scrubber(Some(&credential));
        let mut link = Link::new(config, Some(credential.expose().to_owned()));
        link.scrubber = scrubber;
        link
    }

    /// The link `ctx`'s call goes on: this one, or for an upstream called as the caller,
    /// the caller's own (its credential obtained now, or remembered).
    ///
    /// # Errors
    ///
    /// The credential source's, when the caller cannot have one.
    pub async fn as_caller(
        self: &Arc<Self>,
        ctx: &ToolInvokeContext,
    ) -> Result<Arc<Link>, ToolError> {
        match &self.callers {
            None => Ok(Arc::clone(self)),
            Some(callers) => {
                callers
                    .link(ctx, |config, credential| {
                        let mut link = Link::for_caller(config, credential);
                        link.tasks_tool = Arc::clone(&self.tasks_tool);
                        // Another session, the same host: one bound for them all.
                        link.places = Arc::clone(&self.places);
                        // Its first connection is a caller's, not a reload's: it waits
                        // for its place.
                        link.importing = Arc::default();
                        link
                    })
                    .await
            }
        }
    }

    /// The per-caller connections held now (none for an upstream not called as each
    /// caller).
    pub fn held_caller_links(&self) -> Vec<Arc<Link>> {
        self.callers
            .as_ref()
            .map_or_else(Vec::new, CallerLinks::held_links)
    }

    /// How many per-caller connections are held.
    pub fn caller_links(&self) -> u64 {
        self.callers.as_ref().map_or(0, CallerLinks::held)
    }
}
