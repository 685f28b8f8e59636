//! The one way a Tierbox test says it cannot run on this host.
//!
//! A test that needs something a host may lack (root, user namespaces, landlock, a cgroup
//! controller, bubblewrap, a container engine, a tool) calls [`skip`] with its name and
//! the reason, and returns when it answers `true`: it prints `SKIP <test>: <reason>` and
//! passes. Under CI (`CI=true`), whose machine has everything the suite needs, [`skip`]
//! fails the test instead: nothing that must run there can pass by not running.
//! [`skip_optional`] is for what even the CI machine may lack by design (an IPv6
//! loopback, an opt-in destructive test): it prints and passes everywhere.
//!
//! ```
//! fn needs_a_tool(test: &str) -> bool {
//!     if std::path::Path::new("/no/such/tool").exists() {
//!         return true;
//!     }
//!     !tierbox_test_support::skip_optional(test, "the tool is not installed")
//! }
//! assert!(!needs_a_tool("example"));
//! ```

// Test support: a failed setup step panics, which fails the test that asked for it.
#![allow(clippy::expect_used)]

#[cfg(unix)]
pub mod container_image;

/// Whether this run is CI's (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// `test` cannot run here because of `reason`: prints `SKIP <test>: <reason>` and returns
/// `true` (the caller returns). Under CI it panics instead, naming both.
#[track_caller]
pub fn skip(test: &str, reason: &str) -> bool {
    assert!(
        !in_ci(),
        "{test}: cannot run on this host ({reason}), and CI=true forbids skipping"
    );
    println!("SKIP {test}: {reason}");
    true
}

/// The running test's name (libtest names each test's thread after it).
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_owned()
}

/// [`skip`] for the running test.
#[track_caller]
pub fn skip_here(reason: &str) -> bool {
    skip(&current_test(), reason)
}

/// [`skip_optional`] for the running test.
pub fn skip_optional_here(reason: &str) -> bool {
    skip_optional(&current_test(), reason)
}

/// `test` cannot run here for a reason CI may have too (see the crate docs): prints
/// `SKIP <test>: <reason>` and returns `true`, under CI as well.
pub fn skip_optional(test: &str, reason: &str) -> bool {
    println!("SKIP {test}: {reason} (optional)");
    true
}

/// A new pseudo-terminal pair: the master (kept by the test) and the slave opened
/// read-write (to hand to a child as its terminal).
pub fn open_pty() -> (std::os::fd::OwnedFd, std::fs::File) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("a UTF-8 pts path"))
        .expect("open the pty's slave");
    (master, slave)
}

/// `text` with each audit session number (`audit session (4095)`, `session 4095`)
/// replaced by `N`. Every run has a session of its own on a host with audit enabled, so
/// two runs' enforcement reports differ there and, when they enforced the same, nowhere
/// else.
///
/// ```
/// assert_eq!(
///     tierbox_test_support::mask_audit_sessions("records of the run's own audit session (4095); rules for its audit session 17, x"),
///     "records of the run's own audit session (N); rules for its audit session N, x"
/// );
/// ```
pub fn mask_audit_sessions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("session") {
        let (head, tail) = rest.split_at(at + "session".len());
        out.push_str(head);
        let gap = tail.len() - tail.trim_start_matches([' ', '(']).len();
        let digits = tail[gap..].bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&tail[..gap]);
        if digits > 0 {
            out.push('N');
        }
        rest = &tail[gap + digits..];
    }
    out.push_str(rest);
    out
}

/// An outcome's `enforcement` report (JSON) with [`mask_audit_sessions`] applied to each
/// of its `denial_reports`: what two runs that enforced the same have in common.
pub fn enforcement_without_sessions(enforcement: &serde_json::Value) -> serde_json::Value {
    let mut e = enforcement.clone();
    if let Some(reports) = e["denial_reports"].as_object_mut() {
        for r in reports.values_mut() {
            if let Some(d) = r["detail"].as_str() {
                r["detail"] = mask_audit_sessions(d).into();
            }
        }
    }
    e
}

/// `len` bytes that are no text: pseudo-random (a fixed xorshift sequence, so a failure
/// repeats), beginning with NUL bytes, a lone UTF-8 continuation byte and an overlong
/// encoding, and with a NUL in every 4 KiB — what a stdin of any kind must carry exactly.
pub fn binary_payload(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(b"\0\0\x80\xc0\xaf\xff\xfe");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    for i in (4096..len).step_by(4096) {
        out[i] = 0;
    }
    out
}

/// Writes `data` to `w` as a slow producer does: the first half in chunks, a pause of
/// 300 ms, then the rest — so a reader that took a pause for the end of its input, or
/// needed the whole input at once, is found out. A failed write ends it (the reader
/// stopped reading: a limit, an early exit), which the caller judges from what was read.
pub fn feed_slowly(w: &mut impl std::io::Write, data: &[u8]) -> std::io::Result<()> {
    let (first, second) = data.split_at(data.len() / 2);
    for chunk in first.chunks(100_003) {
        w.write_all(chunk)?;
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    for chunk in second.chunks(100_003) {
        w.write_all(chunk)?;
    }
    Ok(())
}

/// Asserts that a run's outcome shows its program read exactly a streamed stdin of `len`
/// bytes with digest `sha256` (hex): the digest `sha256sum` printed in the sandbox (the
/// first word of its stdout) and the outcome's `stdin` report both.
#[track_caller]
pub fn assert_streamed_stdin_reached(outcome: &serde_json::Value, len: u64, sha256: &str) {
    let printed = outcome["stdout"]["text"].as_str().unwrap_or_default();
    assert_eq!(printed.split_whitespace().next(), Some(sha256), "{outcome}");
    assert_eq!(outcome["stdin"]["bytes"], len, "{outcome}");
    assert_eq!(outcome["stdin"]["sha256"], sha256, "{outcome}");
    assert_eq!(outcome["stdin"]["streamed"], true, "{outcome}");
}

/// `len` pseudo-random bytes (xorshift64 from `seed`): binary output for tests, almost
/// nowhere valid UTF-8, the same on every run.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// `Ok` when `got` is `want` byte for byte, else where they first differ and both
/// lengths (what `cmp` would say), for a test's failure message.
pub fn same_bytes(got: &[u8], want: &[u8]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    Err(format!(
        "differ at byte {at}: got {} bytes, want {} bytes",
        got.len(),
        want.len()
    ))
}

/// `policy` (the TOML `tierbox policy init` prints) keeping `max_bytes` of output per
/// stream and, with `backend`, running Tier C on that backend (`native`, `bwrap`; bwrap
/// has no landlock, which the policy then accepts missing).
pub fn policy_for_output(policy: &str, max_bytes: u64, backend: Option<&str>) -> String {
    let mut p = policy.replace(
        "[output]\nmax_bytes = 1048576\n",
        &format!("[output]\nmax_bytes = {max_bytes}\n"),
    );
    assert!(p.contains(&format!("max_bytes = {max_bytes}\n")), "{p}");
    if let Some(backend) = backend {
        p = p
            .replace("[tier]\n", &format!("[tier]\nbackend = \"{backend}\"\n"))
            .replace(
                r#"optional_layers = ["cgroup", "protected_paths", "disk"]"#,
                r#"optional_layers = ["cgroup", "protected_paths", "disk", "landlock"]"#,
            );
        assert!(p.contains("\"landlock\"]"), "{p}");
    }
    p
}

/// The files under `dir` (recursively, not following symlinks) whose bytes contain
/// `needle`: where a secret must not be.
pub fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => stack.push(path),
                Ok(m) if m.is_file() => {
                    let holds = std::fs::read(&path)
                        .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle));
                    if holds {
                        found.push(path);
                    }
                }
                _ => {}
            }
        }
    }
    found
}
