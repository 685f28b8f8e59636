//! Kernel attack surface: system calls the seccomp filter denies that an unprivileged
//! process could otherwise make. Each is called with arguments that would succeed without
//! the filter and do no harm when they do (a descriptor is closed at once, the
//! personality is restored); calls that need a capability anyway (`mount`, `reboot`,
//! module loading) are not made, since failing them proves nothing about the filter.

use crate::sys::{self, SysResult, errno_name};
use crate::{ProbeResult, Report};

/// `PER_LINUX | ADDR_NO_RANDOMIZE`: disables ASLR for the next exec.
const PER_LINUX_NO_ASLR: libc::c_ulong = 0x0040000;

/// Changes the personality and, when that worked, puts the old one back.
fn personality_change() -> SysResult<()> {
    let old = sys::personality(PER_LINUX_NO_ASLR)?;
    let _ = sys::personality(old as libc::c_ulong);
    Ok(())
}

/// One call of the probe, reduced to "did it work".
type Call = fn() -> SysResult<()>;

/// `no-kernel-surface`: io_uring, userfaultfd, keyrings, bpf, perf events, personality
/// changes and file handles are all unavailable. Reported as `name: ERRNO`.
pub fn no_kernel_surface() -> ProbeResult {
    // Descriptors are dropped (closed) as soon as they are returned.
    let calls: [(&str, Call); 7] = [
        ("io_uring_setup", || sys::io_uring_setup().map(drop)),
        ("userfaultfd", || sys::userfaultfd().map(drop)),
        ("keyctl", || sys::keyctl_user_keyring_id().map(drop)),
        ("bpf", || sys::bpf_create_array_map().map(drop)),
        ("perf_event_open", || sys::perf_event_open_self().map(drop)),
        ("personality", personality_change),
        ("name_to_handle_at", sys::name_to_handle_at_cwd),
    ];
    let results: Vec<(&str, SysResult<()>)> =
        calls.iter().map(|(name, call)| (*name, call())).collect();
    let text: Vec<String> = results
        .iter()
        .map(|(name, r)| match r {
            Ok(()) => format!("{name}: SUCCEEDED"),
            Err(e) => format!("{name}: {}", errno_name(e.errno())),
        })
        .collect();
    let text = text.join("; ");
    Ok(if results.iter().any(|(_, r)| r.is_ok()) {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}

/// `no-mount`: the mount calls all fail: `mount` of a tmpfs on a fresh directory in the
/// working directory, `fsopen` and `open_tree` (the new mount API), and
/// `unshare(CLONE_NEWNS)` (tried last: a success leaves only the probe in a new mount
/// namespace). A mount that worked is detached at once.
pub fn no_mount() -> ProbeResult {
    let dir = std::path::PathBuf::from(format!("tierbox-probe-{}.mnt", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| {
        crate::ProbeError(format!(
            "cannot create {} in the working directory ({}); run the probe in the workspace",
            dir.display(),
            sys::io_errno_name(&e)
        ))
    })?;
    let mounted = sys::mount_tmpfs(&dir);
    if mounted.is_ok() {
        let _ = sys::umount_detach(&dir);
    }
    let _ = std::fs::remove_dir(&dir);
    let results: Vec<(&str, SysResult<()>)> = vec![
        ("mount(tmpfs)", mounted),
        ("fsopen(tmpfs)", sys::fsopen_tmpfs().map(drop)),
        (
            "open_tree(., OPEN_TREE_CLONE)",
            sys::open_tree_clone_cwd().map(drop),
        ),
        (
            "unshare(CLONE_NEWNS)",
            sys::unshare(libc::CLONE_NEWNS, "CLONE_NEWNS"),
        ),
    ];
    let text: Vec<String> = results
        .iter()
        .map(|(name, r)| match r {
            Ok(()) => format!("{name}: SUCCEEDED"),
            Err(e) => format!("{name}: {}", errno_name(e.errno())),
        })
        .collect();
    let text = text.join("; ");
    Ok(if results.iter().any(|(_, r)| r.is_ok()) {
        Report::Broken(text)
    } else {
        Report::Holds(text)
    })
}
