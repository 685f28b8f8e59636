//! Tier C's file refusals: the paths a run could not open because its mount namespace
//! does not show them (`ENOENT`) or shows them read-only (`EROFS`).
//!
//! No security layer refuses these — the path is simply not there, or its mount is
//! read-only — so nothing logs them by itself. When the policy asks for it
//! (`audit.file_refusals`), the run's audit session gets a kernel audit rule for its
//! duration: the file system calls ([`FILE_CALLS`]) of that session that fail with an
//! error from `ENOENT` to `EROFS` are recorded, with their path (`PATH` and `CWD`
//! records), and the supervisor reads those that failed with `ENOENT` or `EROFS`.
//! The supervisor then keeps only what the run was refused:
//!
//! - a path no grant gives the access it was opened for ([`AccessModel`]): a missing
//!   file inside a grant is just missing;
//! - that exists on the host (or, for a creation, whose directory does): a path that
//!   exists nowhere was not refused, it is absent — the library and module searches every
//!   program makes fail this way by the hundred;
//! - outside the sandbox's own mounts (`/proc`, `/sys`, `/dev`).
//!
//! **Cost.** While any audit rule exists, the kernel records the names of every path
//! system call of *every* process on the host (not only the run's) to evaluate it at
//! the call's exit: a host-wide cost, which is why it is opt-in and why the rules exist
//! only while such a run does (docs/denials.md measures it).
//!
//! **Removal.** The kernel removes a rule only after an RCU grace period (8–16 ms on a
//! 250 Hz kernel), so a run does not wait for it: its rule is handed to a thread that
//! removes rules one after another. At most [`MAX_RULES_AWAITING_REMOVAL`] wait; past
//! that a run records no file refusals (it says so) rather than add more. A process that
//! exits right after its runs (the CLI) calls [`flush_rule_removals`] first.
//!
//! **Leftovers.** Each rule carries the key `tierbox-files:PID:START` of the supervisor
//! that added it; a supervisor that died without removing its rules has them removed by
//! the next one that adds rules.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tierbox_policy::access::{Access, AccessModel};

/// Most distinct file failures kept per run before they are checked against the host
/// (each a path the model does not grant); further ones are counted as dropped. Bounds
/// the memory a program that probes paths in a loop can make the supervisor hold.
pub const MAX_FILE_FAILURES_PER_RUN: usize = 1024;

/// Most file events (a failed call's records, from its `SYSCALL` to its end) assembled
/// at once; older ones are dropped unattributed.
pub const MAX_PENDING_FILE_EVENTS: usize = 256;

/// The errors that mean "not in the sandbox's view" and "mounted read-only".
pub const FILE_ERRNOS: [i32; 2] = [libc::ENOENT, libc::EROFS];

/// Most rules of ended runs waiting to be removed: each costs every path system call of
/// the host a comparison, and each removal an RCU grace period.
pub const MAX_RULES_AWAITING_REMOVAL: usize = 32;

/// How long one rule's removal may wait for the kernel's answer.
const REMOVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// How long [`flush_rule_removals`] waits for the rules of ended runs to be removed.
pub const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The prefix of the key of every rule Tierbox adds.
const KEY_PREFIX: &str = "tierbox-files:";

/// `AUDIT_FILTER_EXIT`: the rule is evaluated at system-call exit.
const AUDIT_FILTER_EXIT: u32 = 0x04;
/// `AUDIT_ALWAYS`: record the event when the rule matches.
const AUDIT_ALWAYS: u32 = 2;
/// `AUDIT_BITMASK_SIZE`: `u32` words of the system-call mask.
const AUDIT_BITMASK_SIZE: usize = 64;
/// `AUDIT_MAX_FIELDS`.
const AUDIT_MAX_FIELDS: usize = 64;
/// Field ids (`linux/audit.h`).
const AUDIT_ARCH: u32 = 11;
const AUDIT_SESSIONID: u32 = 25;
const AUDIT_EXIT: u32 = 103;
const AUDIT_FILTERKEY: u32 = 210;
/// `Audit_equal`, `Audit_ge`, `Audit_le`: the fields' comparison operators.
const AUDIT_EQUAL: u32 = 0x4000_0000;
const AUDIT_GREATER_OR_EQUAL: u32 = 0x6000_0000;
const AUDIT_LESS_OR_EQUAL: u32 = 0x5000_0000;
/// Bytes of `struct audit_rule_data` before its string buffer.
const RULE_HEADER_BYTES: usize = 4 * (3 + AUDIT_BITMASK_SIZE + 3 * AUDIT_MAX_FIELDS + 1);

/// What a file system call does with its path, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileCall {
    /// `open`-like: read or write by its flags (`flags` is the argument holding them,
    /// `dirfd` the one holding the directory a relative path starts from).
    Open {
        /// The flags' argument.
        flags: Option<usize>,
        /// The directory's argument.
        dirfd: Option<usize>,
    },
    /// `creat`: create and write.
    // Only x86-64 has `creat` (the table below names it there alone).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Create,
    /// `execve`, `execveat`.
    Execute {
        /// The directory's argument.
        dirfd: Option<usize>,
    },
    /// `mkdir`, `mkdirat`.
    MakeDir {
        /// The directory's argument.
        dirfd: Option<usize>,
    },
    /// `unlink`, `unlinkat`, `rmdir`.
    Remove {
        /// The directory's argument.
        dirfd: Option<usize>,
    },
    /// `rename`, `renameat`, `renameat2`: the source path is reported.
    Rename {
        /// The directory's argument.
        dirfd: Option<usize>,
    },
    /// `truncate`.
    Truncate,
}

/// The system calls the rules record, with what each does.
pub const FILE_CALLS: &[(libc::c_long, FileCall)] = &[
    #[cfg(target_arch = "x86_64")]
    (
        libc::SYS_open,
        FileCall::Open {
            flags: Some(1),
            dirfd: None,
        },
    ),
    (
        libc::SYS_openat,
        FileCall::Open {
            flags: Some(2),
            dirfd: Some(0),
        },
    ),
    (
        libc::SYS_openat2,
        FileCall::Open {
            flags: None,
            dirfd: Some(0),
        },
    ),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_creat, FileCall::Create),
    (libc::SYS_execve, FileCall::Execute { dirfd: None }),
    (libc::SYS_execveat, FileCall::Execute { dirfd: Some(0) }),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_mkdir, FileCall::MakeDir { dirfd: None }),
    (libc::SYS_mkdirat, FileCall::MakeDir { dirfd: Some(0) }),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_unlink, FileCall::Remove { dirfd: None }),
    (libc::SYS_unlinkat, FileCall::Remove { dirfd: Some(0) }),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_rmdir, FileCall::Remove { dirfd: None }),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_rename, FileCall::Rename { dirfd: None }),
    (libc::SYS_renameat, FileCall::Rename { dirfd: Some(0) }),
    (libc::SYS_renameat2, FileCall::Rename { dirfd: Some(0) }),
    (libc::SYS_truncate, FileCall::Truncate),
];

/// What [`FILE_CALLS`] says of system call `nr`.
pub fn file_call(nr: u32) -> Option<FileCall> {
    FILE_CALLS
        .iter()
        .find(|(n, _)| u32::try_from(*n).ok() == Some(nr))
        .map(|(_, c)| *c)
}

/// One failed file system call of a run, as its audit records describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFailure {
    /// `read`, `write`, `open`, `execute`, `make-dir`, `remove`, `rename`, `truncate`;
    /// `create` when a read-only mount refused a new file in the directory `path` (the
    /// kernel recorded only the directory).
    pub operation: &'static str,
    /// The absolute path, as the run's mount namespace names it (the host's name too:
    /// Tier C mounts what it shows where the host has it).
    pub path: PathBuf,
    /// `ENOENT` or `EROFS`.
    pub errno: i32,
    /// The call needs write access.
    pub write: bool,
    /// The call creates the path (its directory must exist).
    pub create: bool,
}

/// A failed call's records while they arrive (`SYSCALL`, then `CWD` and `PATH`s, then
/// the end of the event).
#[derive(Debug, Clone)]
pub(super) struct FileEvent {
    pub ses: u32,
    pub call: FileCall,
    pub errno: i32,
    pub args: [u64; 3],
    pub cwd: Option<String>,
    /// `(name, nametype)` of each `PATH` record, in order.
    pub names: Vec<(String, String)>,
}

/// `AT_FDCWD` as the audit record prints a register (`ffffff9c`: the low 32 bits; a
/// 64-bit one prints all of them).
fn is_at_fdcwd(reg: u64) -> bool {
    reg as u32 == libc::AT_FDCWD as u32
}

impl FileEvent {
    /// The failure the event describes, or `None` when its path cannot be known (a name
    /// relative to a directory descriptor).
    pub fn finish(self) -> Option<FileFailure> {
        // A creation's records name the parent first (`PARENT`), then the entry: the
        // entry's name is the whole path given. A creation or removal a read-only mount
        // refused before looking the entry up has only the parent's record, which names
        // the directory alone: the directory is then the target.
        let entry = self.names.iter().find(|(_, ty)| ty != "PARENT");
        let in_directory = entry.is_none();
        let name = entry
            .or_else(|| self.names.first())
            .map(|(n, _)| n.clone())?;
        if name.is_empty() || name == "(null)" {
            return None;
        }
        let dirfd = match self.call {
            FileCall::Open { dirfd, .. }
            | FileCall::Execute { dirfd }
            | FileCall::MakeDir { dirfd }
            | FileCall::Remove { dirfd }
            | FileCall::Rename { dirfd } => dirfd,
            FileCall::Create | FileCall::Truncate => None,
        };
        let path = Path::new(&name);
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else if dirfd.is_none_or(|i| is_at_fdcwd(self.args[i])) {
            Path::new(self.cwd.as_deref()?).join(path)
        } else {
            return None;
        };
        let (operation, mut write, create) = match self.call {
            FileCall::Open { flags: Some(i), .. } => {
                let flags = self.args[i] as i32;
                let write = flags & libc::O_ACCMODE != libc::O_RDONLY
                    || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
                (
                    if write { "write" } else { "read" },
                    write,
                    flags & libc::O_CREAT != 0,
                )
            }
            FileCall::Open { flags: None, .. } => ("open", false, false),
            FileCall::Create => ("write", true, true),
            FileCall::Execute { .. } => ("execute", false, false),
            FileCall::MakeDir { .. } => ("make-dir", true, true),
            FileCall::Remove { .. } => ("remove", true, false),
            FileCall::Rename { .. } => ("rename", true, false),
            FileCall::Truncate => ("truncate", true, false),
        };
        // A read-only mount refuses writes only.
        write |= self.errno == libc::EROFS;
        let operation = match operation {
            "open" if write => "write",
            "write" if create && in_directory => "create",
            other => other,
        };
        Some(FileFailure {
            operation,
            path: normalize(&path),
            errno: self.errno,
            write,
            create,
        })
    }
}

/// `path` without `.` and with each `..` taking its parent away (as the kernel resolved
/// it, absent symbolic links, which a path the sandbox does not show cannot follow).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The sandbox's own mounts, never the host's: a failure under them is not a refusal.
const OWN_MOUNTS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// A run's file failures that its grants do not explain, before they are checked
/// against the host ([`FileLog::refusals`]).
#[derive(Debug)]
pub(super) struct FileLog {
    model: Arc<AccessModel>,
    failures: Vec<(FileFailure, u64, Instant)>,
    /// Distinct failures past [`MAX_FILE_FAILURES_PER_RUN`].
    pub dropped: u64,
}

impl FileLog {
    pub fn new(model: Arc<AccessModel>) -> Self {
        Self {
            model,
            failures: Vec::new(),
            dropped: 0,
        }
    }

    /// Keeps `f` when the grants do not explain it: the path is not one of the sandbox's
    /// own mounts, and no grant gives the access it was opened for. Cheap (no system
    /// call): it runs on the reader thread for every failed call of the run.
    pub fn add(&mut self, f: FileFailure, at: Instant) {
        if OWN_MOUNTS.iter().any(|m| f.path.starts_with(m)) {
            return;
        }
        let needed = if f.write { Access::Write } else { Access::Read };
        if self.model.access(&f.path) >= needed {
            return;
        }
        if let Some(kept) = self.failures.iter_mut().find(|(k, ..)| *k == f) {
            kept.1 += 1;
        } else if self.failures.len() < MAX_FILE_FAILURES_PER_RUN {
            self.failures.push((f, 1, at));
        } else {
            self.dropped += 1;
        }
    }

    /// The failures that were refusals: each path (or, for a creation, its directory)
    /// exists on the host ([`refused`]), as `(failure, count, first)`. Runs on the run's
    /// own task once it has ended: it asks the host about each path.
    pub fn refusals(self) -> impl Iterator<Item = (FileFailure, u64, Instant)> {
        self.failures
            .into_iter()
            .filter(|(f, ..)| refused(f, |p| std::fs::symlink_metadata(p).is_ok()))
    }
}

/// Whether failure `f` (already unexplained by the grants) was a refusal, `exists`
/// saying whether a path exists on the host: a read-only mount refused the write; or the
/// path the run asked for exists on the host (for a creation, its directory does), so
/// the sandbox hid it.
///
/// ```
/// use std::path::{Path, PathBuf};
/// use tierbox_sandbox::linux::audit::files::{FileFailure, refused};
///
/// let read = |p: &str| FileFailure {
///     operation: "read",
///     path: PathBuf::from(p),
///     errno: libc::ENOENT,
///     write: false,
///     create: false,
/// };
/// let host_has = |p: &Path| p == Path::new("/root/.ssh/id_ed25519");
/// assert!(refused(&read("/root/.ssh/id_ed25519"), host_has));
/// // Absent on the host too: a search that found nothing, not a refusal.
/// assert!(!refused(&read("/usr/lib/python3/none.py"), host_has));
/// ```
pub fn refused(f: &FileFailure, exists: impl Fn(&Path) -> bool) -> bool {
    if f.errno == libc::EROFS {
        return true;
    }
    exists(&f.path) || (f.create && f.path.parent().is_some_and(&exists))
}

// ---- the rules ------------------------------------------------------------------------

/// The key of this process's rules: `tierbox-files:PID:START` (its start time in clock
/// ticks since boot, so a reused pid is not taken for the supervisor that added them).
pub(super) fn own_key() -> String {
    format!(
        "{KEY_PREFIX}{}:{}",
        std::process::id(),
        start_time(std::process::id()).unwrap_or(0)
    )
}

/// Field 22 of `/proc/PID/stat`: when the process started.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything: count after it.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// `struct audit_rule_data` for an exit rule that records the [`FILE_CALLS`] of session
/// `ses` failing with an error from `ENOENT` to `EROFS`, under `key`; `None` on an
/// architecture without an audit number here. (One rule, not one per error: each
/// removal costs an RCU grace period.)
pub fn encode_rule(ses: u32, key: &str) -> Option<Vec<u8>> {
    let arch = crate::linux::seccomp::NATIVE_AUDIT_ARCH?;
    let mut mask = [0u32; AUDIT_BITMASK_SIZE];
    for (nr, _) in FILE_CALLS {
        let nr = usize::try_from(*nr).ok()?;
        *mask.get_mut(nr / 32)? |= 1 << (nr % 32);
    }
    let key_len = u32::try_from(key.len()).ok()?;
    // The kernel compares the return value's low 32 bits unsigned: -EROFS..=-ENOENT
    // is one range there (0xffffffe2..=0xfffffffe), and no success is in it.
    let (low, high) = (
        libc::EROFS.wrapping_neg() as u32,
        libc::ENOENT.wrapping_neg() as u32,
    );
    let fields: [(u32, u32, u32); 5] = [
        (AUDIT_ARCH, arch, AUDIT_EQUAL),
        (AUDIT_SESSIONID, ses, AUDIT_EQUAL),
        (AUDIT_EXIT, low, AUDIT_GREATER_OR_EQUAL),
        (AUDIT_EXIT, high, AUDIT_LESS_OR_EQUAL),
        (AUDIT_FILTERKEY, key_len, AUDIT_EQUAL),
    ];
    let mut out = Vec::with_capacity(RULE_HEADER_BYTES + key.len());
    let mut word = |w: u32| out.extend_from_slice(&w.to_ne_bytes());
    word(AUDIT_FILTER_EXIT);
    word(AUDIT_ALWAYS);
    word(fields.len() as u32);
    mask.iter().for_each(|m| word(*m));
    for i in 0..AUDIT_MAX_FIELDS {
        word(fields.get(i).map_or(0, |f| f.0));
    }
    for i in 0..AUDIT_MAX_FIELDS {
        word(fields.get(i).map_or(0, |f| f.1));
    }
    for i in 0..AUDIT_MAX_FIELDS {
        word(fields.get(i).map_or(0, |f| f.2));
    }
    word(key_len);
    out.extend_from_slice(key.as_bytes());
    Some(out)
}

/// The key of an encoded rule (as listed by the kernel), when it has one.
///
/// ```
/// use tierbox_sandbox::linux::audit::files::{encode_rule, rule_key};
///
/// if let Some(rule) = encode_rule(42, "tierbox-files:1:2") {
///     assert_eq!(rule_key(&rule).as_deref(), Some("tierbox-files:1:2"));
/// }
/// ```
pub fn rule_key(rule: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u32> {
        let b = rule.get(i * 4..i * 4 + 4)?;
        Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let count = usize::try_from(word(2)?).ok()?.min(AUDIT_MAX_FIELDS);
    let fields_at = 3 + AUDIT_BITMASK_SIZE;
    let values_at = fields_at + AUDIT_MAX_FIELDS;
    // String fields are stored one after another in the buffer, in field order.
    let mut offset = RULE_HEADER_BYTES;
    for i in 0..count {
        let field = word(fields_at + i)?;
        let value = usize::try_from(word(values_at + i)?).ok()?;
        if is_string_field(field) {
            let s = rule.get(offset..offset + value)?;
            if field == AUDIT_FILTERKEY {
                return String::from_utf8(s.to_vec()).ok();
            }
            offset += value;
        }
    }
    None
}

/// The fields whose value is a string's length in the rule's buffer.
fn is_string_field(field: u32) -> bool {
    // AUDIT_SUBJ_USER..AUDIT_OBJ_LEV_HIGH (13–17, 19–23), AUDIT_WATCH, AUDIT_DIR,
    // AUDIT_FILTERKEY (105, 107, 210), AUDIT_EXE (112).
    matches!(field, 13..=17 | 19..=23 | 105 | 107 | 112 | 210)
}

/// The rule keys of supervisors that are gone: `tierbox-files:PID:START` where no
/// process `PID` started at `START` runs.
pub fn is_stale_key(key: &str) -> bool {
    let Some(rest) = key.strip_prefix(KEY_PREFIX) else {
        return false;
    };
    let Some((pid, start)) = rest.split_once(':') else {
        return true;
    };
    match (pid.parse::<u32>(), start.parse::<u64>()) {
        (Ok(pid), Ok(start)) => start_time(pid) != Some(start),
        _ => true,
    }
}

/// The process's [`RuleRemover`], once a rule was added.
static REMOVER: std::sync::OnceLock<Option<RuleRemover>> = std::sync::OnceLock::new();

/// The thread that removes the rules of ended runs, one after another (each removal
/// waits for an RCU grace period in the kernel).
pub(super) struct RuleRemover {
    queue: std::sync::mpsc::Sender<Vec<u8>>,
    /// Rules handed over and not yet removed, and a condition signalled at each removal.
    waiting: Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>,
}

impl RuleRemover {
    /// The process's remover (started at first use).
    pub(super) fn get() -> Option<&'static Self> {
        REMOVER
            .get_or_init(|| {
                let (queue, rules) = std::sync::mpsc::channel::<Vec<u8>>();
                let waiting = Arc::new((std::sync::Mutex::new(0usize), std::sync::Condvar::new()));
                let counted = Arc::clone(&waiting);
                // A socket of its own: a removal holds it for a grace period, which the
                // shared one (status reads, barriers) must not wait for.
                let ctl = super::sys::AuditSocket::control(REMOVAL_TIMEOUT).ok()?;
                std::thread::Builder::new()
                    .name("tierbox-audit-rules".to_owned())
                    .spawn(move || {
                        for rule in rules {
                            let _ = ctl.del_rule(&rule);
                            let (count, removed) = &*counted;
                            if let Ok(mut n) = count.lock() {
                                *n = n.saturating_sub(1);
                            }
                            removed.notify_all();
                        }
                    })
                    .ok()?;
                Some(Self { queue, waiting })
            })
            .as_ref()
    }

    /// Rules waiting to be removed.
    pub(super) fn backlog(&self) -> usize {
        self.waiting.0.lock().map_or(usize::MAX, |n| *n)
    }

    /// Hands `rule` over for removal; gives it back when the thread is gone (the caller
    /// removes it itself).
    pub(super) fn remove(&self, rule: Vec<u8>) -> Result<(), Vec<u8>> {
        if let Ok(mut n) = self.waiting.0.lock() {
            *n += 1;
        }
        self.queue.send(rule).map_err(|e| {
            if let Ok(mut n) = self.waiting.0.lock() {
                *n = n.saturating_sub(1);
            }
            e.0
        })
    }

    /// Waits until every rule handed over is removed, at most `timeout`; whether they all
    /// were.
    fn flush(&self, timeout: std::time::Duration) -> bool {
        let (count, removed) = &*self.waiting;
        let Ok(n) = count.lock() else {
            return false;
        };
        removed
            .wait_timeout_while(n, timeout, |n| *n > 0)
            .is_ok_and(|(n, _)| *n == 0)
    }
}

impl std::fmt::Debug for RuleRemover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleRemover")
            .field("backlog", &self.backlog())
            .finish()
    }
}

/// Waits, at most [`FLUSH_TIMEOUT`], until the audit rules of this process's ended runs
/// are removed; whether they all were. A process about to exit calls it (the CLI does):
/// a rule left behind keeps costing every process of the host until the next supervisor
/// removes it as stale.
pub fn flush_rule_removals() -> bool {
    REMOVER
        .get()
        .and_then(Option::as_ref)
        .is_none_or(|r| r.backlog() == 0 || r.flush(FLUSH_TIMEOUT))
}

/// How many audit rules of this process the kernel holds now (listed: root only).
/// After [`flush_rule_removals`], none outside the runs in progress (what tests check).
#[cfg(feature = "test-support")]
pub fn rules_held() -> std::io::Result<usize> {
    let key = own_key();
    let ctl = super::control().map_err(std::io::Error::other)?;
    let ctl = ctl
        .lock()
        .map_err(|_| std::io::Error::other("the audit control socket is poisoned"))?;
    let rules = ctl.list_rules()?;
    Ok(rules
        .iter()
        .filter(|r| rule_key(r).as_deref() == Some(key.as_str()))
        .count())
}

/// Removes the rules of supervisors that died before removing theirs. Called once per
/// process, before it adds its first rule.
pub(super) fn remove_stale_rules(ctl: &super::sys::AuditSocket) {
    let Ok(rules) = ctl.list_rules() else {
        return;
    };
    for rule in rules {
        if rule_key(&rule).is_some_and(|k| is_stale_key(&k)) {
            let _ = ctl.del_rule(&rule);
        }
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
