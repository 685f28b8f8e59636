//! The native Tier C sandbox's pid 1 after setup: `tierbox-init`, a freestanding reaper
//! that pid 1 execs once the program runs.
//!
//! # Why an exec'd program
//!
//! pid 1 is cloned from the supervisor without `CLONE_VM`, so it starts on a
//! copy-on-write copy of the supervisor's memory. Every page of that copy it keeps shared
//! makes the supervisor take a copy-on-write fault (and a TLB shootdown across its
//! threads) the next time it writes there, for as long as pid 1 lives — the whole run.
//! Letting go of the copy once setup is over is what keeps a busy server fast; the
//! question is how.
//!
//! Unmapping the inherited memory from inside pid 1 and carrying on in the same program
//! cannot be made correct: nothing in the language bounds which memory the code after the
//! unmap touches. The compiler may turn any struct copy into a call to libc's `memmove`,
//! which reads libc's data segment, and which `memmove` glibc picked depends on the CPU —
//! so such a pid 1 crashed on some machines and in some build profiles and not others.
//!
//! `execve` lets go of the whole copy at once and starts a program whose memory is all its
//! own. `tierbox-init` ([`main.rs`](self) beside this file) is built for the crate's
//! target from this directory's sources and `core` alone, and linked statically with
//! nothing else: a call the compiler emits to a function it does not contain is a link
//! error, so whatever instructions the compiler chooses, they can only reach the
//! program's own pages. The supervisor writes the image once per process into a sealed
//! memfd ([`image_fd`]); pid 1 inherits the fd and runs it with `execveat(fd, "",
//! AT_EMPTY_PATH)` right after it reports the program started, so the exec overlaps the
//! program's run. The signal mask survives the exec; the reaper makes pid 1 non-dumpable
//! again, names it [`reaper::NAME`] and re-arms its death signal ([`reaper::rearm`]).
//!
//! The reaper itself ([`reaper`]), its system calls ([`sys`]) and the report records
//! ([`report`]) are single source files compiled twice: into `tierbox-init`, and into this
//! crate, where the same loop runs in process when the image cannot be exec'd (a CPU the
//! image is not built for, `vm.memfd_noexec = 2`, an `execveat` that fails). pid 1 then
//! keeps its copy of the supervisor's memory until it exits: slower for the supervisor,
//! and correct, since nothing is unmapped.
//!
//! Measured cost and benefit: `docs/benchmarks.md` ("Tier C spawn").

pub mod reaper;
pub mod report;
// `sys.rs` is also `tierbox-init`'s (`main.rs`): the calls only that program makes (fork,
// execve, the stacked filter, sending its listener) are compiled and linted here too, and
// a test checks their numbers against libc's, but this crate's fallback makes none of them.
#[allow(unsafe_code, dead_code)]
pub mod sys;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

/// The `tierbox-init` executable (a static ELF for this target), built by the crate's
/// build script; empty where it is not built (CPUs other than x86-64 and AArch64).
#[cfg(tierbox_init_image)]
pub const IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tierbox-init"));

/// The `tierbox-init` executable: not built for this CPU.
#[cfg(not(tierbox_init_image))]
pub const IMAGE: &[u8] = &[];

/// The name of the memfd holding [`IMAGE`] (shown in `/proc/<pid>/maps` and as
/// `/proc/<pid>/exe` of an exec'd pid 1).
pub const IMAGE_MEMFD_NAME: &std::ffi::CStr = c"tierbox-init";

/// A sealed, executable memfd holding [`IMAGE`], made the first time it is asked for and
/// kept (close-on-exec) for the life of the process; pid 1 inherits it at `clone`.
///
/// The memfd is sealed against writes, resizing and mode changes before any sandbox can
/// exist, so what pid 1 execs is exactly the embedded image. `Err` says why there is none:
/// no image for this CPU, or the kernel refused an executable memfd (`vm.memfd_noexec`
/// = 2); pid 1 then reaps in process.
pub fn image_fd() -> Result<BorrowedFd<'static>, &'static str> {
    static FD: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    match FD.get_or_init(make_image_fd) {
        Ok(fd) => Ok(fd.as_fd()),
        Err(reason) => Err(reason.as_str()),
    }
}

/// How pid 1 reaps on this host, for `doctor` and the enforcement report.
pub fn reaper_description() -> String {
    match image_fd() {
        Ok(_) => format!(
            "tierbox-init ({} bytes, static, exec'd from a sealed memfd once the program runs)",
            IMAGE.len()
        ),
        Err(reason) => format!("in process, keeping its copy of the supervisor ({reason})"),
    }
}

fn make_image_fd() -> Result<OwnedFd, String> {
    use rustix::fs::{MemfdFlags, SealFlags};

    if IMAGE.is_empty() {
        return Err("no tierbox-init image for this CPU".to_owned());
    }
    let base = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // MFD_EXEC says so explicitly (Linux 6.3+, where vm.memfd_noexec = 1 makes memfds
    // non-executable by default); older kernels refuse the flag and are executable.
    let fd = rustix::fs::memfd_create(IMAGE_MEMFD_NAME, base | MemfdFlags::EXEC)
        .or_else(|e| match e {
            rustix::io::Errno::INVAL => rustix::fs::memfd_create(IMAGE_MEMFD_NAME, base),
            e => Err(e),
        })
        .map_err(|e| format!("memfd_create(MFD_EXEC) refused: {e} (vm.memfd_noexec = 2?)"))?;
    let mut rest = IMAGE;
    while !rest.is_empty() {
        match rustix::io::write(&fd, rest) {
            Ok(0) => return Err("write of the tierbox-init image: no progress".to_owned()),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("write of the tierbox-init image: {e}")),
        }
    }
    let seals = SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    // F_SEAL_EXEC (Linux 6.3+) also freezes the mode; older kernels refuse it.
    rustix::fs::fcntl_add_seals(&fd, seals | SealFlags::EXEC)
        .or_else(|_| rustix::fs::fcntl_add_seals(&fd, seals))
        .map_err(|e| format!("sealing the tierbox-init memfd: {e}"))?;
    Ok(fd)
}

#[cfg(test)]
#[path = "init_tests.rs"]
mod tests;
