#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tierbox_policy::access::AccessModel;
use tierbox_policy::plan::FsPlan;

use super::*;

fn event(
    call: FileCall,
    errno: i32,
    args: [u64; 3],
    cwd: &str,
    names: &[(&str, &str)],
) -> FileEvent {
    FileEvent {
        ses: 7,
        call,
        errno,
        args,
        cwd: Some(cwd.to_owned()),
        names: names
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect(),
    }
}

fn openat() -> FileCall {
    FileCall::Open {
        flags: Some(2),
        dirfd: Some(0),
    }
}

/// `AT_FDCWD` as the audit record prints it.
const CWD: u64 = 0xffff_ff9c;

#[test]
fn a_failed_open_is_a_read_or_a_write_by_its_flags() {
    let read = event(
        openat(),
        libc::ENOENT,
        [CWD, 0, 0],
        "/w",
        &[("/root/.ssh/id", "UNKNOWN")],
    )
    .finish()
    .unwrap();
    assert_eq!(
        (read.operation, read.path.as_path(), read.write, read.create),
        ("read", Path::new("/root/.ssh/id"), false, false)
    );
    let flags = (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC) as u64;
    let write = event(
        openat(),
        libc::ENOENT,
        [CWD, 0, flags],
        "/w",
        &[("out/../x", "UNKNOWN")],
    )
    .finish()
    .unwrap();
    assert_eq!(
        (
            write.operation,
            write.path.as_path(),
            write.write,
            write.create
        ),
        ("write", Path::new("/w/x"), true, true)
    );
    // A read-only mount refuses writes only, whatever the call.
    let ro = event(
        FileCall::MakeDir { dirfd: Some(0) },
        libc::EROFS,
        [CWD, 0, 0],
        "/",
        &[("/etc/", "PARENT"), ("/etc/new", "CREATE")],
    )
    .finish()
    .unwrap();
    assert_eq!(
        (ro.operation, ro.path.as_path(), ro.write),
        ("make-dir", Path::new("/etc/new"), true)
    );
    // A new file a read-only mount refused before its entry was looked up: the kernel
    // records the directory alone, which is then the target.
    let flags = (libc::O_WRONLY | libc::O_CREAT) as u64;
    let create = event(
        openat(),
        libc::EROFS,
        [CWD, 0, flags],
        "/",
        &[("/etc/", "PARENT")],
    )
    .finish()
    .unwrap();
    assert_eq!(
        (create.operation, create.path.as_path()),
        ("create", Path::new("/etc"))
    );
}

#[test]
fn a_name_relative_to_a_directory_descriptor_is_not_guessed() {
    // dirfd 3, a relative name: the directory is unknown.
    assert_eq!(
        event(openat(), libc::ENOENT, [3, 0, 0], "/w", &[("x", "UNKNOWN")]).finish(),
        None
    );
    // An absolute name ignores the descriptor.
    assert!(
        event(
            openat(),
            libc::ENOENT,
            [3, 0, 0],
            "/w",
            &[("/x", "UNKNOWN")]
        )
        .finish()
        .is_some()
    );
    assert_eq!(
        event(openat(), libc::ENOENT, [CWD, 0, 0], "/w", &[]).finish(),
        None
    );
}

fn failure(path: &str, errno: i32, write: bool, create: bool) -> FileFailure {
    FileFailure {
        operation: if write { "write" } else { "read" },
        path: PathBuf::from(path),
        errno,
        write,
        create,
    }
}

#[test]
fn only_paths_the_host_has_were_refused() {
    let host = |p: &Path| p == Path::new("/srv/secret") || p == Path::new("/srv");
    // Hidden: the host has it.
    assert!(refused(
        &failure("/srv/secret", libc::ENOENT, false, false),
        host
    ));
    // Absent everywhere: not a refusal (a search path, a missing module).
    assert!(!refused(
        &failure("/srv/nothing", libc::ENOENT, false, false),
        host
    ));
    // A creation whose directory the host has, but the sandbox does not show.
    assert!(refused(
        &failure("/srv/new", libc::ENOENT, true, true),
        host
    ));
    assert!(!refused(
        &failure("/srv/new", libc::ENOENT, true, false),
        host
    ));
    // A read-only mount always refused.
    assert!(refused(&failure("/usr/x", libc::EROFS, true, true), |_| {
        false
    }));
}

#[test]
fn the_grants_explain_failures_before_the_host_is_asked() {
    let fs = FsPlan {
        system_roots: Arc::from(vec![PathBuf::from("/usr")]),
        system_read_only: Arc::from(vec![PathBuf::from("/usr")]),
        ..FsPlan::default()
    };
    let mut log = FileLog::new(Arc::new(AccessModel::new(Path::new("/w"), &fs)));
    let now = Instant::now();
    // A missing library under a granted system path: just missing.
    log.add(
        failure("/usr/lib/libnothing.so", libc::ENOENT, false, false),
        now,
    );
    // The sandbox's own mounts.
    log.add(
        failure("/proc/1234/status", libc::ENOENT, false, false),
        now,
    );
    // A missing file in the workspace.
    log.add(failure("/w/missing", libc::ENOENT, true, true), now);
    // Kept: ungranted, and a write under a read-only grant (twice).
    log.add(failure("/srv/secret", libc::ENOENT, false, false), now);
    log.add(failure("/usr/new", libc::EROFS, true, true), now);
    log.add(failure("/usr/new", libc::EROFS, true, true), now);
    let kept: Vec<(PathBuf, u64)> = log
        .failures
        .iter()
        .map(|(f, n, _)| (f.path.clone(), *n))
        .collect();
    assert_eq!(
        kept,
        vec![
            (PathBuf::from("/srv/secret"), 1),
            (PathBuf::from("/usr/new"), 2)
        ]
    );
}

#[test]
fn failures_past_the_bound_are_counted_not_kept() {
    let mut log = FileLog::new(Arc::new(AccessModel::new(
        Path::new("/w"),
        &FsPlan::default(),
    )));
    let now = Instant::now();
    for i in 0..MAX_FILE_FAILURES_PER_RUN + 10 {
        log.add(
            failure(&format!("/srv/{i}"), libc::ENOENT, false, false),
            now,
        );
    }
    assert_eq!(log.failures.len(), MAX_FILE_FAILURES_PER_RUN);
    assert_eq!(log.dropped, 10);
}

#[test]
fn a_rule_carries_its_session_error_and_key() {
    let Some(rule) = encode_rule(42, "tierbox-files:1:2") else {
        return; // an architecture without an audit number: nothing is added there
    };
    assert_eq!(rule.len(), RULE_HEADER_BYTES + "tierbox-files:1:2".len());
    assert_eq!(rule_key(&rule).as_deref(), Some("tierbox-files:1:2"));
    let word = |i: usize| u32::from_ne_bytes(rule[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(
        (word(0), word(1), word(2)),
        (AUDIT_FILTER_EXIT, AUDIT_ALWAYS, 5)
    );
    let fields = 3 + AUDIT_BITMASK_SIZE;
    let values = fields + AUDIT_MAX_FIELDS;
    let ops = values + AUDIT_MAX_FIELDS;
    assert_eq!((word(fields + 1), word(values + 1)), (AUDIT_SESSIONID, 42));
    // -EROFS <= exit <= -ENOENT, compared unsigned by the kernel: the two errors read,
    // and no success, are in the range.
    let (low, high) = (word(values + 2), word(values + 3));
    assert_eq!(
        (word(ops + 2), word(ops + 3)),
        (AUDIT_GREATER_OR_EQUAL, AUDIT_LESS_OR_EQUAL)
    );
    for errno in FILE_ERRNOS {
        assert!(
            (low..=high).contains(&(errno.wrapping_neg() as u32)),
            "{errno}"
        );
    }
    for ret in [0u32, 1, 4096, (-1i32) as u32] {
        assert!(!(low..=high).contains(&ret), "{ret}");
    }
    // Every recorded call is in the mask.
    for (nr, _) in FILE_CALLS {
        let nr = *nr as usize;
        assert_ne!(word(3 + nr / 32) & (1 << (nr % 32)), 0, "{nr}");
    }
}

#[test]
fn stale_keys_name_a_process_that_is_gone() {
    assert!(!is_stale_key(&own_key()));
    assert!(!is_stale_key("someone-else"));
    assert!(is_stale_key("tierbox-files:1:1"));
    assert!(is_stale_key("tierbox-files:garbage"));
}

/// The session a rule matches (its second field's value, as [`encode_rule`] writes it).
fn rule_session(rule: &[u8]) -> u32 {
    let at = (3 + AUDIT_BITMASK_SIZE + AUDIT_MAX_FIELDS + 1) * 4;
    u32::from_ne_bytes(rule[at..at + 4].try_into().unwrap())
}

/// The kernel tests change the host's rule list: one at a time.
static KERNEL_RULES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `test` with the audit control socket, alone among the kernel tests; root only
/// (CAP_AUDIT_CONTROL), else skipped (never under CI, which runs as root).
fn with_kernel_rules(test: impl FnOnce(&super::super::sys::AuditSocket)) {
    if !super::super::is_root() {
        eprintln!("skipped: adding audit rules needs root");
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        return;
    }
    let _one = KERNEL_RULES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ctl = super::super::control().unwrap().lock().unwrap();
    test(&ctl);
}

/// Adds a rule to the running kernel, finds it listed with its key, and removes it:
/// root only (CAP_AUDIT_CONTROL).
#[test]
fn rules_are_added_listed_and_removed_in_the_kernel() {
    with_kernel_rules(|ctl| {
        let (key, ses) = (own_key(), u32::MAX - 1);
        let Some(rule) = encode_rule(ses, &key) else {
            return;
        };
        ctl.add_rule(&rule).unwrap();
        let ours = |listed: &[Vec<u8>]| -> Vec<Vec<u8>> {
            listed
                .iter()
                .filter(|r| rule_key(r).as_deref() == Some(key.as_str()) && rule_session(r) == ses)
                .cloned()
                .collect()
        };
        let listed = ours(&ctl.list_rules().unwrap());
        assert_eq!(listed.len(), 1, "listed once");
        // Removed by its listed form, as a stale rule would be.
        ctl.del_rule(&listed[0]).unwrap();
        assert!(ours(&ctl.list_rules().unwrap()).is_empty());
    });
}

/// A rule left by a supervisor that is gone (its key names pid 1 with another start
/// time) is removed by the next supervisor; this process's own rule stays: root only.
#[test]
fn stale_rules_are_removed_and_live_ones_kept() {
    with_kernel_rules(|ctl| {
        let stale_key = format!("{KEY_PREFIX}1:{}", u64::MAX);
        let live_key = own_key();
        let (Some(stale), Some(live)) = (
            encode_rule(u32::MAX - 2, &stale_key),
            encode_rule(u32::MAX - 3, &live_key),
        ) else {
            return;
        };
        ctl.add_rule(&stale).unwrap();
        ctl.add_rule(&live).unwrap();
        remove_stale_rules(ctl);
        let keys: Vec<String> = ctl
            .list_rules()
            .unwrap()
            .iter()
            .filter_map(|r| rule_key(r))
            .collect();
        let _ = ctl.del_rule(&live);
        let _ = ctl.del_rule(&stale);
        assert!(!keys.contains(&stale_key), "{keys:?}");
        assert!(keys.contains(&live_key), "{keys:?}");
    });
}
