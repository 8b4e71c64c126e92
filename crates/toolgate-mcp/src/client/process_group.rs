//! The process group a stdio upstream's program leads, so that what it started ends with
//! it.
//!
//! Many stdio upstreams are launchers (`npx some-server`, `uvx …`, `sh -c …`) that start
//! the real server as their own child. Killing the launcher alone leaves that child
//! running, one more at every reconnection. So the program is started in a process
//! group of its own, and the whole group is signalled when the connection ends.
//!
//! A consequence: a Ctrl-C at the host's terminal no longer reaches the program
//! directly. The host's own shutdown ends it instead: closing or dropping the
//! connection ends the group.
//!
//! Once the group is killed it is forgotten, and nothing signals it again: a group id is
//! a process id, which the system may give to another process once the group is empty.
//! Off Unix there are no process groups, and this does nothing.

#[cfg(unix)]
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How often a group whose leader exited is looked at, while its other members are
/// given the rest of the grace to exit.
#[cfg(unix)]
const POLL: Duration = Duration::from_millis(50);

/// The process group of one started program: killed when dropped, unless it was ended.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    /// The group's id (its leader's process id) while it may still be signalled.
    #[cfg(unix)]
    id: Option<nix::unistd::Pid>,
}

/// Makes `command` start its program as the leader of a new process group.
pub(crate) fn lead_own_group(command: &mut Command) {
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(not(unix))]
    let _ = command;
}

impl ProcessGroup {
    /// The group `child`, started by a command made with [`lead_own_group`], leads.
    pub(crate) fn of(child: &Child) -> Self {
        #[cfg(unix)]
        {
            let id = child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(nix::unistd::Pid::from_raw);
            ProcessGroup { id }
        }
        #[cfg(not(unix))]
        {
            let _ = child;
            ProcessGroup {}
        }
    }

    /// Ends what is left of the group once its leader exited: asks it to stop
    /// (`SIGTERM`), waits until `deadline` for it to be gone, then kills it.
    pub(crate) async fn end(&mut self, deadline: Instant) {
        #[cfg(unix)]
        {
            use nix::sys::signal::{Signal, killpg};

            let Some(id) = self.id else { return };
            if killpg(id, Signal::SIGTERM).is_err() {
                // Nothing left in it (`ESRCH`): nothing more to signal, ever.
                self.id = None;
                return;
            }
            while Instant::now() < deadline {
                tokio::time::sleep(POLL.min(deadline - Instant::now())).await;
                if killpg(id, None).is_err() {
                    self.id = None;
                    return;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = deadline;
        self.kill();
    }

    /// Kills every process of the group (`SIGKILL`), and forgets it.
    pub(crate) fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(id) = self.id.take() {
            let _ = nix::sys::signal::killpg(id, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}
