//! The `tierbox-init` image and the reaper's shared pieces. The image is never run here
//! with a valid pid: outside a pid namespace its `kill(-1, SIGKILL)` would reach every
//! process the test may signal. Real sandboxes run it in `child_tests.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsRawFd;

use super::reaper::{self, BAD_ARGUMENTS_EXIT};
use super::report::{REPORT_BYTES, ReapedUsage, Report, ReportTag, Rusage, Timeval};
use super::{IMAGE, image_fd};

/// `e_machine` of this build's CPU.
fn this_machine() -> Option<u16> {
    match std::env::consts::ARCH {
        "x86_64" => Some(62),
        "aarch64" => Some(183),
        _ => None,
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The image is a static executable for this CPU that depends on nothing: no program
/// interpreter (dynamic loader), no dynamic section, no writable and executable segment.
#[test]
fn the_image_is_a_static_executable_for_this_cpu_with_no_dynamic_linking() {
    let Some(machine) = this_machine() else {
        assert!(IMAGE.is_empty(), "an image for a CPU it is not built for");
        tierbox_test_support::skip_here("no tierbox-init image for this CPU");
        return;
    };
    let b = IMAGE;
    assert!(b.len() > 64, "image of {} bytes", b.len());
    assert!(
        b.len() <= 64 * 1024,
        "image of {} bytes: not the small freestanding program",
        b.len()
    );
    assert_eq!(&b[..4], b"\x7fELF");
    assert_eq!(b[4], 2, "ELFCLASS64");
    assert_eq!(b[5], 1, "little endian");
    assert_eq!(
        u16_at(b, 16),
        2,
        "ET_EXEC: a static, non-relocatable executable"
    );
    assert_eq!(u16_at(b, 18), machine, "e_machine");
    let (phoff, phentsize, phnum) = (u64_at(b, 32) as usize, u16_at(b, 54), u16_at(b, 56));
    assert_eq!(phentsize, 56);
    let mut loads = 0;
    for i in 0..usize::from(phnum) {
        let ph = phoff + i * 56;
        let (kind, flags) = (u32_at(b, ph), u32_at(b, ph + 4));
        assert_ne!(kind, 3, "PT_INTERP: the image would need a dynamic loader");
        assert_ne!(kind, 2, "PT_DYNAMIC: the image would need dynamic linking");
        if kind == 1 {
            loads += 1;
            assert!(flags & 0b011 != 0b011, "a writable and executable segment");
        }
    }
    assert!(loads >= 2, "{loads} loadable segments");
}

/// The memfd holds exactly the image, is executable and sealed against change.
#[test]
fn the_image_memfd_is_sealed_and_holds_the_image() {
    if this_machine().is_none() {
        assert!(image_fd().is_err());
        return;
    }
    let fd = image_fd().unwrap();
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    assert_eq!(std::fs::read(&path).unwrap(), IMAGE);
    assert!(
        std::fs::read_link(&path)
            .unwrap()
            .to_string_lossy()
            .starts_with("/memfd:tierbox-init"),
    );
    let seals = rustix::fs::fcntl_get_seals(fd).unwrap();
    for seal in [
        rustix::fs::SealFlags::WRITE,
        rustix::fs::SealFlags::SHRINK,
        rustix::fs::SealFlags::GROW,
        rustix::fs::SealFlags::SEAL,
    ] {
        assert!(seals.contains(seal), "{seals:?} lacks {seal:?}");
    }
    // Writable through no path: the write seal refuses a write through the memfd's own
    // descriptor, and a fresh open for writing fails too (EPERM from the seal, or
    // ETXTBSY while another test is executing the image at that moment).
    let err = rustix::io::pwrite(fd, b"x", 0).unwrap_err();
    assert_eq!(err, rustix::io::Errno::PERM, "{err}");
    let err = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"))
        .unwrap_err();
    assert!(
        matches!(err.raw_os_error(), Some(libc::EPERM | libc::ETXTBSY)),
        "{err}"
    );
    assert_eq!(image_fd().unwrap().as_raw_fd(), fd.as_raw_fd(), "made once");
}

/// The image runs on this CPU: started without a program pid it exits at once with
/// [`BAD_ARGUMENTS_EXIT`] (before it could signal or reap anything).
#[test]
fn the_image_runs_and_refuses_a_missing_or_bad_pid() {
    if this_machine().is_none() {
        return;
    }
    let fd = image_fd().unwrap();
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    for args in [&[][..], &["x"], &["-1"], &["0"], &["99999999999"], &["12a"]] {
        let status = std::process::Command::new(&path)
            .args(args)
            .env_clear()
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(BAD_ARGUMENTS_EXIT), "args {args:?}");
    }
}

#[test]
fn exit_codes_follow_the_wait_status_as_a_shell_does() {
    for status in [0, 3 << 8, 255 << 8, libc::SIGKILL, libc::SIGSEGV | 0x80] {
        let want = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        assert_eq!(reaper::exit_code(status), want, "status {status:#x}");
    }
}

#[test]
fn reaped_usage_adds_cpu_times_and_keeps_the_largest_rss() {
    let mut u = ReapedUsage::default();
    let ru = |sec, usec, rss| Rusage {
        utime: Timeval { sec, usec },
        stime: Timeval { sec: 0, usec: 7 },
        longs: {
            let mut l = [0; 14];
            l[0] = rss;
            l
        },
    };
    u.add(&ru(1, 5, 100));
    u.add(&ru(-3, -1, 40));
    u.add(&ru(i64::MAX, 0, -2));
    assert_eq!(u.user_us, u64::MAX, "saturates");
    assert_eq!(u.sys_us, 21);
    assert_eq!(u.max_rss_kib, 100);
}

#[test]
fn report_bytes_are_the_fields_in_order_native_endian() {
    let r = Report {
        tag: ReportTag::Failed as u32,
        step: 2,
        value: -3,
        op_index: 4,
        sub: 5,
        usage: ReapedUsage {
            user_us: 6,
            sys_us: 7,
            max_rss_kib: 8,
        },
    };
    let b = r.encode();
    assert_eq!(b.len(), REPORT_BYTES);
    let mut want = Vec::new();
    for w in [1u32, 2, (-3i32) as u32, 4, 5] {
        want.extend_from_slice(&w.to_ne_bytes());
    }
    for l in [6u64, 7, 8] {
        want.extend_from_slice(&l.to_ne_bytes());
    }
    assert_eq!(b.as_slice(), want.as_slice());
    assert_eq!(Report::decode(&b), r);
}

/// A classic BPF instruction as the kernel reads it (`struct sock_filter`).
fn insn(code: u16, jt: u8, jf: u8, k: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..2].copy_from_slice(&code.to_ne_bytes());
    b[2] = jt;
    b[3] = jf;
    b[4..].copy_from_slice(&k.to_ne_bytes());
    b
}

/// The image written to `dir` as an executable file (once).
fn image_in(dir: &std::path::Path) -> std::path::PathBuf {
    let image = dir.join("tierbox-init");
    if !image.exists() {
        std::fs::write(&image, IMAGE).unwrap();
        std::fs::set_permissions(&image, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    image
}

/// Writes the image and `filter` into `dir`, and returns the command running
/// `tierbox-init ARGS…` as pid 1 of a new pid namespace (`unshare`, root only) with
/// `filter` on fd 3.
fn stacked_as_pid1(dir: &std::path::Path, filter: &[u8], args: &[&str]) -> std::process::Command {
    let image = image_in(dir);
    let filter_path = dir.join("filter");
    std::fs::write(&filter_path, filter).unwrap();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(r#"exec 3<"$1"; image="$2"; shift 2; exec unshare --pid --fork "$image" "$@""#)
        .arg("sh")
        .arg(&filter_path)
        .arg(&image)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    cmd
}

/// [`stacked_as_pid1`], run to its end: its exit code and stderr.
fn run_stacked_as_pid1(dir: &std::path::Path, filter: &[u8], args: &[&str]) -> (i32, String) {
    let out = stacked_as_pid1(dir, filter, args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `BPF_RET | BPF_K`.
const RET: u16 = 0x06;
/// `BPF_LD | BPF_W | BPF_ABS`.
const LD_NR: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const JEQ: u16 = 0x15;

/// Whether the image can run here as pid 1 of a pid namespace of its own (this CPU, and
/// root for `unshare --pid`); prints the reason when not.
fn runs_as_pid1_here(test: &str) -> bool {
    if this_machine().is_none() {
        return false;
    }
    if rustix::process::geteuid().as_raw() != 0 {
        tierbox_test_support::skip(test, "a pid namespace of its own (unshare) needs root");
        return false;
    }
    true
}

/// `--run-stacked FD 0 LOG`: pid 1 reads the seccomp program from `FD` and the program
/// runs under it (a program that refuses `uname` makes `uname` fail); an empty, ragged
/// or oversized program stops pid 1 before anything runs, and malformed arguments are
/// refused as bad arguments.
#[test]
fn run_stacked_stacks_the_filter_it_reads_and_refuses_a_bad_one() {
    let test = "run_stacked_stacks_the_filter_it_reads_and_refuses_a_bad_one";
    if !runs_as_pid1_here(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let allow = insn(RET, 0, 0, libc::SECCOMP_RET_ALLOW);
    let deny_uname: Vec<u8> = [
        insn(LD_NR, 0, 0, 0),
        insn(JEQ, 0, 1, libc::SYS_uname as u32),
        insn(RET, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        allow,
    ]
    .concat();

    let run = |filter: &[u8], args: &[&str]| run_stacked_as_pid1(dir.path(), filter, args);
    let stacked = |log: &'static str, path: &'static str, argv0: &'static str| {
        ["--run-stacked", "3", "0", log, path, argv0]
    };
    for log in ["0", "1"] {
        assert_eq!(run(&allow, &stacked(log, "/bin/true", "true")).0, 0);
        let (code, _) = run(&deny_uname, &stacked(log, "/bin/uname", "uname"));
        assert_ne!(code, 0, "uname must be refused by the stacked filter");
        assert_eq!(run(&deny_uname, &stacked(log, "/bin/true", "true")).0, 0);
    }

    let too_long: Vec<u8> = std::iter::repeat_n(allow, super::sys::FILTER_MAX_INSNS + 1)
        .flatten()
        .collect();
    for bad in [
        &[][..],
        &allow[..7],
        &[allow, [0; 8]].concat()[..9],
        &too_long,
    ] {
        let (code, stderr) = run(bad, &stacked("1", "/bin/true", "true"));
        assert_eq!(code, reaper::SETUP_FAILED_EXIT, "{} bytes", bad.len());
        assert!(stderr.contains("stacked seccomp filter"), "{stderr}");
    }
    for args in [
        &["--run-stacked"][..],
        &["--run-stacked", "3"],
        &["--run-stacked", "3", "0", "1"],
        &["--run-stacked", "3", "0", "1", "/bin/true"],
        &["--run-stacked", "x", "0", "1", "/bin/true", "true"],
        &["--run-stacked", "12345", "0", "1", "/bin/true", "true"],
        &["--run-stacked", "0", "0", "1", "/bin/true", "true"],
        &["--run-stacked", "3", "y", "1", "/bin/true", "true"],
        &["--run-stacked", "3", "0", "2", "/bin/true", "true"],
        &["--run-logged", "3", "/bin/true", "true"],
    ] {
        assert_eq!(run(&allow, args).0, BAD_ARGUMENTS_EXIT, "{args:?}");
    }
}

/// `--run-stacked FD SOCK 0`: the stacked filter is attached with a user-notification
/// listener, which the program sends over `SOCK` before it is exec'd; the calls the
/// filter hands off wait for the holder of the listener, whose answer the program sees.
#[test]
fn run_stacked_sends_the_listener_of_the_filter_it_stacks() {
    let test = "run_stacked_sends_the_listener_of_the_filter_it_stacks";
    if !runs_as_pid1_here(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let notify_uname: Vec<u8> = [
        insn(LD_NR, 0, 0, 0),
        insn(JEQ, 0, 1, libc::SYS_uname as u32),
        insn(RET, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
        insn(RET, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
    .concat();
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    // The program's end must survive the shell's and unshare's exec.
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty()).unwrap();
    let sock = theirs.as_raw_fd().to_string();
    let child = stacked_as_pid1(
        dir.path(),
        &notify_uname,
        &["--run-stacked", "3", &sock, "0", "/bin/uname", "uname"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    drop(theirs);
    let ours = std::os::fd::OwnedFd::from(ours);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let listener = loop {
        match crate::launch::sys::recv_fd(&ours) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(std::time::Instant::now() < deadline, "no listener came");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            other => break other.unwrap(),
        }
    };
    let n = crate::launch::mediate::sys::notif_recv(&listener).unwrap();
    assert_eq!(i64::from(n.data.nr), libc::SYS_uname);
    crate::launch::mediate::sys::notif_send(&listener, n.id, 0, libc::EACCES).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ne!(
        out.status.code(),
        Some(0),
        "uname was refused by the answer"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Permission denied"), "{stderr}");
}

/// `--alive FD --run …` (a bwrap sandbox's pid 1): with the pipe's writer alive the
/// program runs; when the writer — the supervisor — is already gone, pid 1 ends before the
/// program starts; a malformed `--alive` is refused as bad arguments.
#[test]
fn alive_pipe_ends_pid1_when_the_supervisor_is_already_gone() {
    let test = "alive_pipe_ends_pid1_when_the_supervisor_is_already_gone";
    if !runs_as_pid1_here(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = image_in(dir.path());
    // fd 4 of pid 1 is the read end of a FIFO whose only writer is WRITER.
    let fifo = dir.path().join("alive");
    let run = |writer: &str, args: &[&str]| {
        let _ = std::fs::remove_file(&fifo);
        let script = format!(
            r#"mkfifo "$F"; {writer} >"$F" 2>/dev/null & w=$!; exec 4<"$F"; sleep 0.3; unshare --pid --fork "$0" "$@"; c=$?; kill $w 2>/dev/null; exit $c"#
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(&image)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("F", &fifo)
            .output()
            .unwrap();
        out.status.code().unwrap_or(-1)
    };
    let alive = ["--alive", "4", "--run", "/bin/sh", "sh", "-c", "exit 7"];
    assert_eq!(run("sleep 5", &alive), 7, "the supervisor is alive");
    assert_eq!(
        run("true", &alive),
        reaper::SUPERVISOR_GONE_EXIT,
        "the supervisor died before pid 1 re-armed its death signal"
    );
    for args in [
        &["--alive"][..],
        &["--alive", "4"],
        &["--alive", "0", "--run", "/bin/true", "true"],
        &["--alive", "x", "--run", "/bin/true", "true"],
        &["--alive", "4", "/bin/true", "true"],
    ] {
        assert_eq!(run("sleep 5", args), BAD_ARGUMENTS_EXIT, "{args:?}");
    }
}

/// `--pty SOCK ROWS COLS --run …`: the forked program makes its terminal in the devpts it
/// sees, of that size, sends the primary side over `SOCK` and takes the secondary as its
/// stdio and controlling terminal in a session of its own (it then reads its own
/// session's terminal through `/dev/tty`); a socket it cannot send over stops it before
/// it runs; a `--pty` without its three values, a socket at stdio or a size that is not a
/// number is refused as bad arguments.
#[test]
fn pty_makes_the_programs_terminal_and_sends_the_primary_out() {
    use std::io::Read;
    let test = "pty_makes_the_programs_terminal_and_sends_the_primary_out";
    if !runs_as_pid1_here(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = image_in(dir.path());
    let run = |args: &[&str]| {
        std::process::Command::new("unshare")
            .args(["--pid", "--fork"])
            .arg(&image)
            .args(args)
            .stdin(std::process::Stdio::null())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .spawn()
            .unwrap()
    };
    // Inherited at its own number (no close-on-exec), as bwrap passes it on.
    let (ours, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::empty(),
        None,
    )
    .unwrap();
    let sock = theirs.as_raw_fd().to_string();
    let script = "tty; stty size; : </dev/tty && exit 7";
    let mut child = run(&[
        "--pty", &sock, "33", "101", "--run", "/bin/sh", "sh", "-c", script,
    ]);
    drop(theirs);
    let primary = crate::linux::ns::sys::recv_fd(&ours).expect("the primary sent out");
    let status = child.wait().unwrap();
    let mut seen = Vec::new();
    // The secondary is gone with the program: the primary reads what it wrote, then EIO.
    let _ = std::fs::File::from(primary).read_to_end(&mut seen);
    let seen = String::from_utf8_lossy(&seen);
    assert_eq!(
        status.code(),
        Some(7),
        "the terminal is the program's: {seen}"
    );
    assert!(seen.contains("/dev/pts/"), "{seen}");
    assert!(seen.contains("33 101"), "{seen}");
    // Nothing to send over: the program never runs.
    let null = std::fs::File::open("/dev/null").unwrap();
    let fd = rustix::io::fcntl_dupfd_cloexec(&null, 10).unwrap();
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty()).unwrap();
    let bad = fd.as_raw_fd().to_string();
    let mut child = run(&[
        "--pty", &bad, "24", "80", "--run", "/bin/sh", "sh", "-c", "exit 7",
    ]);
    assert_eq!(
        child.wait().unwrap().code(),
        Some(reaper::SETUP_FAILED_EXIT)
    );
    for args in [
        &["--pty"][..],
        &["--pty", "5", "24", "--run", "/bin/true", "true"],
        &["--pty", "1", "24", "80", "--run", "/bin/true", "true"],
        &["--pty", "5", "x", "80", "--run", "/bin/true", "true"],
        &["--pty", "5", "24", "70000", "--run", "/bin/true", "true"],
    ] {
        assert_eq!(
            run(args).wait().unwrap().code(),
            Some(BAD_ARGUMENTS_EXIT),
            "{args:?}"
        );
    }
}
