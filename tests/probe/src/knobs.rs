//! The kernel's global knobs under `/proc`: sysctls, `sysrq-trigger`, and the host-wide
//! state the container runtimes mask. Nothing here changes host state when the guarantee
//! holds *or* when it is broken: a sysctl is only ever written with the value it already
//! has, and `core_pattern` and `sysrq-trigger` are only opened, never written.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};

use crate::sys::io_errno_name;
use crate::{ProbeResult, Report};

/// A global sysctl whose value is written back unchanged.
const WRITE_BACK: &str = "/proc/sys/kernel/printk_ratelimit_burst";

/// Knobs only opened for writing (an open that works is the breach; nothing is written).
const OPEN_FOR_WRITE: [&str; 3] = [
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/vm/drop_caches",
    "/proc/sysrq-trigger",
];

/// Entries whose content must not be readable (masked as the container runtimes do).
const MASKED: [&str; 5] = [
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/interrupts",
];

/// `kernel-knobs`: no global sysctl can be written (the probe writes
/// `kernel.printk_ratelimit_burst` back with its own value), `kernel.core_pattern`,
/// `vm.drop_caches` and `/proc/sysrq-trigger` do not open for writing.
pub fn kernel_knobs() -> ProbeResult {
    let mut broken = Vec::new();
    let mut seen = Vec::new();
    match OpenOptions::new().read(true).write(true).open(WRITE_BACK) {
        Err(e) => seen.push(format!("open {WRITE_BACK} rw: {}", io_errno_name(&e))),
        Ok(mut f) => {
            let mut value = String::new();
            let wrote = f
                .read_to_string(&mut value)
                .and_then(|_| f.seek(SeekFrom::Start(0)))
                .and_then(|_| f.write_all(value.as_bytes()));
            match wrote {
                Ok(()) => broken.push(format!(
                    "wrote {WRITE_BACK} (its own value {:?} back)",
                    value.trim()
                )),
                Err(e) => seen.push(format!("write {WRITE_BACK}: {}", io_errno_name(&e))),
            }
        }
    }
    for path in OPEN_FOR_WRITE {
        match OpenOptions::new().write(true).open(path) {
            Ok(_) => broken.push(format!("opened {path} for writing")),
            Err(e) => seen.push(format!("open {path} w: {}", io_errno_name(&e))),
        }
    }
    Ok(if broken.is_empty() {
        Report::Holds(seen.join("; "))
    } else {
        Report::Broken(broken.join("; "))
    })
}

/// `proc-masked`: the host-wide state the container runtimes mask (`kcore`, `keys`,
/// `timer_list`, `sched_debug`, `interrupts`) reads as empty or not at all. Entries this
/// kernel does not have are skipped.
pub fn proc_masked() -> ProbeResult {
    let mut broken = Vec::new();
    let mut seen = Vec::new();
    for path in MASKED {
        let mut buf = [0u8; 256];
        match OpenOptions::new().read(true).open(path) {
            Err(e) => seen.push(format!("{path}: {}", io_errno_name(&e))),
            Ok(mut f) => match f.read(&mut buf) {
                Ok(0) => seen.push(format!("{path}: empty")),
                Ok(n) => broken.push(format!("{path}: read {n} bytes")),
                Err(e) => seen.push(format!("{path}: read {}", io_errno_name(&e))),
            },
        }
    }
    Ok(if broken.is_empty() {
        Report::Holds(seen.join("; "))
    } else {
        Report::Broken(broken.join("; "))
    })
}

/// `no-host-ipc KEY`: the SysV shared memory segment, message queue and semaphore set the
/// test made on the host under `KEY` cannot be found (`shmget`, `msgget` and `semget` of
/// the existing key all fail): the run has IPC of its own, or none.
pub fn no_host_ipc(key: i64) -> ProbeResult {
    let key = key as libc::key_t;
    let mut broken = Vec::new();
    let mut seen = Vec::new();
    // SAFETY: the three lookups take integer arguments only and create nothing.
    let found = unsafe {
        [
            ("shmget", libc::shmget(key, 0, 0)),
            ("msgget", libc::msgget(key, 0)),
            ("semget", libc::semget(key, 0, 0)),
        ]
    };
    for (call, r) in found {
        if r >= 0 {
            broken.push(format!("{call}({key:#x}) found id {r}"));
        } else {
            let e = std::io::Error::last_os_error();
            seen.push(format!("{call}: {}", io_errno_name(&e)));
        }
    }
    Ok(if broken.is_empty() {
        Report::Holds(seen.join("; "))
    } else {
        Report::Broken(broken.join("; "))
    })
}
