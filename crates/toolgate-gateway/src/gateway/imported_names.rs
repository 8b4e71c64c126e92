//! Which of an upstream's tools are registered. An upstream is a third party, and the names
//! it lists are its own: one that toolgate cannot register — invalid once prefixed, listed
//! twice, or a built-in tool's — skips that tool, with a warning, and the rest are served.
//! What an upstream lists must never stop the gateway, nor take a name already held.
//!
//! A name two upstreams both offer is served by neither: whichever came first would get
//! the calls, arguments and policies meant for the other, and refusing the configuration
//! would let one upstream stop the gateway from starting or reloading by copying another's
//! tool name. Each is skipped with a warning naming the other, until a `prefix` tells
//! their tools apart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use toolgate_core::error::shown_text;
use toolgate_core::registry::{MAX_NAME_LEN, ToolRegistry, is_name_character};

use crate::config::Config;

/// How much of a skipped tool's name a warning repeats (a name can be megabytes long).
const SHOWN_NAME_CHARS: usize = 100;

/// The metric counting the tools skipped, by upstream (`server`) and `reason`.
pub(crate) const SKIPPED_TOOLS: &str = "toolgate_mcp_upstream_tools_skipped_total";

/// A tool an upstream lists that was not registered, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SkippedTool {
    /// The upstream's configured name.
    pub upstream: String,
    /// The tool's name as registered (with the prefix), shown safely: control characters
    /// and the like escaped, cut after 100 characters.
    pub tool: String,
    /// Why it was skipped.
    pub reason: SkipReason,
}

impl fmt::Display for SkippedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "upstream `{}`: tool `{}` is not served: {}",
            self.upstream, self.tool, self.reason
        )
    }
}

/// Why a tool an upstream lists was not registered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum SkipReason {
    /// The name is empty.
    Empty,
    /// The name has a character tool names cannot have.
    Characters,
    /// The name is `.` or `..` alone.
    DotAlone,
    /// The name, with the prefix, is longer than [`MAX_NAME_LEN`].
    TooLong {
        /// Its length, prefix included.
        len: usize,
        /// The upstream's prefix, if it has one.
        prefix: Option<String>,
    },
    /// The upstream lists the name more than once (the first is served).
    ListedTwice,
    /// A tool of the gateway's own (built-in, or `toolgate.outcome`) has the name.
    Gateway {
        /// The upstream's prefix, if it has one.
        prefix: Option<String>,
    },
    /// Other upstreams offer a tool of the same name: none of them serves it.
    Contested {
        /// The other upstreams' names.
        others: Vec<String>,
        /// The upstream's prefix, if it has one.
        prefix: Option<String>,
    },
}

impl SkipReason {
    /// The reason as the metric's `reason` label: `invalid_name`, `listed_twice` or
    /// `taken`.
    pub fn label(&self) -> &'static str {
        match self {
            SkipReason::Empty
            | SkipReason::Characters
            | SkipReason::DotAlone
            | SkipReason::TooLong { .. } => "invalid_name",
            SkipReason::ListedTwice => "listed_twice",
            SkipReason::Gateway { .. } => "taken",
            SkipReason::Contested { .. } => "contested",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rename = "have the upstream rename the tool";
        match self {
            SkipReason::Empty => f.write_str("its name is empty"),
            SkipReason::Characters => write!(
                f,
                "its name has characters a tool name cannot have (a-z, A-Z, 0-9, `_`, `-` and `.` only): {rename}"
            ),
            SkipReason::DotAlone => write!(
                f,
                "its name is `.` or `..` alone, which a URL path resolves away: {rename}"
            ),
            SkipReason::TooLong { len, prefix: None } => write!(
                f,
                "its name is {len} characters, over the limit of {MAX_NAME_LEN}: {rename}"
            ),
            SkipReason::TooLong {
                len,
                prefix: Some(prefix),
            } if len - prefix.len() > MAX_NAME_LEN => write!(
                f,
                "its name is {len} characters with the prefix `{prefix}`, {} without, over the limit of {MAX_NAME_LEN}: {rename}",
                len - prefix.len()
            ),
            SkipReason::TooLong {
                len,
                prefix: Some(prefix),
            } => write!(
                f,
                "its name is {len} characters with the prefix `{prefix}`, over the limit of {MAX_NAME_LEN}: give the upstream a shorter `prefix` (or none), or {rename}"
            ),
            SkipReason::ListedTwice => f.write_str(
                "the upstream lists this name more than once (a tool, prompt or resource): only the first is served",
            ),
            SkipReason::Gateway { prefix: None } => f.write_str(
                "a tool of the gateway's own has this name: give the upstream a `prefix` so its tools get distinct names",
            ),
            SkipReason::Gateway { prefix: Some(_) } => f.write_str(
                "a tool of the gateway's own has this name: give the upstream another `prefix`",
            ),
            SkipReason::Contested { others, prefix } => {
                let others = others
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let advice = match prefix {
                    None => "give the upstream a `prefix`",
                    Some(_) => "give the upstream another `prefix`",
                };
                write!(
                    f,
                    "upstream {others} offers a tool of this name too, and which of them should serve it cannot be told, so none does: {advice} (or the other one) so their tools get distinct names"
                )
            }
        }
    }
}

/// The names taken so far, and by whom: the gateway (`None`) or an upstream (its index
/// under `upstreams`); and the names more than one upstream offers, with who offers them.
pub(super) struct TakenNames {
    taken: BTreeMap<String, Option<usize>>,
    contested: BTreeMap<String, BTreeSet<usize>>,
}

impl TakenNames {
    /// The names of the gateway's own tools, taken before any upstream's; `offered`, the
    /// names each upstream offers (by its index), tell the names more than one offers.
    pub(super) fn new<'a>(
        own: impl IntoIterator<Item = String>,
        offered: impl IntoIterator<Item = (usize, &'a str)>,
    ) -> TakenNames {
        let mut offers: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
        for (i, name) in offered {
            offers.entry(name).or_default().insert(i);
        }
        let contested = (offers.into_iter())
            .filter(|(_, by)| by.len() > 1)
            .map(|(name, by)| (name.to_owned(), by))
            .collect();
        TakenNames {
            taken: own.into_iter().map(|name| (name, None)).collect(),
            contested,
        }
    }

    /// Takes `name`, a tool of `upstreams[i]`, when it can be registered; `Some` says why
    /// it is skipped instead — logged and counted here.
    pub(super) fn take(&mut self, config: &Config, i: usize, name: &str) -> Option<SkippedTool> {
        let entry = &config.upstreams[i];
        let prefix = entry.prefix.clone();
        let reason = match self.taken.get(name) {
            _ if !ToolRegistry::is_valid_name(name) => invalid(name, prefix),
            // An empty name, prefixed: valid here, but no name upstream.
            _ if prefix.as_deref() == Some(name) => SkipReason::Empty,
            Some(None) => SkipReason::Gateway { prefix },
            _ if self.contested.contains_key(name) => SkipReason::Contested {
                others: (self.contested[name].iter())
                    .filter(|other| **other != i)
                    .map(|other| config.upstreams[*other].name.clone())
                    .collect(),
                prefix,
            },
            None => {
                self.taken.insert(name.to_owned(), Some(i));
                return None;
            }
            Some(Some(_)) => SkipReason::ListedTwice,
        };
        let skipped = SkippedTool {
            upstream: entry.name.clone(),
            tool: shown_text(name, SHOWN_NAME_CHARS).into_owned(),
            reason,
        };
        tracing::warn!(
            server = %skipped.upstream,
            tool = ?skipped.tool,
            reason = %skipped.reason,
            "a tool the MCP server lists is not served"
        );
        metrics::counter!(SKIPPED_TOOLS, "server" => skipped.upstream.clone(), "reason" => skipped.reason.label())
            .increment(1);
        Some(skipped)
    }
}

/// Why `name`, which the registry refuses, is not a tool name.
fn invalid(name: &str, prefix: Option<String>) -> SkipReason {
    if name.is_empty() {
        SkipReason::Empty
    } else if !name.chars().all(is_name_character) {
        SkipReason::Characters
    } else if name.len() > MAX_NAME_LEN {
        SkipReason::TooLong {
            len: name.len(),
            prefix,
        }
    } else {
        SkipReason::DotAlone
    }
}

/// Why `prefix`, the prefix of an upstream's tools, can be no part of a tool name; `None`
/// when it can.
pub(super) fn invalid_prefix(prefix: &str) -> Option<String> {
    if !prefix.chars().all(is_name_character) {
        Some("has characters a tool name cannot have: use a-z, A-Z, 0-9, `_`, `-` and `.`".into())
    } else if prefix.len() >= MAX_NAME_LEN {
        Some(format!(
            "is {} characters: no tool name would fit in the limit of {MAX_NAME_LEN}",
            prefix.len()
        ))
    } else {
        None
    }
}
