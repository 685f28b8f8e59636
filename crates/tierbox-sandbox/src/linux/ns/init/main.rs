//! `tierbox-init`: the native Tier C sandbox's pid 1 once the program runs.
//!
//! A freestanding static program (no `std`, no libc, no dynamic loader), built by the
//! crate's build script from this directory with `--cfg tierbox_init` and embedded in the
//! supervisor, which runs it from a sealed memfd. pid 1 execs it right after it has
//! started the program (see `mod.rs` beside this file for why), with the report pipe on
//! [`reaper::REPORT_FD`] and the program's pid in `argv[1]`; every signal but `SIGKILL`
//! is blocked (the mask survives the exec).
//!
//! Nothing in this program can reach memory that is not its own: it is linked from this
//! directory's sources and `core` alone, so a call the compiler emits to any function it
//! does not contain (`memcpy`, …) fails the link instead of jumping into a library that
//! is not mapped.

#![no_std]
#![no_main]
// The shared files also hold what only the supervisor uses (decoding a record, …).
#![allow(dead_code)]

mod reaper;
mod report;
mod sys;

/// Called by `_start` with the program's pid: re-arms what the exec reset, then reaps.
fn run(program: i32) -> ! {
    reaper::rearm(reaper::REPORT_FD);
    reaper::reap(reaper::REPORT_FD, program)
}
