//! Landlock and seccomp denials, read from the kernel's audit subsystem and attributed to
//! the run that was refused.
//!
//! Landlock (ABI 7, `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`) and seccomp
//! (`SECCOMP_FILTER_FLAG_LOG`) log what they refuse to the audit subsystem, and only
//! that: an allowed call costs nothing more. A root supervisor reads the records from the
//! audit netlink socket's read-only multicast group.
//!
//! # Attribution
//!
//! Each run's processes are in an **audit session** no other run's are in meanwhile:
//! writing `/proc/thread-self/loginuid` gives the writing thread a fresh session id,
//! which what it clones inherits, as do all descendants (nothing in the sandbox can
//! change it: that needs `CAP_AUDIT_CONTROL`). The thread that clones a run's first
//! process does so right before the clone ([`session_for_clone`]); a warm Tier B slot's
//! launcher thread does it once, and each run on the slot registers that session for its
//! duration ([`AuditSession::adopt`]). Seccomp records carry `ses=`; a landlock record is
//! followed, in the same audit event, by the system-call record that carries it. A record
//! is counted for the run whose session it names while that run is registered, never for
//! another.
//!
//! # Completeness
//!
//! The kernel queues records and sends them from a kernel thread. When the run has ended
//! (its processes are gone, so it can be refused nothing more), the supervisor sends a
//! user record through the same queue and waits, at most [`BARRIER_TIMEOUT`], until it
//! comes back: everything the run was refused was queued before it. The report says
//! whether the barrier came back and whether the kernel dropped records meanwhile.
//!
//! # Where it is not available
//!
//! Without root (the multicast group needs `CAP_AUDIT_READ`), with audit disabled
//! (`audit_enabled 0`: the records are never produced), or when the loginuid cannot be
//! set (a host that makes it immutable), the layers are reported as not recorded, with
//! the reason. Tierbox never turns audit on itself: that is a host-wide choice.

pub mod files;
mod parse;
#[allow(unsafe_code)]
mod sys;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use parse::{Record, parse_record};
use tierbox_policy::access::AccessModel;

/// Most distinct refusals kept per run; further ones are counted in
/// [`AuditReport::dropped`] (a program refused in a loop stays small).
pub const MAX_REFUSALS_PER_RUN: usize = 64;

/// Most landlock records kept while waiting for the system-call record of their event
/// (which names the session); older ones are dropped unattributed.
pub const MAX_PENDING_EVENTS: usize = 1024;

/// How long a run's end waits for its barrier record to come back through the kernel's
/// audit queue, in milliseconds. Past it the report is marked incomplete.
pub const BARRIER_TIMEOUT: Duration = Duration::from_millis(250);

/// Receive buffer of the multicast socket, in bytes: room for bursts of records while
/// the reader thread is not scheduled (an overflow loses records and is reported).
pub const READLOG_RCVBUF_BYTES: usize = 4 << 20;

/// Most retired sessions remembered ([`session_retired`]); each is a slot launcher's
/// whose run timed out waiting for its barrier, and there are far fewer slots.
pub const MAX_RETIRED_SESSIONS: usize = 4096;

/// Most `PATH` records kept per file event (a rename names four paths; a call never
/// names more than a few).
const MAX_PATHS_PER_EVENT: usize = 8;

/// How long a control request (`AUDIT_GET`, the barrier) may wait for the kernel.
const CONTROL_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a read of the audit status is reused: every run would otherwise pay a
/// netlink round trip to learn that audit is still off.
const STATUS_TTL: Duration = Duration::from_secs(1);

/// `AUDIT_TRUSTED_APP`: a free-form user record, used as the barrier.
const AUDIT_TRUSTED_APP: u16 = 1121;

/// The text a barrier record carries before this process's tag and its number.
const BARRIER_TAG: &str = "tierbox-barrier=";

/// This process's barrier tag: random, fixed for the process's life, so barriers of
/// other supervisors on the host are never mistaken for its own.
fn barrier_origin() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static ORIGIN: OnceLock<u64> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        // A fresh `RandomState` is keyed from the OS's random source.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    })
}

/// Which layer refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefusalLayer {
    /// A landlock rule set.
    Landlock,
    /// The seccomp filter.
    Seccomp,
    /// A Tier C sandbox's mount namespace: the path is not in its view, or its mount is
    /// read-only (`files`).
    Mount,
}

/// One thing a run was refused, all the times it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The layer.
    pub layer: RefusalLayer,
    /// Landlock: the access rights, as the kernel names them without their prefix
    /// (`read_file`, `write_file`, `make_dir`, `connect_tcp`, `signal`, …, joined by
    /// `,`). Seccomp: the system call's name (`syscall N` when unknown).
    pub operation: String,
    /// Landlock: the path, `port N`, `ADDR:PORT` or the signalled process. Seccomp: the
    /// filter rule that refused it. Mount: the path.
    pub target: String,
    /// How many times.
    pub count: u64,
    /// When the first record arrived.
    pub first: Instant,
}

/// A run's refusals, once it has ended.
#[derive(Debug, Clone, Default)]
pub struct AuditReport {
    /// Deduplicated by layer, operation and target, in arrival order.
    pub refusals: Vec<Refusal>,
    /// Records past [`MAX_REFUSALS_PER_RUN`] distinct refusals.
    pub dropped: u64,
    /// The barrier came back and the kernel lost no record during the run.
    pub complete: bool,
    /// File failures past [`files::MAX_FILE_FAILURES_PER_RUN`], never checked.
    pub files_dropped: u64,
}

/// Why a layer's refusals are not recorded for a run, as the denial report says
/// (`not recorded: …`). [`NotRecorded::reason`] is the text after that prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRecorded {
    /// The supervisor is not root: no `CAP_AUDIT_READ`.
    NeedsRoot,
    /// `audit_enabled` is 0 on this host.
    AuditDisabled,
    /// The audit rules of `runs` earlier runs are still being removed
    /// (`files::MAX_RULES_AWAITING_REMOVAL`).
    RuleBacklog {
        /// Rules awaiting removal.
        runs: usize,
    },
    /// No audit architecture number for this CPU.
    NoAuditArch,
    /// `AUDIT_ADD_RULE` failed for the run's file rule.
    RuleNotAdded {
        /// The kernel's error.
        error: String,
    },
    /// The layer is not applied to this run, so there is nothing to read.
    NotApplied {
        /// The layer, as a phrase (`landlock`, `a seccomp filter`).
        layer: &'static str,
    },
    /// Landlock logs denials from `LANDLOCK_LOG_ABI`; this kernel has an older ABI.
    LandlockLogAbi {
        /// The kernel's landlock ABI (0: none).
        have: u32,
    },
    /// `audit.file_refusals` is off (the default).
    FilesNotAsked,
    /// Joining the audit netlink multicast group failed.
    NoMulticast {
        /// The kernel's error.
        error: String,
    },
    /// The audit reader thread could not be started.
    ReaderThread {
        /// The error.
        error: String,
    },
    /// No kernel audit socket.
    NoAuditSocket {
        /// The kernel's error.
        error: String,
    },
    /// `AUDIT_GET` failed.
    AuditStatus {
        /// The kernel's error.
        error: String,
    },
    /// `/proc/thread-self/{name}` could not be read, or did not hold a number.
    ThreadSelf {
        /// The file (`loginuid`, `sessionid`).
        name: &'static str,
        /// What went wrong.
        error: String,
    },
    /// Writing `/proc/thread-self/loginuid` failed.
    LoginUid {
        /// The kernel's error.
        error: String,
    },
    /// The kernel gave the run no audit session.
    NoSession,
    /// The backend does not let the supervisor read this layer (the reason).
    Backend {
        /// Why, as a phrase.
        why: &'static str,
    },
    /// The audit reader's own state failed (a poisoned lock, a session id in use).
    Internal {
        /// What failed.
        what: String,
    },
}

impl NotRecorded {
    /// The reason, without the `not recorded: ` prefix [`std::fmt::Display`] adds.
    ///
    /// ```
    /// use tierbox_sandbox::linux::audit::NotRecorded;
    ///
    /// let why = NotRecorded::NotApplied { layer: "landlock" };
    /// assert_eq!(why.reason(), "landlock is not applied to this run");
    /// assert_eq!(why.to_string(), "not recorded: landlock is not applied to this run");
    /// ```
    pub fn reason(&self) -> String {
        match self {
            Self::NeedsRoot => "reading the kernel's audit records needs a root supervisor (CAP_AUDIT_READ)".to_owned(),
            Self::AuditDisabled => "the kernel's audit subsystem is disabled on this host (audit_enabled 0); enable it (`auditctl -e 1`) to have landlock and seccomp denials reported".to_owned(),
            Self::RuleBacklog { runs } => format!("the audit rules of {runs} earlier runs are still being removed (each removal waits for the kernel's RCU grace period); this run adds none rather than more"),
            Self::NoAuditArch => "this architecture has no audit number here".to_owned(),
            Self::RuleNotAdded { error } => format!("cannot add the kernel audit rule for the run's file calls (AUDIT_ADD_RULE: {error}; rules locked with `auditctl -e 2`, or no CAP_AUDIT_CONTROL)"),
            Self::NotApplied { layer } => format!("{layer} is not applied to this run"),
            Self::LandlockLogAbi { have } => format!("landlock logs denials from ABI {LANDLOCK_LOG_ABI} (kernel 6.15); this kernel has ABI {have}"),
            Self::FilesNotAsked => "off by default; `audit.file_refusals = true` records the paths a Tier C run could not open because the sandbox does not show them or shows them read-only (kernel audit rules for the run's session, which make every process of the host record its path calls while the run lasts)".to_owned(),
            Self::NoMulticast { error } => format!("cannot join the audit netlink multicast group (CAP_AUDIT_READ): {error}"),
            Self::ReaderThread { error } => format!("cannot start the audit reader thread: {error}"),
            Self::NoAuditSocket { error } => format!("no kernel audit socket on this host: {error}"),
            Self::AuditStatus { error } => format!("cannot read the kernel's audit status: {error}"),
            Self::ThreadSelf { name, error } => format!("cannot read /proc/thread-self/{name}: {error}"),
            Self::LoginUid { error } => format!("cannot start an audit session for the run (writing /proc/thread-self/loginuid: {error}; the host may make the login uid immutable)"),
            Self::NoSession => "the kernel gave the run no audit session".to_owned(),
            Self::Backend { why } => (*why).to_owned(),
            Self::Internal { what } => what.clone(),
        }
    }
}

impl std::fmt::Display for NotRecorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not recorded: {}", self.reason())
    }
}

impl std::error::Error for NotRecorded {}

/// Whether this process can read denials from the kernel's audit subsystem now: `Err`
/// says why not. Cheap: the status is read at most once per second.
pub fn availability() -> Result<(), NotRecorded> {
    if !is_root() {
        return Err(NotRecorded::NeedsRoot);
    }
    let enabled = cached_status()?;
    if !enabled {
        return Err(NotRecorded::AuditDisabled);
    }
    watch().map(drop)
}

/// Turns the kernel's audit subsystem on or off (`CAP_AUDIT_CONTROL`). A host-wide
/// setting: Tierbox itself never calls this; it exists for tests and administration
/// tools.
#[cfg(feature = "test-support")]
pub fn set_enabled(enabled: bool) -> std::io::Result<()> {
    let ctl = control().map_err(std::io::Error::other)?;
    let ctl = ctl.lock().map_err(|_| std::io::Error::other("poisoned"))?;
    ctl.set_enabled(enabled)?;
    if let Ok(mut cached) = STATUS.lock() {
        *cached = None;
    }
    Ok(())
}

/// Whether the kernel's audit subsystem is enabled, read now (not cached), for tests.
#[cfg(feature = "test-support")]
pub fn enabled_now() -> std::io::Result<bool> {
    read_status()
        .map(|s| s.enabled != 0)
        .map_err(std::io::Error::other)
}

/// A run's audit session, registered with the reader: the records naming it are kept
/// until its run ends ([`AuditSession::end`], then [`EndingSession::wait`]).
#[derive(Debug)]
pub struct AuditSession {
    ses: u32,
    lost_at_start: u32,
    /// The session's file rules, removed when the run's processes are gone.
    rules: Option<FileRules>,
    /// Why the file rules asked for could not be added.
    files_error: Option<NotRecorded>,
}

/// What a run's audit session is for, besides the landlock and seccomp records every
/// session collects.
#[derive(Debug, Clone, Default)]
pub struct SessionWants {
    /// Also record the run's file refusals ([`files`]), kept when `model`'s grants do
    /// not explain them.
    pub files: Option<Arc<AccessModel>>,
}

impl AuditSession {
    /// Gives the calling thread a fresh audit session and registers it. Call it on the
    /// thread that clones the run's first process, right before the clone: the child
    /// inherits the session. With `wants.files`, the session's file rules are in place
    /// before this returns (or the session says why not: [`AuditSession::files_error`]).
    pub fn begin(wants: &SessionWants) -> Result<Self, NotRecorded> {
        let w = watch()?;
        // The count read with the status (at most STATUS_TTL old): a record lost by
        // anyone since then marks the report incomplete, which errs on the safe side and
        // spares every run a netlink round trip.
        let lost_at_start = cached_lost()?;
        let ses = fresh_thread_session()?;
        let mut log = SessionLog::default();
        let (rules, files_error) = match &wants.files {
            Some(model) => match FileRules::add(ses) {
                Ok(rules) => {
                    log.files = Some(files::FileLog::new(Arc::clone(model)));
                    (Some(rules), None)
                }
                Err(why) => (None, Some(why)),
            },
            None => (None, None),
        };
        w.state
            .lock()
            .map_err(|_| poisoned("the audit reader's state"))?
            .sessions
            .insert(ses, log);
        Ok(Self {
            ses,
            lost_at_start,
            rules,
            files_error,
        })
    }

    /// Why the file rules asked for could not be added, when they could not.
    pub fn files_error(&self) -> Option<&NotRecorded> {
        self.files_error.as_ref()
    }

    /// Registers `ses`, the audit session of a slot's launcher thread, for the run about
    /// to use the slot. `Err` when it is registered already (by a run still collecting
    /// its records) or retired ([`session_retired`]): the run then starts a session of
    /// its own.
    pub fn adopt(ses: u32) -> Result<Self, NotRecorded> {
        let w = watch()?;
        let lost_at_start = cached_lost()?;
        let mut state = w
            .state
            .lock()
            .map_err(|_| poisoned("the audit reader's state"))?;
        if state.retired.contains(&ses) || state.sessions.contains_key(&ses) {
            return Err(NotRecorded::Internal {
                what: format!("audit session {ses} is not free"),
            });
        }
        state.sessions.insert(ses, SessionLog::default());
        Ok(Self {
            ses,
            lost_at_start,
            rules: None,
            files_error: None,
        })
    }

    /// The session id.
    pub fn id(&self) -> u32 {
        self.ses
    }

    /// The run's processes are all gone (it can be refused nothing more): notes whether
    /// the kernel lost records since the run began and sends the barrier. Cheap; the
    /// caller goes on with its own work while the barrier travels through the kernel's
    /// queue, and collects the records with [`EndingSession::wait`].
    pub fn end(mut self) -> EndingSession {
        let lost = read_status().map_or(true, |now| now.lost != self.lost_at_start);
        let barrier = watch().ok().and_then(Watch::send_barrier);
        // Nothing of the run can fail a call any more: the rule's host-wide cost ends
        // with its removal, handed to the remover thread after the two requests above
        // (a removal holds the kernel's audit control lock for a grace period).
        drop(self.rules.take());
        EndingSession {
            session: self,
            lost,
            barrier,
        }
    }
}

/// A run's session after [`AuditSession::end`]: its barrier on the way.
#[derive(Debug)]
pub struct EndingSession {
    session: AuditSession,
    /// The kernel's lost-record count moved during the run.
    lost: bool,
    /// The barrier's number, when it was sent.
    barrier: Option<u64>,
}

impl EndingSession {
    /// The session id.
    pub fn id(&self) -> u32 {
        self.session.ses
    }

    /// Waits, at most [`BARRIER_TIMEOUT`], for the barrier without blocking the calling
    /// thread (the task takes queued records itself, or the reader thread wakes it);
    /// then the records.
    pub async fn wait(self) -> AuditReport {
        let back = match (self.barrier, watch()) {
            (Some(number), Ok(w)) => tokio::time::timeout(BARRIER_TIMEOUT, w.barrier_seen(number))
                .await
                .is_ok(),
            _ => false,
        };
        self.collect(back)
    }

    fn collect(self, barrier_back: bool) -> AuditReport {
        let log = watch()
            .ok()
            .and_then(|w| w.state.lock().ok())
            .and_then(|mut s| {
                if !barrier_back {
                    // Records of this run may still be on their way: the session must
                    // never be registered again.
                    if s.retired.len() >= MAX_RETIRED_SESSIONS {
                        s.retired.pop_front();
                    }
                    s.retired.push_back(self.session.ses);
                }
                s.sessions.remove(&self.session.ses)
            })
            .unwrap_or_default();
        let mut refusals = log.refusals;
        let mut files_dropped = 0;
        if let Some(files) = log.files {
            files_dropped = files.dropped;
            for (f, count, first) in files.refusals() {
                refusals.add_n(
                    RefusalLayer::Mount,
                    f.operation.to_owned(),
                    f.path.display().to_string(),
                    first,
                    count,
                );
            }
        }
        AuditReport {
            complete: barrier_back && !self.lost && !log.overflowed,
            refusals: refusals.refusals,
            dropped: refusals.dropped,
            files_dropped,
        }
    }
}

impl Drop for AuditSession {
    fn drop(&mut self) {
        if let Ok(w) = watch()
            && let Ok(mut s) = w.state.lock()
        {
            s.sessions.remove(&self.ses);
        }
    }
}

/// A session's file rule ([`files`]), handed to the remover thread when dropped.
#[derive(Debug)]
struct FileRules {
    rule: Vec<u8>,
}

impl FileRules {
    /// Adds the rule for session `ses` (`CAP_AUDIT_CONTROL`), removing first, once per
    /// process, those left by supervisors that are gone.
    fn add(ses: u32) -> Result<Self, NotRecorded> {
        static KEY: OnceLock<String> = OnceLock::new();
        let key = KEY.get_or_init(|| {
            if let Ok(ctl) = control()
                && let Ok(ctl) = ctl.lock()
            {
                files::remove_stale_rules(&ctl);
            }
            files::own_key()
        });
        let backlog = files::RuleRemover::get().map_or(0, files::RuleRemover::backlog);
        if backlog >= files::MAX_RULES_AWAITING_REMOVAL {
            return Err(NotRecorded::RuleBacklog { runs: backlog });
        }
        let rule = files::encode_rule(ses, key).ok_or(NotRecorded::NoAuditArch)?;
        control()?
            .lock()
            .map_err(|_| poisoned("the audit control socket"))?
            .add_rule(&rule)
            .map_err(|e| NotRecorded::RuleNotAdded {
                error: e.to_string(),
            })?;
        Ok(Self { rule })
    }
}

impl Drop for FileRules {
    fn drop(&mut self) {
        let rule = std::mem::take(&mut self.rule);
        let handed = match files::RuleRemover::get() {
            Some(remover) => remover.remove(rule),
            None => Err(rule),
        };
        if let Err(rule) = handed
            && let Ok(ctl) = control()
            && let Ok(ctl) = ctl.lock()
        {
            let _ = ctl.del_rule(&rule);
        }
    }
}

/// How a run's landlock and seccomp denials are read: decided before it starts
/// ([`RunAudit::plan`]), given its session once cloned ([`RunAudit::attach`]), read when
/// it has ended ([`RunAudit::finish`]).
#[derive(Debug)]
pub struct RunAudit {
    /// `Ok` when the run's landlock denials are logged; else why they are not recorded.
    pub landlock: Result<(), NotRecorded>,
    /// `Ok` when the calls its seccomp filter refuses are logged; else why not.
    pub seccomp: Result<(), NotRecorded>,
    /// `Ok` with the grants file failures are checked against when its file refusals
    /// are recorded (`files`; Tier C); else why not.
    pub files: Result<Arc<AccessModel>, NotRecorded>,
    session: Option<AuditSession>,
    ending: Option<EndingSession>,
    /// The first process's exit means every process of the run is gone (a pid
    /// namespace's init whose reaper waits for the rest): [`RunAudit::first_process_exited`].
    first_process_ends_all: bool,
}

/// What [`RunAudit::finish`] found.
#[derive(Debug)]
pub struct RunAuditReport {
    /// As [`RunAudit::landlock`], now also `Err` when the session could not be started.
    pub landlock: Result<(), NotRecorded>,
    /// As [`RunAudit::seccomp`].
    pub seccomp: Result<(), NotRecorded>,
    /// As [`RunAudit::files`].
    pub files: Result<(), NotRecorded>,
    /// The refusals (empty when neither layer was read).
    pub report: AuditReport,
    /// The session the records were read from.
    pub session: Option<u32>,
}

impl RunAudit {
    /// For a run whose program gets a landlock domain (`landlock`, on a kernel with
    /// landlock ABI `abi`) and a seccomp filter it attaches itself (`seccomp`).
    pub fn plan(landlock: bool, abi: Option<u32>, seccomp: bool) -> Self {
        let available = availability();
        let layer = |applied: bool, layer: &'static str| match (&available, applied) {
            (_, false) => Err(NotRecorded::NotApplied { layer }),
            (Err(why), true) => Err(why.clone()),
            (Ok(()), true) => Ok(()),
        };
        let mut landlock = layer(landlock, "landlock");
        if landlock.is_ok() && abi.is_none_or(|abi| abi < LANDLOCK_LOG_ABI) {
            landlock = Err(NotRecorded::LandlockLogAbi {
                have: abi.unwrap_or(0),
            });
        }
        Self {
            landlock,
            seccomp: layer(seccomp, "a seccomp filter"),
            files: Err(NotRecorded::FilesNotAsked),
            session: None,
            ending: None,
            first_process_ends_all: false,
        }
    }

    /// Also records the run's file refusals when `plan` asks for it
    /// (`audit.file_refusals`, Tier C backends only: `files`).
    pub fn record_files(&mut self, plan: &tierbox_policy::Plan) {
        if !plan.tier.file_refusals {
            return;
        }
        self.files = match (availability(), crate::linux::seccomp::NATIVE_AUDIT_ARCH) {
            (Err(why), _) => Err(why),
            (Ok(()), None) => Err(NotRecorded::NoAuditArch),
            (Ok(()), Some(_)) => Ok(Arc::new(AccessModel::of(plan))),
        };
    }

    /// What the run's first process's audit session is for (`None`: it needs none).
    pub fn session_wants(&self) -> Option<SessionWants> {
        self.wants_session().then(|| SessionWants {
            files: self.files.as_ref().ok().cloned(),
        })
    }

    /// Neither layer is read, for `why` (a backend that applies neither itself).
    pub fn not_recorded(landlock: &'static str, seccomp: &'static str) -> Self {
        Self {
            landlock: Err(NotRecorded::Backend { why: landlock }),
            seccomp: Err(NotRecorded::Backend { why: seccomp }),
            files: Err(NotRecorded::FilesNotAsked),
            session: None,
            ending: None,
            first_process_ends_all: false,
        }
    }

    /// Whether the run's first process needs an audit session of its own.
    pub fn wants_session(&self) -> bool {
        self.landlock.is_ok() || self.seccomp.is_ok() || self.files.is_ok()
    }

    /// The session the cloning thread started for the run (or why it could not).
    pub fn attach(&mut self, session: Result<AuditSession, NotRecorded>) {
        match session {
            Ok(s) => {
                if let Some(why) = s.files_error() {
                    self.files = Err(why.clone());
                }
                self.session = Some(s);
            }
            Err(why) => {
                for layer in [&mut self.landlock, &mut self.seccomp] {
                    if layer.is_ok() {
                        *layer = Err(why.clone());
                    }
                }
                if self.files.is_ok() {
                    self.files = Err(why);
                }
            }
        }
    }

    /// Declares that the run's first process outlives every other one (the native
    /// sandbox's pid 1: the kernel and its reaper see to that), so its exit can start
    /// the barrier ([`RunAudit::first_process_exited`]).
    pub fn set_first_process_ends_all(&mut self) {
        self.first_process_ends_all = true;
    }

    /// The run's first process exited (or reported the program's end after reaping
    /// everything else): starts the barrier now when that means every process is gone
    /// ([`RunAudit::set_first_process_ends_all`]); otherwise nothing, and the caller calls
    /// [`RunAudit::processes_gone`] after killing what is left.
    pub fn first_process_exited(&mut self) {
        if self.first_process_ends_all {
            self.processes_gone();
        }
    }

    /// The run's processes are all gone: sends its barrier (`AuditSession::end`), so
    /// the kernel's queue drains while the caller builds the outcome. Idempotent.
    pub fn processes_gone(&mut self) {
        if let Some(session) = self.session.take() {
            self.ending = Some(session.end());
        }
    }

    /// The run has ended: its refusals (awaiting the barrier up to [`BARRIER_TIMEOUT`]).
    pub async fn finish(mut self) -> RunAuditReport {
        self.processes_gone();
        let session = self.ending.as_ref().map(EndingSession::id);
        let report = match self.ending {
            Some(ending) => ending.wait().await,
            None => AuditReport::default(),
        };
        RunAuditReport {
            landlock: self.landlock,
            seccomp: self.seccomp,
            files: self.files.map(drop),
            report,
            session,
        }
    }
}

/// The landlock ABI whose `landlock_restrict_self` can log an exec'd program's denials.
pub const LANDLOCK_LOG_ABI: u32 = 7;

/// Whether session `ses` ended a run before its barrier came back: records may still
/// arrive for it, so no run may adopt it ([`AuditSession::adopt`]).
pub fn session_retired(ses: u32) -> bool {
    watch()
        .ok()
        .and_then(|w| w.state.lock().ok().map(|s| s.retired.contains(&ses)))
        .unwrap_or(false)
}

/// Gives the calling thread (a slot's launcher, armed for audit) a fresh audit session
/// of its own: its id.
pub fn thread_session() -> Result<u32, NotRecorded> {
    watch()?;
    fresh_thread_session()
}

/// Starts a fresh audit session on the calling thread for the clone about to happen
/// (`wanted`), returning it registered; see [`AuditSession::begin`]. The thread stays in
/// the session afterwards, which attributes nothing wrongly: records come only from
/// processes with a logged landlock domain or seccomp filter, each cloned right after a
/// session of its own began, and a session's records are kept only while its run is
/// registered.
pub fn session_for_clone(
    wants: Option<&SessionWants>,
) -> Option<Result<AuditSession, NotRecorded>> {
    wants.map(AuditSession::begin)
}

/// Called by the cloning thread right after the clone: when the run's session has file
/// rules, the thread leaves it for a fresh one. Those rules record the failed calls of
/// *every* process in the session, the thread itself and whatever it clones later
/// without a session of its own, which must not count for the run.
pub fn leave_after_clone(session: Option<&Result<AuditSession, NotRecorded>>) {
    if let Some(Ok(s)) = session
        && s.rules.is_some()
    {
        let _ = fresh_thread_session();
    }
}

// ---- the reader ------------------------------------------------------------------------

#[derive(Debug, Default)]
struct SessionLog {
    refusals: RefusalList,
    /// The multicast socket overflowed while the run was registered.
    overflowed: bool,
    /// The run's file failures, when its session has file rules.
    files: Option<files::FileLog>,
}

impl SessionLog {
    fn add(&mut self, layer: RefusalLayer, operation: String, target: String, at: Instant) {
        self.refusals.add(layer, operation, target, at);
    }
}

/// A run's refusals, deduplicated by layer, operation and target in arrival order: at
/// most [`MAX_REFUSALS_PER_RUN`] distinct ones, the rest counted in `dropped`.
#[derive(Debug, Default)]
pub(crate) struct RefusalList {
    pub(crate) refusals: Vec<Refusal>,
    pub(crate) dropped: u64,
}

impl RefusalList {
    pub(crate) fn add(
        &mut self,
        layer: RefusalLayer,
        operation: String,
        target: String,
        at: Instant,
    ) {
        self.add_n(layer, operation, target, at, 1);
    }

    /// [`RefusalList::add`] of a refusal that happened `count` times.
    pub(crate) fn add_n(
        &mut self,
        layer: RefusalLayer,
        operation: String,
        target: String,
        at: Instant,
        count: u64,
    ) {
        if let Some(r) = self
            .refusals
            .iter_mut()
            .find(|r| r.layer == layer && r.operation == operation && r.target == target)
        {
            r.count += count;
        } else if self.refusals.len() < MAX_REFUSALS_PER_RUN {
            self.refusals.push(Refusal {
                layer,
                operation,
                target,
                count,
                first: at,
            });
        } else {
            self.dropped += count;
        }
    }
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<u32, SessionLog>,
    /// Landlock records waiting for their event's system-call record: `(serial, access,
    /// object, arrival)`.
    pending: VecDeque<(u64, String, String, Instant)>,
    /// The highest barrier number of this process's seen.
    barrier: u64,
    /// Tasks waiting for a barrier ([`Watch::barrier_seen`]).
    waiters: Vec<std::task::Waker>,
    /// Sessions whose run ended before its barrier came back ([`session_retired`]).
    retired: VecDeque<u32>,
    /// Failed file calls of sessions with file rules, by event, until their end.
    file_events: VecDeque<(u64, files::FileEvent)>,
}

impl State {
    fn take(&mut self, record: Record, at: Instant) {
        match record {
            Record::Seccomp {
                ses,
                syscall,
                native,
            } => {
                let Some(log) = self.sessions.get_mut(&ses) else {
                    return;
                };
                let (name, rule) = if native {
                    match crate::linux::seccomp::refused_call(syscall) {
                        Some(c) => (c.name.to_owned(), c.rule.to_owned()),
                        None => return,
                    }
                } else {
                    (
                        format!("syscall {syscall}"),
                        "a call made with another architecture's ABI (the filter kills the process)".to_owned(),
                    )
                };
                log.add(RefusalLayer::Seccomp, name, rule, at);
            }
            Record::Landlock {
                serial,
                access,
                object,
            } => {
                if self.pending.len() >= MAX_PENDING_EVENTS {
                    self.pending.pop_front();
                }
                self.pending.push_back((serial, access, object, at));
            }
            Record::Syscall {
                serial,
                ses,
                failed,
            } => {
                if let Some(call) = failed
                    && files::FILE_ERRNOS.contains(&call.errno)
                    && let Some(kind) = files::file_call(call.syscall)
                    && self.sessions.get(&ses).is_some_and(|l| l.files.is_some())
                {
                    if self.file_events.len() >= files::MAX_PENDING_FILE_EVENTS {
                        self.file_events.pop_front();
                    }
                    self.file_events.push_back((
                        serial,
                        files::FileEvent {
                            ses,
                            call: kind,
                            errno: call.errno,
                            args: call.args,
                            cwd: None,
                            names: Vec::new(),
                        },
                    ));
                }
                let mut log = self.sessions.get_mut(&ses);
                self.pending.retain(|(s, access, object, at)| {
                    if *s != serial {
                        return true;
                    }
                    if let Some(log) = log.as_deref_mut() {
                        log.add(RefusalLayer::Landlock, access.clone(), object.clone(), *at);
                    }
                    false
                });
            }
            Record::Cwd { serial, cwd } => {
                if let Some((_, e)) = self.file_events.iter_mut().find(|(s, _)| *s == serial) {
                    e.cwd = Some(cwd);
                }
            }
            Record::Path {
                serial,
                name,
                nametype,
            } => {
                if let Some((_, e)) = self.file_events.iter_mut().find(|(s, _)| *s == serial)
                    && e.names.len() < MAX_PATHS_PER_EVENT
                {
                    e.names.push((name, nametype));
                }
            }
            Record::EndOfEvent { serial } => {
                self.pending.retain(|(s, ..)| *s != serial);
                if let Some(i) = self.file_events.iter().position(|(s, _)| *s == serial)
                    && let Some((_, event)) = self.file_events.remove(i)
                {
                    let ses = event.ses;
                    if let Some(failure) = event.finish()
                        && let Some(log) = self.sessions.get_mut(&ses)
                        && let Some(files) = log.files.as_mut()
                    {
                        files.add(failure, at);
                    }
                }
            }
            Record::Barrier { origin, number } => {
                if origin == barrier_origin() {
                    self.barrier = self.barrier.max(number);
                }
            }
        }
    }
}

#[derive(Debug)]
struct Watch {
    /// The multicast socket, drained by the reader thread, and by a run awaiting its
    /// barrier, whichever comes first ([`Watch::drain`]).
    sock: sys::AuditSocket,
    /// Held while datagrams are received and taken, so records are taken in the order
    /// the kernel sent them (a landlock record before its system-call record); holds
    /// the receive buffer.
    receiving: Mutex<Vec<u8>>,
    state: Mutex<State>,
    next_barrier: AtomicU64,
}

impl Watch {
    fn open() -> Result<Self, NotRecorded> {
        let sock = sys::AuditSocket::readlog(READLOG_RCVBUF_BYTES).map_err(|e| {
            NotRecorded::NoMulticast {
                error: e.to_string(),
            }
        })?;
        // Without the filter every record of the host wakes the reader (the sessions'
        // LOGIN records among them): slower, not wrong.
        let _ = sock.keep_types(&parse::RECORD_TYPES);
        Ok(Self {
            sock,
            receiving: Mutex::new(vec![0u8; 16 * 1024]),
            state: Mutex::new(State::default()),
            next_barrier: AtomicU64::new(1),
        })
    }

    /// Takes every datagram queued on the socket. `wait_turn`: wait for another drainer
    /// to finish (the reader thread); otherwise return at once if one is at work (a run
    /// checking for its barrier). `false` when the socket or the state is unusable.
    fn drain(&self, wait_turn: bool) -> bool {
        let mut buf = match if wait_turn {
            self.receiving.lock().ok()
        } else {
            self.receiving.try_lock().ok()
        } {
            Some(buf) => buf,
            None => return !wait_turn,
        };
        loop {
            match self.sock.try_recv(&mut buf) {
                Ok(n) => {
                    let at = Instant::now();
                    let Ok(mut s) = self.state.lock() else {
                        return false;
                    };
                    let mut barrier = false;
                    for (ty, _, payload) in sys::messages(&buf[..n]) {
                        if let Some(record) = parse_record(ty, payload) {
                            barrier |= matches!(record, Record::Barrier { .. });
                            s.take(record, at);
                        }
                    }
                    if barrier {
                        for waker in s.waiters.drain(..) {
                            waker.wake();
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // The socket overflowed: records were lost for every run in progress.
                    if let Ok(mut s) = self.state.lock() {
                        for log in s.sessions.values_mut() {
                            log.overflowed = true;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// Sends a barrier record through the kernel's queue: its number, or `None` when it
    /// could not be sent.
    fn send_barrier(&self) -> Option<u64> {
        let number = self.next_barrier.fetch_add(1, Ordering::Relaxed);
        let ctl = control().ok()?;
        let ctl = ctl.lock().ok()?;
        ctl.send(
            AUDIT_TRUSTED_APP,
            false,
            // NUL-terminated: the kernel overwrites the last byte with one.
            format!("{BARRIER_TAG}{:016x}-{number}\0", barrier_origin()).as_bytes(),
        )
        .ok()?;
        Some(number)
    }

    /// Resolves once the reader has seen barrier `number` (never, if the state is
    /// poisoned: the caller bounds the wait).
    async fn barrier_seen(&self, number: u64) {
        std::future::poll_fn(|cx| {
            // The barrier may be queued already: take it here rather than wait for the
            // reader thread to be scheduled.
            self.drain(false);
            let Ok(mut state) = self.state.lock() else {
                return std::task::Poll::Pending;
            };
            if state.barrier >= number {
                return std::task::Poll::Ready(());
            }
            if !state.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                state.waiters.push(cx.waker().clone());
            }
            std::task::Poll::Pending
        })
        .await;
    }
}

/// The reader thread: whenever records are queued on the socket, drains them.
fn read_loop(watch: &Watch) {
    loop {
        match watch.sock.wait_readable() {
            Ok(()) => {
                if !watch.drain(true) {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

// ---- process-wide handles --------------------------------------------------------------

static WATCH: OnceLock<Result<Watch, NotRecorded>> = OnceLock::new();
/// The reader thread, started once [`WATCH`] exists (it borrows it for the process's life).
static READER: OnceLock<Result<(), NotRecorded>> = OnceLock::new();
static CONTROL: OnceLock<Result<Mutex<sys::AuditSocket>, NotRecorded>> = OnceLock::new();
/// The last audit status read: when, whether enabled, the kernel's lost-record count.
static STATUS: Mutex<Option<(Instant, bool, u32)>> = Mutex::new(None);

fn watch() -> Result<&'static Watch, NotRecorded> {
    let watch: &'static Watch = WATCH
        .get_or_init(Watch::open)
        .as_ref()
        .map_err(Clone::clone)?;
    READER
        .get_or_init(|| {
            std::thread::Builder::new()
                .name("tierbox-audit".to_owned())
                .spawn(move || read_loop(watch))
                .map(drop)
                .map_err(|e| NotRecorded::ReaderThread {
                    error: e.to_string(),
                })
        })
        .clone()?;
    Ok(watch)
}

fn control() -> Result<&'static Mutex<sys::AuditSocket>, NotRecorded> {
    CONTROL
        .get_or_init(|| {
            sys::AuditSocket::control(CONTROL_TIMEOUT)
                .map(Mutex::new)
                .map_err(|e| NotRecorded::NoAuditSocket {
                    error: e.to_string(),
                })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn cached_status() -> Result<bool, NotRecorded> {
    status_now_or_cached().map(|(enabled, _)| enabled)
}

fn cached_lost() -> Result<u32, NotRecorded> {
    status_now_or_cached().map(|(_, lost)| lost)
}

/// `(enabled, lost)`, read at most once per [`STATUS_TTL`].
fn status_now_or_cached() -> Result<(bool, u32), NotRecorded> {
    if let Ok(cached) = STATUS.lock()
        && let Some((at, enabled, lost)) = *cached
        && at.elapsed() < STATUS_TTL
    {
        return Ok((enabled, lost));
    }
    let status = read_status()?;
    if let Ok(mut cached) = STATUS.lock() {
        *cached = Some((Instant::now(), status.enabled != 0, status.lost));
    }
    Ok((status.enabled != 0, status.lost))
}

/// `AUDIT_GET` now, on the shared control socket.
fn read_status() -> Result<sys::AuditStatus, NotRecorded> {
    control()?
        .lock()
        .map_err(|_| poisoned("the audit control socket"))?
        .status()
        .map_err(|e| NotRecorded::AuditStatus {
            error: e.to_string(),
        })
}

/// A lock of the reader's that a panic poisoned.
fn poisoned(what: &str) -> NotRecorded {
    NotRecorded::Internal {
        what: format!("{what} is poisoned"),
    }
}

/// The process runs with effective uid 0 (read once: a supervisor does not change it).
fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
            })
            .unwrap_or(false)
    })
}

/// Writes the calling thread's loginuid (the process's, read once, or 0 when it is
/// unset), which starts a new audit session for the thread; returns the session id.
///
/// The thread stays in that session after the clone: only a process that carries a log
/// flag (a logged landlock domain or seccomp filter) can produce the records a run
/// collects, and every such process is cloned right after a session of its own begins;
/// a session's records are collected only while its run is registered.
fn fresh_thread_session() -> Result<u32, NotRecorded> {
    const UNSET: u32 = u32::MAX;
    static LOGINUID: OnceLock<Result<String, NotRecorded>> = OnceLock::new();
    let read = |name: &'static str| -> Result<u32, NotRecorded> {
        let failed = |error: String| NotRecorded::ThreadSelf { name, error };
        std::fs::read_to_string(format!("/proc/thread-self/{name}"))
            .map_err(|e| failed(e.to_string()))?
            .trim()
            .parse()
            .map_err(|e: std::num::ParseIntError| failed(e.to_string()))
    };
    let loginuid = LOGINUID
        .get_or_init(|| {
            read("loginuid").map(|uid| match uid {
                UNSET => "0".to_owned(),
                uid => uid.to_string(),
            })
        })
        .as_ref()
        .map_err(Clone::clone)?;
    std::fs::write("/proc/thread-self/loginuid", loginuid).map_err(|e| NotRecorded::LoginUid {
        error: e.to_string(),
    })?;
    match read("sessionid")? {
        UNSET => Err(NotRecorded::NoSession),
        ses => Ok(ses),
    }
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
