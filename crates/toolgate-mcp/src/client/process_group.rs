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
//! A group id is its leader's process id, which the system gives to another process
//! once that id is free: once the leader was reaped and nothing else is left in its
//! group. A signal sent to a freed id may reach a stranger's group. So the leader is
//! reaped last: on Linux, its exit is awaited without reaping it (`waitid` with
//! `WNOWAIT`), and while it is an unreaped zombie its id can be nobody else's (POSIX,
//! "Process ID Reuse": a process group id is not reused until the group's lifetime
//! ends, and the zombie leader is still in it). The group is signalled in that time,
//! its live members are looked for in `/proc` (a signal of 0 would find the zombie),
//! and the group is forgotten before the leader is reaped. Elsewhere the leader's exit
//! can only be awaited by reaping it; the group is then signalled at once, while its
//! other members (if any) still hold its id, and is probed until it is empty.
//! Off Unix there are no process groups, and only the program itself is ended.
//!
//! While the connection is in use, the leader's exit is watched the same way, without
//! reaping it ([`LeaderExit`]): a process it started may hold its stdout open after it
//! exited, and the connection must end all the same.

use std::io;
#[cfg(unix)]
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How often a group whose leader exited is looked at, while its other members are
/// given the rest of the grace to exit.
#[cfg(unix)]
const POLL: Duration = Duration::from_millis(50);

/// How often an exited leader is looked for, without reaping it.
#[cfg(target_os = "linux")]
const LEADER_POLL: Duration = Duration::from_millis(10);

/// How often a running connection's program is looked at, to see if it exited
/// ([`LeaderExit`]).
#[cfg(target_os = "linux")]
const EXIT_POLL: Duration = Duration::from_millis(100);

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

/// Starts `command`'s program so that, on Linux, it dies with the host.
///
/// A host that closes its connections ends its programs' groups ([`ProcessGroup::end`]);
/// one killed with `SIGKILL` (or by the out-of-memory killer) closes nothing, and its
/// programs would run on as orphans, one more set at every restart. So on Linux the
/// program is started with a parent-death signal (`PR_SET_PDEATHSIG`), `SIGKILL`: nobody
/// is left to follow a `SIGTERM` the program ignores or is slow to act on, and its chance
/// to clean up is the orderly close, which this path is not. What the program started
/// itself is not signalled by the system; it is left with its stdin at its end (the
/// host's ends of the pipes close with the host), which is how MCP tells a stdio server
/// to stop. A set-user-ID program loses the signal when it starts (the system clears it).
///
/// The signal is sent when the *thread* that started the program ends, not the process:
/// a tokio worker may end while the host runs on (`block_in_place` hands its place to
/// another thread, and a thread of the blocking pool ends when idle), and so does the
/// thread of a runtime made for a while (a test's). So the program is started from one
/// thread kept for that alone ([`start_thread`]), which ends with the process, within the
/// caller's runtime.
///
/// Elsewhere the program is started as it is; a host that dies leaves it running.
///
/// # Errors
///
/// When the program cannot be started, or (on Linux) when there is no tokio runtime to
/// start it within.
pub(crate) fn spawn_tied_to_host(mut command: Command) -> io::Result<Child> {
    #[cfg(target_os = "linux")]
    {
        die_with_host(&mut command);
        start_thread::spawn(command)
    }
    #[cfg(not(target_os = "linux"))]
    command.spawn()
}

/// Makes `command`'s program get `SIGKILL` when the thread that starts it ends — or start
/// not at all, when the host died before the signal was set (the program would then never
/// get it: its parent is already another process).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_host(command: &mut Command) {
    use nix::libc;

    let host = std::process::id();
    let set_signal = move || {
        // SAFETY: `prctl` is a system call with no memory passed; `PR_SET_PDEATHSIG` takes
        // an `unsigned long`, passed as one (a variadic `int` may leave its upper half
        // unset).
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } == -1 {
            return Err(io::Error::last_os_error());
        }
        if std::os::unix::process::parent_id() != host {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the closure runs in the child between `fork` and `exec`, where only what is
    // async-signal-safe may be done: it makes two system calls (`prctl`, `getppid`) and
    // builds its error from an error number, allocating nothing and taking no lock.
    unsafe {
        command.pre_exec(set_signal);
    }
}

/// The one thread stdio programs are started from, on Linux: a program's parent-death
/// signal is sent when the thread that started it ends ([`spawn_tied_to_host`]), and this
/// one ends with the process.
#[cfg(target_os = "linux")]
mod start_thread {
    use std::io;
    use std::sync::mpsc::{self, Sender, SyncSender};
    use std::sync::{Mutex, PoisonError};

    use tokio::process::{Child, Command};
    use tokio::runtime::Handle;

    /// A program to start within `runtime`, and where to say how that went.
    struct Start {
        command: Command,
        runtime: Handle,
        started: SyncSender<io::Result<Child>>,
    }

    /// Where the thread takes its work from, once it runs. Never dropped, so the thread
    /// never ends.
    static STARTS: Mutex<Option<Sender<Start>>> = Mutex::new(None);

    /// Starts `command` from the thread, within the caller's runtime, and waits (as long
    /// as starting a process takes) for it to be started.
    pub(super) fn spawn(command: Command) -> io::Result<Child> {
        let runtime = Handle::try_current().map_err(|_| {
            io::Error::other(
                "an MCP server's program is started within a tokio runtime: connect from within one",
            )
        })?;
        let (started, outcome) = mpsc::sync_channel(1);
        let gone = || io::Error::other("the thread that starts MCP servers' programs has stopped");
        let start = Start {
            command,
            runtime,
            started,
        };
        starts()?.send(start).map_err(|_| gone())?;
        outcome.recv().map_err(|_| gone())?
    }

    /// The way to the thread, which is started the first time.
    fn starts() -> io::Result<Sender<Start>> {
        let mut starts = STARTS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(starts) = &*starts {
            return Ok(starts.clone());
        }
        let (sender, work) = mpsc::channel::<Start>();
        std::thread::Builder::new()
            .name("toolgate-stdio-start".to_owned())
            .spawn(move || run(work))
            .map_err(|e| {
                io::Error::other(format!(
                    "cannot start the thread that starts MCP servers' programs: {e}"
                ))
            })?;
        *starts = Some(sender.clone());
        Ok(sender)
    }

    /// Starts each program asked for. A start that panics (a runtime made without its
    /// I/O driver, say) is an error for its caller, not the thread's end: that would
    /// kill every program it started.
    fn run(work: mpsc::Receiver<Start>) {
        for Start {
            mut command,
            runtime,
            started,
        } in work
        {
            let _within = runtime.enter();
            let spawned =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| command.spawn()))
                    .unwrap_or_else(|_| {
                        Err(io::Error::other(
                            "the program could not be started within the caller's runtime (is its I/O driver enabled?)",
                        ))
                    });
            // A caller that stopped waiting drops the child, which kills it.
            let _ = started.send(spawned);
        }
    }
}

impl ProcessGroup {
    /// The group `child`, started by a command made with [`lead_own_group`], leads.
    ///
    /// `child` must not be waited for elsewhere: [`ProcessGroup::end`] reaps it, once the
    /// group was signalled.
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

    /// A watch on the exit of the group's leader, which does not reap it (see
    /// [`LeaderExit`]).
    pub(crate) fn watch_leader(&self) -> LeaderExit {
        #[cfg(target_os = "linux")]
        {
            LeaderExit {
                id: self.id,
                exited: false,
                next: Box::pin(tokio::time::sleep(EXIT_POLL)),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            LeaderExit {}
        }
    }

    /// Whether the group's leader was seen to have exited, now: on Linux, without reaping
    /// it; elsewhere (where that cannot be seen without reaping it), never.
    pub(crate) fn leader_exited(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(id) = self.id {
            return still_running(id).is_ok_and(|running| !running);
        }
        false
    }

    /// Waits until `deadline` for `leader`, the group's leader, to exit, then ends what
    /// is left of the group: asks it to stop (`SIGTERM`), waits until `deadline` for it
    /// to be gone, then kills it. A leader still running at `deadline` is killed with its
    /// group. The leader is reaped last.
    ///
    /// # Errors
    ///
    /// When the leader could not be waited for or killed.
    pub(crate) async fn end(&mut self, leader: &mut Child, deadline: Instant) -> io::Result<()> {
        match tokio::time::timeout_at(deadline, self.leader_exit(leader)).await {
            Ok(Ok(())) => {
                #[cfg(unix)]
                self.stop(deadline).await;
                leader.wait().await.map(drop)
            }
            Ok(Err(error)) => {
                // Whether the group's id is still its own is not known: it is not signalled.
                self.forget();
                Err(error)
            }
            Err(_) => {
                self.kill();
                leader.kill().await
            }
        }
    }

    /// Waits for the group's leader to exit. On Linux it is left unreaped, its id still
    /// the group's; elsewhere it is reaped.
    ///
    /// # Errors
    ///
    /// When the leader cannot be waited for; on Linux, when it was reaped elsewhere.
    async fn leader_exit(&mut self, leader: &mut Child) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(id) = self.id {
            while still_running(id)? {
                tokio::time::sleep(LEADER_POLL).await;
            }
            return Ok(());
        }
        leader.wait().await.map(drop)
    }

    /// Asks what is left of the group to stop, waits until `deadline` for it to be gone,
    /// then kills it; forgets the group either way.
    #[cfg(unix)]
    async fn stop(&mut self, deadline: Instant) {
        use nix::sys::signal::{Signal, killpg};

        let Some(id) = self.id else { return };
        if killpg(id, Signal::SIGTERM).is_err() {
            // Nothing left in it (`ESRCH`): nothing more to signal, ever.
            self.id = None;
            return;
        }
        while Instant::now() < deadline {
            tokio::time::sleep(POLL.min(deadline - Instant::now())).await;
            if !has_live_members(id) {
                self.id = None;
                return;
            }
        }
        self.kill();
    }

    /// Forgets the group: nothing signals it any more.
    fn forget(&mut self) {
        #[cfg(unix)]
        {
            self.id = None;
        }
    }

    /// Kills every process of the group (`SIGKILL`), and forgets it.
    pub(crate) fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(id) = self.id.take() {
            let _ = nix::sys::signal::killpg(id, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// A watch on the exit of a group's leader, while the connection it serves is in use:
/// its stdout's end is not enough, as a process it started may hold that open after it
/// exited.
///
/// On Linux the leader is looked at every [`EXIT_POLL`] with `waitid(WNOWAIT)`, which
/// leaves it unreaped, a zombie holding the group's id for [`ProcessGroup::end`] to
/// signal the group safely. Elsewhere its exit cannot be seen without reaping it, which
/// would free the group's id while the group may still be signalled: the watch never
/// sees an exit there, and the connection ends only when its stdout does.
#[derive(Debug)]
pub(crate) struct LeaderExit {
    /// The leader's id, when it has one to watch.
    #[cfg(target_os = "linux")]
    id: Option<nix::unistd::Pid>,
    /// Whether the leader was seen to have exited.
    #[cfg(target_os = "linux")]
    exited: bool,
    /// When to look at the leader next.
    #[cfg(target_os = "linux")]
    next: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl LeaderExit {
    /// Ready once the leader was seen to have exited (or can no longer be waited for:
    /// it was reaped), and every time after; the leader is left unreaped.
    pub(crate) fn poll_exited(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        #[cfg(target_os = "linux")]
        {
            use nix::errno::Errno;

            if self.exited {
                return std::task::Poll::Ready(());
            }
            let Some(id) = self.id else {
                return std::task::Poll::Pending;
            };
            loop {
                std::task::ready!(self.next.as_mut().poll(cx));
                match still_running(id) {
                    Ok(true) | Err(Errno::EINTR) => {
                        self.next.as_mut().reset(Instant::now() + EXIT_POLL);
                    }
                    _ => {
                        self.exited = true;
                        return std::task::Poll::Ready(());
                    }
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = cx;
            std::task::Poll::Pending
        }
    }
}

/// Whether the leader `id` is still running, looked at without reaping it (`waitid` with
/// `WNOWAIT`): once it exited, it stays a zombie holding the group's id until it is reaped.
///
/// # Errors
///
/// When it cannot be waited for: `ECHILD` once it was reaped elsewhere.
#[cfg(target_os = "linux")]
fn still_running(id: nix::unistd::Pid) -> nix::Result<bool> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};

    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    Ok(waitid(Id::Pid(id), flags)? == WaitStatus::StillAlive)
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a process of group `id` is still running: zombies, its exited leader among
/// them, are not (they cannot be signalled out of the way, and a stray one whose parent
/// does not reap it would otherwise hold the grace open). Without a readable `/proc`,
/// the group is taken to be running, and killed once the grace is over.
#[cfg(target_os = "linux")]
fn has_live_members(id: nix::unistd::Pid) -> bool {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return true;
    };
    processes.flatten().any(|process| {
        let is_pid = process
            .file_name()
            .to_str()
            .is_some_and(|name| !name.is_empty() && name.bytes().all(|byte| byte.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(process.path().join("stat"))
                .is_ok_and(|stat| runs_in_group(&stat, id.as_raw()))
    })
}

/// Whether the process whose `/proc/<pid>/stat` is `stat` is in group `id` and not a
/// zombie. The fields after the command's name (in parentheses, and which may hold
/// anything) are its state, its parent's id and its group's id.
#[cfg(target_os = "linux")]
fn runs_in_group(stat: &str, id: i32) -> bool {
    let Some((_, fields)) = stat.rsplit_once(") ") else {
        return false;
    };
    let mut fields = fields.split_ascii_whitespace();
    let state = fields.next();
    let group = fields.nth(1).and_then(|group| group.parse::<i32>().ok());
    group == Some(id) && state != Some("Z") && state != Some("X")
}

/// Whether a process of group `id` is still there: a leader already reaped is not.
#[cfg(all(unix, not(target_os = "linux")))]
fn has_live_members(id: nix::unistd::Pid) -> bool {
    nix::sys::signal::killpg(id, None).is_ok()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::runs_in_group;

    #[test]
    fn a_process_runs_in_the_group_its_stat_names_unless_it_is_a_zombie() {
        let stat = "4242 (a (strange) name) S 1 4200 4200 0 -1 4194560";
        assert!(runs_in_group(stat, 4200));
        assert!(!runs_in_group(stat, 4242));
        assert!(!runs_in_group(&stat.replace(") S ", ") Z "), 4200));
        assert!(!runs_in_group("garbage", 4200));
    }
}
