//! Tier A guarantees proven by guest programs, and the `wasm_run` validation rejections.
//!
//! Each guest in `tests/probe/wasm/` is a WAT WASI preview 1 command that tries one thing
//! and reports what happened on stdout (an errno, a count, ...) and through its exit code.
//! The tests copy the guest into a fresh workspace, validate a request against a policy
//! (`validate_wasm`), run the plan on a real engine and assert the exact outcome: errno,
//! exit code, limit, output. Every guest also has a positive control where one makes
//! sense (the same guest succeeding when the grant is there), so a broken guest cannot
//! make a test pass by failing for the wrong reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sha2::Digest as _;
use tierbox_policy::validate::validate_wasm;
use tierbox_policy::wasm::{DirAccess, FsGrant, ModuleSource, WasmPlan, WasmRunRequest};
use tierbox_policy::{Policy, Rejection, ValidateContext};
use tierbox_wasm::{CacheSource, OutputSink, RunReport, WasmEngine, WasmError, WasmLimit};

/// The guest programs.
const GUESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/probe/wasm/");

/// WASI preview 1 errnos the guests report.
const EBADF: i32 = 8;
const ENOTSOCK: i32 = 57;
const EPERM: i32 = 63;

// ---- harness -----------------------------------------------------------------------------

/// Keeps everything the guest writes.
#[derive(Default)]
struct Collect(Mutex<Vec<u8>>);

impl OutputSink for Collect {
    fn push(&self, chunk: &[u8]) -> bool {
        self.0.lock().unwrap().extend_from_slice(chunk);
        true
    }
}

impl Collect {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Counts every byte offered, keeps at most `keep` of them, checks they are all `x`, and
/// refuses (returns false) the chunk that takes the total past `accept`.
struct Counting {
    keep: usize,
    accept: u64,
    seen: AtomicU64,
    chunks: AtomicU64,
    largest_chunk: AtomicU64,
    refusals: AtomicU64,
    pushes_after_refusal: AtomicU64,
    only_x: AtomicBool,
    kept: Mutex<Vec<u8>>,
}

impl Counting {
    fn new(keep: usize, accept: u64) -> Self {
        Self {
            keep,
            accept,
            seen: AtomicU64::new(0),
            chunks: AtomicU64::new(0),
            largest_chunk: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            pushes_after_refusal: AtomicU64::new(0),
            only_x: AtomicBool::new(true),
            kept: Mutex::new(Vec::new()),
        }
    }
}

impl OutputSink for Counting {
    fn push(&self, chunk: &[u8]) -> bool {
        static XS: [u8; 4096] = [b'x'; 4096];
        if self.refusals.load(Ordering::Relaxed) > 0 {
            self.pushes_after_refusal.fetch_add(1, Ordering::Relaxed);
        }
        if !chunk.chunks(XS.len()).all(|c| c == &XS[..c.len()]) {
            self.only_x.store(false, Ordering::Relaxed);
        }
        self.chunks.fetch_add(1, Ordering::Relaxed);
        self.largest_chunk
            .fetch_max(chunk.len() as u64, Ordering::Relaxed);
        let total = self.seen.fetch_add(chunk.len() as u64, Ordering::Relaxed) + chunk.len() as u64;
        let mut kept = self.kept.lock().unwrap();
        let room = self.keep.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..room.min(chunk.len())]);
        if total > self.accept {
            self.refusals.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// `<tmp>/ws` (the workspace) with the named guests copied in as `<name>.wat`, and `<tmp>`
/// itself for files outside the workspace.
struct Workspace {
    _tmp: tempfile::TempDir,
    /// Canonical `<tmp>`: outside the workspace.
    root: PathBuf,
    /// Canonical workspace.
    ws: PathBuf,
}

fn workspace(guests: &[&str]) -> Workspace {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    for guest in guests {
        let from = format!("{GUESTS}{guest}.wat");
        std::fs::copy(&from, ws.join(format!("{guest}.wat")))
            .unwrap_or_else(|e| panic!("copy {from}: {e}"));
    }
    Workspace {
        _tmp: tmp,
        root,
        ws,
    }
}

/// A policy with the given `[wasm]` lines.
fn policy(wasm: &str) -> Policy {
    Policy::from_toml(&format!("version = 1\n[wasm]\n{wasm}\n")).unwrap()
}

/// A context with a fixed supervisor environment (not the test process's).
fn ctx(ws: &Path, env: &[(&str, &str)]) -> ValidateContext {
    ValidateContext::new(ws).with_env(
        env.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

fn request(guest: &str, args: &[&str]) -> WasmRunRequest {
    let mut req = WasmRunRequest::module(format!("{guest}.wat"));
    req.args = args.iter().map(|a| (*a).to_owned()).collect();
    req
}

fn plan(policy: &Policy, req: &WasmRunRequest, ws: &Path) -> WasmPlan {
    validate_wasm(policy, req, &ctx(ws, &[]))
        .unwrap_or_else(|r| panic!("validation rejected the request: {} ({r})", r.code()))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn run_with(
    engine: &WasmEngine,
    plan: &WasmPlan,
    stdout: Arc<dyn OutputSink>,
    stderr: Arc<dyn OutputSink>,
) -> RunReport {
    runtime()
        .block_on(engine.run(plan, stdout, stderr))
        .unwrap_or_else(|e| panic!("the run did not start: {e}"))
}

struct Ran {
    report: RunReport,
    stdout: String,
    stderr: String,
}

fn run(engine: &WasmEngine, plan: &WasmPlan) -> Ran {
    let out = Arc::new(Collect::default());
    let err = Arc::new(Collect::default());
    let report = run_with(engine, plan, out.clone(), err.clone());
    Ran {
        report,
        stdout: out.text(),
        stderr: err.text(),
    }
}

/// Asserts a run ended by itself with `code`, without trap or limit.
fn assert_exited(ran: &Ran, code: i32) {
    let r = &ran.report;
    assert_eq!(
        (r.exit_code, &r.trap, r.limit, r.timed_out, r.quota_exceeded),
        (Some(code), &None, None, false, false),
        "stdout {:?}, stderr {:?}",
        ran.stdout,
        ran.stderr
    );
}

fn engine() -> WasmEngine {
    WasmEngine::new(None).unwrap()
}

fn fs_grant(path: &Path, write: bool) -> FsGrant {
    FsGrant {
        path: path.display().to_string(),
        write,
    }
}

// ---- filesystem --------------------------------------------------------------------------

/// `open_outside.wat`: nothing outside the preopens can be opened, through `..`, an
/// absolute path, or a symlink; files inside can (the control).
#[test]
fn open_outside_the_preopens_is_refused() {
    let w = workspace(&["open_outside"]);
    std::fs::write(w.ws.join("inside.txt"), "inside-data").unwrap();
    std::fs::write(w.root.join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(w.root.join("secret.txt"), w.ws.join("link")).unwrap();
    std::os::unix::fs::symlink(&w.root, w.ws.join("linkdir")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", w.ws.join("rellink")).unwrap();
    std::os::unix::fs::symlink("inside.txt", w.ws.join("inlink")).unwrap();
    let secret = w.root.join("secret.txt").display().to_string();
    let policy = policy("");
    let engine = engine();
    // Preopens: fd 3 = /workspace, fd 4 = `.` (both the workspace).
    let refused = |dirfd: i32| (format!("dirfd={dirfd} errno={EPERM}\n"), 1);
    let read = |dirfd: i32| (format!("dirfd={dirfd} ok inside-data\n"), 0);
    let cases = [
        // Controls: the guest can open and read a file inside the workspace, also through
        // a symlink that stays inside it.
        ("inside.txt", read(4)),
        ("/workspace/inside.txt", read(3)),
        ("inlink", read(4)),
        // `..` out of a preopen.
        ("../secret.txt", refused(4)),
        ("/workspace/../secret.txt", refused(3)),
        ("/workspace/./../../../../etc/passwd", refused(3)),
        // Absolute host paths no preopen covers, sent as they are to fd 3.
        ("/etc/passwd", refused(3)),
        (&secret, refused(3)),
        // Symlinks inside the workspace that point outside it.
        ("link", refused(4)),
        ("/workspace/link", refused(3)),
        ("linkdir/secret.txt", refused(4)),
        ("rellink", refused(4)),
    ];
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for (path, (stdout, code)) in cases {
        let plan = plan(&policy, &request("open_outside", &[path]), &w.ws);
        let ran = run(&engine, &plan);
        assert!(!ran.stdout.contains("TOP-SECRET"), "read {path:?} outside");
        let r = &ran.report;
        assert_eq!((&r.trap, r.limit), (&None, None), "{path:?}");
        expected.push((path, stdout, Some(code)));
        actual.push((path, ran.stdout, r.exit_code));
    }
    assert_eq!(actual, expected);
}

/// `write_grant.wat`: a read-only `grants.fs` entry cannot be written to: no file is
/// created and an existing file is not truncated.
#[test]
fn write_through_a_read_only_grant_is_refused() {
    let w = workspace(&["write_grant"]);
    let ro = w.root.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("existing.txt"), "original").unwrap();
    let policy = policy(&format!("read_only = [{:?}]", ro.display().to_string()));
    let engine = engine();
    for name in ["new.txt", "existing.txt"] {
        let target = ro.join(name).display().to_string();
        let mut req = request("write_grant", &[&target]);
        req.grants.fs.push(fs_grant(&ro, false));
        let plan = plan(&policy, &req, &w.ws);
        assert_eq!(plan.preopens.len(), 3, "workspace twice, then the grant");
        let ran = run(&engine, &plan);
        // The grant is the third preopen: fd 5.
        assert_eq!(
            ran.stdout,
            format!("dirfd=5 open errno={EPERM}\n"),
            "{name}"
        );
        assert_exited(&ran, 1);
    }
    assert!(!ro.join("new.txt").exists(), "the file was created");
    assert_eq!(
        std::fs::read_to_string(ro.join("existing.txt")).unwrap(),
        "original"
    );
}

/// `write_grant.wat`: a read-write `grants.fs` entry can be written to and the host sees
/// the file (the control of the read-only test, same guest and path shape).
#[test]
fn write_through_a_read_write_grant_reaches_the_host() {
    let w = workspace(&["write_grant"]);
    let rw = w.root.join("rw");
    std::fs::create_dir(&rw).unwrap();
    let policy = policy(&format!("writable = [{:?}]", rw.display().to_string()));
    let target = rw.join("out.txt").display().to_string();
    let mut req = request("write_grant", &[&target]);
    req.grants.fs.push(fs_grant(&rw, true));
    let ran = run(&engine(), &plan(&policy, &req, &w.ws));
    assert_eq!(ran.stdout, "dirfd=5 ok\n");
    assert_exited(&ran, 0);
    assert_eq!(
        std::fs::read_to_string(rw.join("out.txt")).unwrap(),
        "written by guest\n"
    );
}

/// `write_grant.wat`: under `wasm.workspace = "read_only"` (or a request narrowing the
/// workspace to read-only) neither `/workspace` nor `.` is writable; with the default
/// read-write workspace the same write succeeds.
#[test]
fn read_only_workspace_is_not_writable() {
    let w = workspace(&["write_grant"]);
    let engine = engine();
    let read_only = policy("workspace = \"read_only\"");
    let mut narrowed = request("write_grant", &["out.txt"]);
    narrowed.grants.workspace = Some(DirAccess::ReadOnly);
    let cases = [
        (&read_only, request("write_grant", &["out.txt"]), "dirfd=4"),
        (
            &read_only,
            request("write_grant", &["/workspace/out.txt"]),
            "dirfd=3",
        ),
        (
            &read_only,
            request("write_grant", &["/workspace/write_grant.wat"]),
            "dirfd=3",
        ),
        (&policy(""), narrowed, "dirfd=4"),
    ];
    for (policy, req, dirfd) in &cases {
        let ran = run(&engine, &plan(policy, req, &w.ws));
        assert_eq!(
            ran.stdout,
            format!("{dirfd} open errno={EPERM}\n"),
            "{:?}",
            req.args
        );
        assert_exited(&ran, 1);
    }
    assert!(!w.ws.join("out.txt").exists());
    assert!(
        std::fs::read_to_string(w.ws.join("write_grant.wat"))
            .unwrap()
            .contains("(module")
    );
    // Control: the default read-write workspace.
    let ran = run(
        &engine,
        &plan(&policy(""), &request("write_grant", &["out.txt"]), &w.ws),
    );
    assert_eq!(ran.stdout, "dirfd=4 ok\n");
    assert_exited(&ran, 0);
    assert_eq!(
        std::fs::read_to_string(w.ws.join("out.txt")).unwrap(),
        "written by guest\n"
    );
}

// ---- environment -------------------------------------------------------------------------

/// `env.wat`: the guest's environment is exactly the request's `env` plus the granted
/// supervisor variables; other supervisor variables (a secret, PATH, HOME) are absent.
#[test]
fn environment_is_only_what_was_granted() {
    let w = workspace(&["env"]);
    let policy = policy("allow_env = [\"GRANTED\", \"SETVAR\", \"UNSET\"]");
    let supervisor = [
        ("GRANTED", "from-supervisor"),
        ("SECRET", "hunter2"),
        ("PATH", "/usr/bin"),
        ("HOME", "/root"),
    ];
    let mut req = request("env", &[]);
    req.grants.env = vec!["GRANTED".to_owned(), "UNSET".to_owned()];
    req.env
        .insert("SETVAR".to_owned(), "from-request".to_owned());
    let plan = validate_wasm(&policy, &req, &ctx(&w.ws, &supervisor)).unwrap();
    let ran = run(&engine(), &plan);
    assert_eq!(
        ran.stdout,
        "count=2\nGRANTED=from-supervisor\nSETVAR=from-request\n"
    );
    assert!(!ran.stdout.contains("SECRET") && !ran.stdout.contains("hunter2"));
    assert_exited(&ran, 0);

    // Control: with nothing granted, the guest has an empty environment.
    let plan = validate_wasm(&policy, &request("env", &[]), &ctx(&w.ws, &supervisor)).unwrap();
    let ran = run(&engine(), &plan);
    assert_eq!(ran.stdout, "count=0\n");
    assert_exited(&ran, 0);
}

// ---- CPU, memory, output -----------------------------------------------------------------

/// `loop.wat`: an infinite loop with plenty of fuel is stopped at the deadline.
#[test]
fn infinite_loop_is_stopped_by_the_deadline() {
    let w = workspace(&["loop"]);
    let policy = policy("fuel = 1000000000000000");
    let mut req = request("loop", &[]);
    req.timeout_ms = Some(300);
    let started = Instant::now();
    let ran = run(&engine(), &plan(&policy, &req, &w.ws));
    let took = started.elapsed();
    let r = &ran.report;
    assert_eq!(ran.stdout, "looping\n", "the guest did start");
    assert_eq!(
        (r.exit_code, &r.trap, r.limit, r.timed_out, r.quota_exceeded),
        (None, &None, Some(WasmLimit::WallTime), true, false)
    );
    assert!(r.fuel_consumed > 0 && r.fuel_consumed < 1_000_000_000_000_000);
    assert!(r.duration_ms >= 300, "stopped early: {r:?}");
    assert!(took.as_millis() < 2_300, "stopped late: {took:?}");
}

/// `loop.wat`: the same loop under a small fuel budget runs out of fuel long before the
/// deadline.
#[test]
fn infinite_loop_is_stopped_by_fuel() {
    let w = workspace(&["loop"]);
    let policy = policy("fuel = 1000000");
    let mut req = request("loop", &[]);
    req.timeout_ms = Some(30_000);
    let started = Instant::now();
    let ran = run(&engine(), &plan(&policy, &req, &w.ws));
    let took = started.elapsed();
    let r = &ran.report;
    assert_eq!(ran.stdout, "looping\n", "the guest did start");
    assert_eq!(
        (r.exit_code, &r.trap, r.limit, r.timed_out, r.quota_exceeded),
        (None, &None, Some(WasmLimit::Fuel), false, false)
    );
    assert_eq!(r.fuel_consumed, 1_000_000);
    assert!(took.as_secs() < 10, "fuel ran out late: {took:?}");
}

/// `memory.wat`: `memory.grow` past `wasm.memory_bytes` returns -1 to the guest, which
/// exits normally; the run reports the memory limit and the peak actually granted.
#[test]
fn memory_grow_past_the_limit_fails_cleanly() {
    let w = workspace(&["memory"]);
    let policy = policy("memory_bytes = 2097152");
    let ran = run(&engine(), &plan(&policy, &request("memory", &[]), &w.ws));
    let r = &ran.report;
    assert_eq!(ran.stdout, "grow1=1 grow2=-1 grow3=-1 pages=16\n");
    assert_eq!(
        (r.exit_code, &r.trap, r.limit, r.timed_out, r.quota_exceeded),
        (Some(42), &None, Some(WasmLimit::Memory), false, false)
    );
    assert_eq!(r.peak_memory_bytes, 16 * 65536);

    // Control: with room for 48 pages, the second grow succeeds and no limit is hit.
    let policy = self::policy("memory_bytes = 3145728");
    let ran = run(&engine(), &plan(&policy, &request("memory", &[]), &w.ws));
    assert_eq!(ran.stdout, "grow1=1 grow2=16 grow3=-1 pages=48\n");
    assert_eq!(ran.report.exit_code, Some(42));
    assert_eq!(ran.report.peak_memory_bytes, 48 * 65536);
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// `flood.wat`: 1 GiB of stdout streams through a sink that keeps accepting (truncate
/// semantics): the run completes, the sink saw exactly 1 GiB of `x`, in bounded chunks.
#[test]
fn one_gib_of_output_streams_through_a_truncating_sink() {
    let w = workspace(&["flood"]);
    let mut req = request("flood", &[]);
    req.timeout_ms = Some(120_000);
    let plan = plan(&policy(""), &req, &w.ws);
    let out = Arc::new(Counting::new(4096, u64::MAX));
    let err = Arc::new(Collect::default());
    let started = Instant::now();
    let r = run_with(&engine(), &plan, out.clone(), err.clone());
    let took = started.elapsed();
    eprintln!(
        "1 GiB of output in {took:?} ({} chunks)",
        out.chunks.load(Ordering::Relaxed)
    );
    assert_eq!(err.text(), "done\n");
    assert_eq!(
        (r.exit_code, &r.trap, r.limit, r.timed_out, r.quota_exceeded),
        (Some(0), &None, None, false, false)
    );
    assert_eq!(out.seen.load(Ordering::Relaxed), GIB);
    assert!(out.only_x.load(Ordering::Relaxed));
    assert_eq!(out.kept.lock().unwrap().len(), 4096);
    assert!(out.largest_chunk.load(Ordering::Relaxed) <= 64 * 1024);
    assert!(took.as_secs() < 60, "1 GiB took {took:?}");
}

/// `flood.wat`: a sink that refuses after 1 MiB (kill semantics) stops the guest at that
/// write: `quota_exceeded`, `limit = output`, no exit code, nothing pushed afterwards.
#[test]
fn output_quota_in_kill_mode_stops_the_guest() {
    let w = workspace(&["flood"]);
    let plan = plan(&policy(""), &request("flood", &[]), &w.ws);
    let out = Arc::new(Counting::new(0, MIB));
    let err = Arc::new(Collect::default());
    let started = Instant::now();
    let r = run_with(&engine(), &plan, out.clone(), err.clone());
    let took = started.elapsed();
    assert_eq!(
        (r.exit_code, &r.trap, r.limit, r.timed_out, r.quota_exceeded),
        (None, &None, Some(WasmLimit::Output), false, true),
        "stderr {:?}",
        err.text()
    );
    assert_eq!(err.text(), "", "the guest went on after the refused write");
    let seen = out.seen.load(Ordering::Relaxed);
    let largest = out.largest_chunk.load(Ordering::Relaxed);
    assert!(seen > MIB && seen <= MIB + largest, "sink saw {seen} bytes");
    assert_eq!(out.refusals.load(Ordering::Relaxed), 1);
    assert_eq!(out.pushes_after_refusal.load(Ordering::Relaxed), 0);
    assert!(took.as_secs() < 10, "stopping took {took:?}");
}

// ---- network -----------------------------------------------------------------------------

/// `net.wat`: with no grant (and Tier A has none), every socket call on fds 0..=10 fails:
/// EBADF for closed fds, ENOTSOCK for stdio and the preopened directories.
#[test]
fn no_socket_calls_succeed() {
    let w = workspace(&["net"]);
    let ran = run(&engine(), &plan(&policy(""), &request("net", &[]), &w.ws));
    let mut expected = String::new();
    for fd in 0..=10 {
        // 0-2: stdio; 3-4: the workspace preopens; 5-10: not open.
        let e = if fd <= 4 { ENOTSOCK } else { EBADF };
        expected += &format!("fd={fd} accept={e} send={e} recv={e} shutdown={e}\n");
    }
    assert_eq!(ran.stdout, expected);
    assert_exited(&ran, 0);
}

// ---- compiled-code cache -----------------------------------------------------------------

/// The first run compiles and stores on disk; the same engine then serves it from memory;
/// a second engine (a new process) loads it from disk without compiling.
#[test]
fn compiled_code_is_cached_on_disk_and_in_memory() {
    let w = workspace(&["env"]);
    let cache = w.root.join("cache");
    let plan = plan(&policy(""), &request("env", &[]), &w.ws);

    let first = WasmEngine::new(Some(cache.clone())).unwrap();
    let a = run(&first, &plan);
    assert_eq!(a.report.cache, CacheSource::Compiled);
    assert_eq!(a.stdout, "count=0\n");
    let b = run(&first, &plan);
    assert_eq!(b.report.cache, CacheSource::Memory);
    assert_eq!(b.stdout, "count=0\n");

    let entries: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().any(|e| e.ends_with(".cwasm")));
    assert!(entries.iter().any(|e| e.ends_with(".mac")));

    let second = WasmEngine::new(Some(cache.clone())).unwrap();
    let c = run(&second, &plan);
    assert_eq!(c.report.cache, CacheSource::Disk);
    assert_eq!(c.stdout, "count=0\n");
    assert_exited(&c, 0);
    let d = run(&second, &plan);
    assert_eq!(d.report.cache, CacheSource::Memory);
    assert_eq!(a.report.module_sha256, c.report.module_sha256);

    // Control: an engine without a disk cache compiles.
    assert_eq!(run(&engine(), &plan).report.cache, CacheSource::Compiled);
}

/// A guest that prints the four bytes of an immediate: `abcd`.
const IMMEDIATE_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (i32.store (i32.const 64) (i32.const 0x64636261))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 4))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// A cached compiled module patched on disk — its machine code changed and the digest
/// beside it rewritten to match, as a process that could write the cache would — is
/// refused: the next run compiles again, prints what the module says, reports which
/// entry failed its check, and stores a good entry again.
///
/// Regression: the cache trusted a plain SHA-256 sidecar, so the next run executed the
/// patched native code (printing the patched value) and still reported the original
/// `module_sha256`.
#[test]
fn a_patched_cache_entry_is_refused_and_never_runs() {
    let w = workspace(&[]);
    std::fs::write(w.ws.join("imm.wat"), IMMEDIATE_WAT).unwrap();
    let cache = w.root.join("cache");
    let plan = plan(&policy(""), &WasmRunRequest::module("imm.wat"), &w.ws);
    let first = run(&WasmEngine::new(Some(cache.clone())).unwrap(), &plan);
    assert_eq!(first.stdout, "abcd");
    assert_eq!(first.report.cache, CacheSource::Compiled);

    let entry = |ext: &str| {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == ext))
            .unwrap_or_else(|| panic!("no .{ext} entry"))
    };
    let code = entry("cwasm");
    let mut bytes = std::fs::read(&code).unwrap();
    let at = bytes
        .windows(4)
        .position(|w| w == b"abcd")
        .expect("the immediate in the compiled code");
    bytes[at..at + 4].copy_from_slice(b"PWND");
    std::fs::write(&code, &bytes).unwrap();
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(entry("mac"), digest).unwrap();

    let second = run(&WasmEngine::new(Some(cache.clone())).unwrap(), &plan);
    assert_eq!(second.stdout, "abcd", "the patched code ran");
    assert_eq!(second.report.cache, CacheSource::Compiled);
    let why = second.report.cache_refused.as_deref().unwrap_or_default();
    assert!(why.contains(".cwasm") && why.contains("MAC"), "{why:?}");
    assert_eq!(second.report.module_sha256, first.report.module_sha256);
    // The entry was stored again, good: the next process loads it.
    let third = run(&WasmEngine::new(Some(cache)).unwrap(), &plan);
    assert_eq!(
        (third.report.cache, third.report.cache_refused),
        (CacheSource::Disk, None)
    );
    assert_eq!(third.stdout, "abcd");
}

// ---- validation --------------------------------------------------------------------------

fn rejection(policy: &Policy, req: &WasmRunRequest, ws: &Path) -> Rejection {
    match validate_wasm(policy, req, &ctx(ws, &[("SECRET", "hunter2")])) {
        Ok(plan) => panic!("accepted: {plan:?}"),
        Err(r) => r,
    }
}

fn assert_grant_denied(r: &Rejection, expected: &str) {
    assert_eq!(r.code(), "wasm.grant_denied", "{r}");
    match r {
        Rejection::WasmGrantDenied { grant, .. } => assert_eq!(grant, expected),
        other => panic!("not a grant denial: {other:?}"),
    }
}

/// A grant the policy does not allow is rejected with `wasm.grant_denied` naming it.
#[test]
fn grant_outside_the_policy_is_rejected_naming_it() {
    let w = workspace(&["env"]);
    let ro = w.root.join("ro");
    let other = w.root.join("other");
    let sub = w.ws.join("sub");
    for d in [&ro, &other, &sub] {
        std::fs::create_dir(d).unwrap();
    }
    let policy = policy(&format!(
        "read_only = [{:?}]\nallow_env = [\"GRANTED\"]",
        ro.display().to_string()
    ));

    // Control: the listed directory, read-only, and a listed variable are accepted.
    let mut ok = request("env", &[]);
    ok.grants.fs.push(fs_grant(&ro, false));
    ok.grants.env.push("GRANTED".to_owned());
    let plan = validate_wasm(&policy, &ok, &ctx(&w.ws, &[])).unwrap();
    assert_eq!(plan.preopens[2].host, ro);
    assert_eq!(plan.preopens[2].guest, ro.display().to_string());
    assert!(!plan.preopens[2].writable);

    let mut req = request("env", &[]);
    req.grants.fs.push(fs_grant(&other, false));
    let name = format!("fs {} (read_only)", other.display());
    assert_grant_denied(&rejection(&policy, &req, &w.ws), &name);

    let mut req = request("env", &[]);
    req.grants.fs.push(fs_grant(&ro, true));
    let name = format!("fs {} (read_write)", ro.display());
    assert_grant_denied(&rejection(&policy, &req, &w.ws), &name);

    let mut req = request("env", &[]);
    req.grants.fs.push(FsGrant {
        path: "sub".to_owned(),
        write: false,
    });
    assert_grant_denied(&rejection(&policy, &req, &w.ws), "fs sub (read_only)");

    let mut req = request("env", &[]);
    req.grants.env.push("SECRET".to_owned());
    assert_grant_denied(&rejection(&policy, &req, &w.ws), "env SECRET");

    let mut req = request("env", &[]);
    req.env.insert("SECRET".to_owned(), "x".to_owned());
    assert_grant_denied(&rejection(&policy, &req, &w.ws), "env SECRET");

    let read_only = self::policy("workspace = \"read_only\"");
    let mut req = request("env", &[]);
    req.grants.workspace = Some(DirAccess::ReadWrite);
    assert_grant_denied(&rejection(&read_only, &req, &w.ws), "workspace read_write");
}

/// Inline modules need `wasm.allow_inline_modules`.
#[test]
fn inline_module_needs_allow_inline_modules() {
    let w = workspace(&[]);
    let wat = WasmRunRequest {
        module_wat: Some("(module)".to_owned()),
        ..WasmRunRequest::default()
    };
    let base64 = WasmRunRequest {
        module_base64: Some("AGFzbQEAAAA=".to_owned()),
        ..WasmRunRequest::default()
    };
    for (req, field) in [(&wat, "module_wat"), (&base64, "module_base64")] {
        let r = rejection(&policy(""), req, &w.ws);
        assert_eq!(r.code(), "wasm.inline_denied", "{r}");
        assert!(matches!(&r, Rejection::WasmInlineDenied { field: f } if f == field));
    }
    // Control: accepted when the policy allows them.
    let allowing = policy("allow_inline_modules = true");
    let plan = validate_wasm(&allowing, &wat, &ctx(&w.ws, &[])).unwrap();
    assert_eq!(plan.module, ModuleSource::Inline(b"(module)".to_vec()));
    let plan = validate_wasm(&allowing, &base64, &ctx(&w.ws, &[])).unwrap();
    assert_eq!(
        plan.module,
        ModuleSource::Inline(b"\0asm\x01\0\0\0".to_vec())
    );
}

/// A network grant is held to the policy's egress: the default policy's `block_all`
/// refuses it (`wasm.grant_denied`, naming the mode and the entry that would allow it), and
/// a grant without a port is refused whatever the mode.
#[test]
fn network_grant_is_held_to_the_policy_s_egress() {
    let w = workspace(&["net"]);
    let mut req = request("net", &[]);
    req.grants.network.push("example.com:443".to_owned());
    let r = rejection(&policy(""), &req, &w.ws);
    assert_eq!(r.code(), "wasm.grant_denied", "{r}");
    let text = r.to_string();
    assert!(
        text.contains("block_all") && text.contains("egress.allow += \"example.com:443\""),
        "{text}"
    );
    req.grants.network = vec!["example.com".to_owned()];
    let r = rejection(&policy(""), &req, &w.ws);
    assert!(r.to_string().contains("names no port"), "{r}");
}

/// What a run of `plan` does with a module file that may be swapped: the guest's output,
/// or the rejection's text.
fn run_or_rejection(engine: &WasmEngine, plan: &WasmPlan) -> Result<String, String> {
    let out = Arc::new(Collect::default());
    let err = Arc::new(Collect::default());
    match runtime().block_on(engine.run(plan, out.clone(), err.clone())) {
        Ok(_) => Ok(out.text()),
        Err(WasmError::Rejected(r)) => Err(format!("[{}] {r}", r.code())),
        Err(e) => panic!("the run did not start: {e}"),
    }
}

/// The module a run loads is the file validation resolved: a symlink swapped in after
/// validation — to a file outside the workspace, or for a parent directory — is refused
/// without saying anything of what it points at; and with a thread swapping the module
/// and a symlink to an outside file back and forth while requests are validated and run
/// (bounded: 300 rounds, or up to 3000 until one run gets through), every run either prints the module's output or is refused,
/// and no message ever quotes the outside file.
///
/// Regression: validation checked the path, the engine opened it again following
/// symlinks; a guest renaming a relative symlink over the module won the race 8 times in
/// 150, and the WAT parse error quoted the outside file (`1 | SECRET-OUT`).
#[test]
fn the_module_loaded_is_the_file_validated() {
    const SECRET: &str = "SECRET-OUT";
    let w = workspace(&[]);
    std::fs::write(w.root.join("secret.txt"), format!("{SECRET}\n")).unwrap();
    std::fs::create_dir(w.ws.join("sub")).unwrap();
    std::fs::write(w.ws.join("sub/m.wat"), IMMEDIATE_WAT).unwrap();
    let policy = policy("");
    let engine = engine();
    let plan = plan(&policy, &WasmRunRequest::module("sub/m.wat"), &w.ws);
    assert_eq!(run_or_rejection(&engine, &plan), Ok("abcd".to_owned()));

    // Swapped after validation: the file, then a parent directory.
    let module = w.ws.join("sub/m.wat");
    std::fs::rename(&module, w.ws.join("real.wat")).unwrap();
    std::os::unix::fs::symlink("../../secret.txt", &module).unwrap();
    let refused = run_or_rejection(&WasmEngine::new(None).unwrap(), &plan).unwrap_err();
    assert!(
        refused.contains("changed since it was validated"),
        "{refused}"
    );
    assert!(!refused.contains(SECRET), "{refused}");
    std::fs::remove_file(&module).unwrap();
    std::fs::rename(w.ws.join("sub"), w.ws.join("sub.real")).unwrap();
    std::fs::create_dir(w.root.join("outside")).unwrap();
    std::fs::copy(w.root.join("secret.txt"), w.root.join("outside/m.wat")).unwrap();
    std::os::unix::fs::symlink(w.root.join("outside"), w.ws.join("sub")).unwrap();
    let refused = run_or_rejection(&WasmEngine::new(None).unwrap(), &plan).unwrap_err();
    assert!(
        refused.contains("changed since it was validated"),
        "{refused}"
    );
    assert!(!refused.contains(SECRET), "{refused}");
    std::fs::remove_file(w.ws.join("sub")).unwrap();
    std::fs::rename(w.ws.join("sub.real"), w.ws.join("sub")).unwrap();
    std::fs::rename(w.ws.join("real.wat"), &module).unwrap();

    // The race, as a guest would run it.
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, sub) = (stop.clone(), w.ws.join("sub"));
        std::thread::spawn(move || {
            let (link, real, spare) = (sub.join("link"), sub.join("m.wat"), sub.join("spare"));
            while !stop.load(Ordering::Relaxed) {
                let _ = std::os::unix::fs::symlink("../../secret.txt", &link);
                let _ = std::fs::rename(&real, &spare);
                let _ = std::fs::rename(&link, &real);
                let _ = std::fs::rename(&real, &link);
                let _ = std::fs::rename(&spare, &real);
            }
        })
    };
    let (mut ran, mut refused) = (0, 0);
    // 300 rounds, more (up to 3000) until one run got through.
    for round in 0..3000 {
        if round >= 300 && ran > 0 {
            break;
        }
        // Each round a new engine: no memory cache between rounds.
        let Ok(plan) = validate_wasm(
            &policy,
            &WasmRunRequest::module("sub/m.wat"),
            &ctx(&w.ws, &[]),
        ) else {
            refused += 1;
            continue;
        };
        match run_or_rejection(&WasmEngine::new(None).unwrap(), &plan) {
            Ok(out) => {
                assert_eq!(out, "abcd");
                ran += 1;
            }
            Err(message) => {
                assert!(!message.contains(SECRET), "{message}");
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    println!("race: {ran} runs printed the module's output, {refused} were refused");
    assert!(ran > 0, "no run got through: the race test tested nothing");
}

/// A module path that resolves outside the workspace is `wasm.module_invalid`, with the
/// same reason whether or not the outside file exists.
///
/// Regression: "resolves to /root/.bashrc, outside the workspace" for an existing file
/// against "cannot be resolved" for a missing one told a caller what exists on the host.
#[test]
fn module_path_outside_the_workspace_is_invalid() {
    let w = workspace(&[]);
    let module = b"\0asm\x01\0\0\0";
    std::fs::write(w.root.join("x.wasm"), module).unwrap();
    std::fs::write(w.ws.join("ok.wasm"), module).unwrap();
    std::os::unix::fs::symlink(w.root.join("x.wasm"), w.ws.join("link.wasm")).unwrap();
    std::os::unix::fs::symlink(&w.root, w.ws.join("up")).unwrap();
    let outside = w.root.join("x.wasm").display().to_string();
    let policy = policy("");
    // Control: a module inside the workspace is accepted.
    let plan = validate_wasm(
        &policy,
        &WasmRunRequest::module("ok.wasm"),
        &ctx(&w.ws, &[]),
    );
    assert_eq!(
        plan.unwrap().module,
        ModuleSource::File(w.ws.join("ok.wasm"))
    );
    std::os::unix::fs::symlink(w.root.join("missing.wasm"), w.ws.join("dangling.wasm")).unwrap();
    let mut reasons = std::collections::BTreeSet::new();
    for path in [
        "../x.wasm",
        "link.wasm",
        "up/x.wasm",
        &outside,
        "/etc/passwd",
        "../missing.wasm",
        "dangling.wasm",
        "/etc/no-such-file",
        "missing.wasm",
    ] {
        let r = rejection(&policy, &WasmRunRequest::module(path), &w.ws);
        assert_eq!(r.code(), "wasm.module_invalid", "{path}: {r}");
        match &r {
            Rejection::WasmModuleInvalid { module, reason } => {
                assert_eq!(module, path);
                assert!(reason.contains("inside the workspace"), "{path}: {reason}");
                reasons.insert(reason.clone());
            }
            other => panic!("{path}: {other:?}"),
        }
    }
    assert_eq!(reasons.len(), 1, "{reasons:?}");
}

/// A module that is not valid WASM or WAT, or that imports something other than WASI
/// preview 1, is rejected by the engine (`wasm.module_invalid`): nothing runs.
#[test]
fn invalid_module_body_is_rejected_by_the_engine() {
    let w = workspace(&[]);
    let cases: &[(&str, &[u8], &str)] = &[
        (
            "garbage.wasm",
            b"\0asm\x01\0\0\0\x01\xff\xff",
            "does not compile",
        ),
        (
            "text.wasm",
            b"this is not a module",
            "neither a WASM binary nor valid WAT",
        ),
        (
            "broken.wat",
            b"(module (func",
            "neither a WASM binary nor valid WAT",
        ),
        (
            "imports.wat",
            b"(module (import \"env\" \"launch\" (func)) (func (export \"_start\")))",
            "imports something Tier A does not provide",
        ),
        (
            "no_start.wat",
            b"(module (func (export \"main\")))",
            "exports no function \"_start\"",
        ),
        (
            "start_with_params.wat",
            b"(module (func (export \"_start\") (param i32)))",
            "exports no function \"_start\"",
        ),
    ];
    let engine = engine();
    let rt = runtime();
    for (name, body, why) in cases {
        std::fs::write(w.ws.join(name), body).unwrap();
        let plan = plan(&policy(""), &WasmRunRequest::module(*name), &w.ws);
        let out = Arc::new(Collect::default());
        let result = rt.block_on(engine.run(&plan, out.clone(), Arc::new(Collect::default())));
        match result {
            Err(WasmError::Rejected(r)) => {
                assert_eq!(r.code(), "wasm.module_invalid", "{name}: {r}");
                assert!(r.to_string().contains(why), "{name}: {r}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

// ---- WASI preview 2 components -----------------------------------------------------------

/// `component.wat` with its core `run` body replaced.
fn component(w: &Workspace, name: &str, body: &str) -> WasmRunRequest {
    let text = std::fs::read_to_string(format!("{GUESTS}component.wat")).unwrap();
    std::fs::write(w.ws.join(name), text.replace("RESULT_BODY", body)).unwrap();
    WasmRunRequest::module(name)
}

#[test]
fn components_run_and_report_their_result() {
    let w = workspace(&[]);
    let engine = engine();
    let ok = run(
        &engine,
        &plan(&policy(""), &component(&w, "ok.wat", "i32.const 0"), &w.ws),
    );
    assert_eq!(ok.report.kind, "component");
    assert_exited(&ok, 0);
    let err = run(
        &engine,
        &plan(&policy(""), &component(&w, "err.wat", "i32.const 1"), &w.ws),
    );
    assert_eq!(err.report.kind, "component");
    assert_exited(&err, 1);
}

#[test]
fn components_are_stopped_by_the_deadline_and_by_fuel() {
    let w = workspace(&[]);
    let engine = engine();
    let body = "(loop $l (br $l)) i32.const 0";
    let mut req = component(&w, "loop.wat", body);
    req.timeout_ms = Some(300);
    let ran = run(
        &engine,
        &plan(&policy("fuel = 1000000000000000"), &req, &w.ws),
    );
    assert_eq!(ran.report.kind, "component");
    assert!(ran.report.timed_out, "{:?}", ran.report);
    assert_eq!(ran.report.limit, Some(WasmLimit::WallTime));
    let mut req = component(&w, "loop.wat", body);
    req.timeout_ms = Some(60_000);
    let ran = run(&engine, &plan(&policy("fuel = 1000000"), &req, &w.ws));
    assert_eq!(ran.report.limit, Some(WasmLimit::Fuel), "{:?}", ran.report);
    assert!(!ran.report.timed_out);
}

#[test]
fn concurrent_first_runs_compile_a_module_once() {
    let w = workspace(&["env"]);
    let engine = engine();
    let plan = plan(&policy(""), &request("env", &[]), &w.ws);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sink = || -> Arc<dyn OutputSink> { Arc::new(Collect::default()) };
    let (a, b) = rt.block_on(async {
        tokio::join!(
            engine.run(&plan, sink(), sink()),
            engine.run(&plan, sink(), sink())
        )
    });
    let mut sources = [a.unwrap().cache, b.unwrap().cache];
    sources.sort_by_key(|s| *s as u8);
    assert_eq!(sources, [CacheSource::Compiled, CacheSource::Memory]);
}

#[test]
fn table_growth_past_the_limit_fails_cleanly() {
    let w = workspace(&[]);
    std::fs::write(
        w.ws.join("table.wat"),
        r#"(module
          (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
          (memory (export "memory") 1)
          (table 1 funcref)
          (func (export "_start")
            ;; table.grow returns -1 when refused: exit with 3 then, 4 when granted.
            (call $exit (select (i32.const 3) (i32.const 4)
              (i32.eq (table.grow (ref.null func) (i32.const 100)) (i32.const -1))))))"#,
    )
    .unwrap();
    let engine = engine();
    let refused = run(
        &engine,
        &plan(
            &policy("table_elements = 10"),
            &WasmRunRequest::module("table.wat"),
            &w.ws,
        ),
    );
    assert_eq!(refused.report.exit_code, Some(3), "{:?}", refused.report);
    assert_eq!(refused.report.limit, Some(WasmLimit::Table));
    let granted = run(
        &engine,
        &plan(
            &policy("table_elements = 1000"),
            &WasmRunRequest::module("table.wat"),
            &w.ws,
        ),
    );
    assert_eq!(granted.report.exit_code, Some(4), "{:?}", granted.report);
    assert_eq!(granted.report.limit, None);
}

#[test]
fn a_module_above_the_size_cap_is_rejected() {
    let w = workspace(&[]);
    let body = format!(
        "(module (func (export \"_start\")) ;; {}\n)",
        "x".repeat(4096)
    );
    std::fs::write(w.ws.join("big.wat"), body).unwrap();
    let err = validate_wasm(
        &policy("max_module_bytes = 1024"),
        &WasmRunRequest::module("big.wat"),
        &ctx(&w.ws, &[]),
    )
    .unwrap_err();
    assert_eq!(err.code(), "wasm.module_invalid");
    assert!(err.to_string().contains("max_module_bytes"), "{err}");
    // The same file under a larger cap is accepted.
    plan(
        &policy("max_module_bytes = 65536"),
        &WasmRunRequest::module("big.wat"),
        &w.ws,
    );
}

/// A module with `functions` functions of `ops` `i32.const 1; drop` pairs each, built
/// as a binary (WAT text of this size would take long to parse).
fn module_of(functions: u32, ops: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = u8::try_from(n & 0x7f).unwrap();
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let section = |id: u8, content: &[u8], out: &mut Vec<u8>| {
        out.push(id);
        leb(content.len(), out);
        out.extend_from_slice(content);
    };
    let n = functions as usize;
    let mut body = vec![0u8]; // no locals
    for _ in 0..ops {
        body.extend_from_slice(&[0x41, 0x01, 0x1a]);
    }
    body.push(0x0b);
    let mut code = Vec::new();
    leb(n, &mut code);
    for _ in 0..n {
        leb(body.len(), &mut code);
        code.extend_from_slice(&body);
    }
    let mut funcs = Vec::new();
    leb(n, &mut funcs);
    funcs.extend(std::iter::repeat_n(0u8, n));
    let mut out = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut out);
    section(3, &funcs, &mut out);
    section(7, b"\x01\x06_start\x00\x00", &mut out);
    section(10, &code, &mut out);
    out
}

/// What the compiler is asked to do is capped before it starts: a function body over
/// `MAX_FUNCTION_BODY_BYTES` is refused at once (`wasm.module_invalid`, naming the cap)
/// instead of being compiled; one just under it compiles and runs.
///
/// Regression: compilation was unbounded — a 45 MB module under the 64 MB cap with a 2 s
/// deadline took 36 s and 3.4 GB.
#[test]
fn what_the_compiler_is_asked_to_do_is_capped() {
    use tierbox_wasm::complexity::MAX_FUNCTION_BODY_BYTES;
    let w = workspace(&[]);
    let ok = module_of(2, MAX_FUNCTION_BODY_BYTES / 3 - 2);
    let too_big = module_of(2, MAX_FUNCTION_BODY_BYTES / 3 + 1);
    std::fs::write(w.ws.join("ok.wasm"), &ok).unwrap();
    std::fs::write(w.ws.join("big.wasm"), &too_big).unwrap();
    let policy = policy("");
    let ran = run(
        &engine(),
        &plan(&policy, &WasmRunRequest::module("ok.wasm"), &w.ws),
    );
    assert_exited(&ran, 0);
    let out = Arc::new(Collect::default());
    let err = runtime()
        .block_on(engine().run(
            &plan(&policy, &WasmRunRequest::module("big.wasm"), &w.ws),
            out.clone(),
            out,
        ))
        .unwrap_err();
    let WasmError::Rejected(r) = err else {
        panic!("not a rejection: {err}")
    };
    assert_eq!(r.code(), "wasm.module_invalid");
    assert!(r.to_string().contains("too costly to compile"), "{r}");
}

/// `wasm.memory_bytes` bounds the run, not each memory: with 32 MiB, two memories of
/// 16 MiB fit and a third cannot grow (`memory.grow` returns -1, `limit_hit: "memory"`);
/// the peak reported is the total.
///
/// Regression: the limit applied to each memory, so a module with 31 memories used 2 GB
/// against a 64 MiB limit and reported no limit hit.
#[test]
fn memory_limit_is_for_the_whole_run() {
    let w = workspace(&[]);
    std::fs::write(
        w.ws.join("mems.wat"),
        r#"(module
          (memory $a 0) (memory $b 0) (memory $c 0)
          (func (export "_start")
            (if (i32.eq (memory.grow $a (i32.const 256)) (i32.const -1)) (then unreachable))
            (if (i32.eq (memory.grow $b (i32.const 256)) (i32.const -1)) (then unreachable))
            (if (i32.ne (memory.grow $c (i32.const 1)) (i32.const -1)) (then unreachable))))"#,
    )
    .unwrap();
    let plan = plan(
        &policy("memory_bytes = 33554432"),
        &WasmRunRequest::module("mems.wat"),
        &w.ws,
    );
    let ran = run(&engine(), &plan);
    let r = &ran.report;
    assert_eq!(r.trap, None, "the third memory grew");
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.limit, Some(WasmLimit::Memory));
    assert_eq!(r.peak_memory_bytes, 32 << 20);
}

#[test]
fn instance_count_is_capped() {
    let w = workspace(&[]);
    // Two core instances of the same module: one more than `instances = 1` allows.
    std::fs::write(
        w.ws.join("two.wat"),
        r#"(component
          (core module $m (func (export "run") (result i32) i32.const 0))
          (core instance $a (instantiate $m))
          (core instance $b (instantiate $m))
          (func $run (result (result)) (canon lift (core func $b "run")))
          (instance $cli (export "run" (func $run)))
          (export "wasi:cli/run@0.2.0" (instance $cli)))"#,
    )
    .unwrap();
    let req = WasmRunRequest::module("two.wat");
    let engine = engine();
    let capped = run(&engine, &plan(&policy("instances = 1"), &req, &w.ws));
    assert_eq!(capped.report.exit_code, None, "{:?}", capped.report);
    assert_eq!(
        capped.report.limit,
        Some(tierbox_wasm::WasmLimit::Instances),
        "{:?}",
        capped.report
    );
    assert!(
        capped
            .report
            .trap
            .as_deref()
            .unwrap_or("")
            .contains("instance"),
        "{:?}",
        capped.report
    );
    let ok = run(&engine, &plan(&policy("instances = 2"), &req, &w.ws));
    assert_exited(&ok, 0);
}

// ---- the network grant ---------------------------------------------------------------------

/// A listener on `127.0.0.1` that answers each connection with `banner`.
fn banner_server(banner: &'static str) -> u16 {
    use std::io::Write as _;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(banner.as_bytes());
        }
    });
    port
}

/// The wasi:sockets guest in the workspace, set to look up `name` and connect to `port`.
fn net_guest(w: &Workspace, file: &str, name: &str, port: u16) -> WasmRunRequest {
    let wat = std::fs::read_to_string(format!("{GUESTS}net_component.wat"))
        .unwrap()
        .replace("__NAME_LEN__", &name.len().to_string())
        .replace("__NAME__", name)
        .replace("__PORT__", &port.to_string());
    std::fs::write(w.ws.join(file), wat).unwrap();
    WasmRunRequest::module(file)
}

fn strict(allow: &[String], resolve: &str) -> Policy {
    let allow: Vec<String> = allow.iter().map(|a| format!("{a:?}")).collect();
    Policy::from_toml(&format!(
        "version = 1\n[egress]\nmode = \"strict\"\nallow = [{}]\nresolve = {{ {resolve} }}\n",
        allow.join(", ")
    ))
    .unwrap()
}

/// A component granted `allowed.test:PORT` (resolved by the policy to 127.0.0.1, which
/// an address entry lets through) connects to it and reads the server's banner; a lookup
/// of any other name, and a connect to another port of the same address, are refused and
/// listed. Without the address entry the grant itself is refused (loopback), naming the
/// entry that allows it — applied, it works.
#[test]
fn a_component_reaches_its_granted_host_and_nothing_else() {
    let w = workspace(&[]);
    let granted = banner_server("granted\n");
    let other = banner_server("other\n");
    let grant = format!("allowed.test:{granted}");
    let resolve = "\"allowed.test\" = [\"127.0.0.1\"]";
    let engine = engine();

    // The loopback address the name leads to needs an address entry.
    let policy = strict(std::slice::from_ref(&grant), resolve);
    let mut req = net_guest(&w, "net1.wat", "allowed.test", granted);
    req.grants.network = vec![grant.clone()];
    let r = rejection(&policy, &req, &w.ws);
    assert_eq!(r.code(), "wasm.grant_denied", "{r}");
    let fix = format!("egress.allow += \"127.0.0.1:{granted}\"");
    assert!(r.to_string().contains(&fix), "{r}");

    // The fix applied: the grant resolves once and the guest connects.
    let address = format!("127.0.0.1:{granted}");
    let policy = strict(&[grant.clone(), address.clone()], resolve);
    let granted_plan = plan(&policy, &req, &w.ws);
    assert_eq!(
        granted_plan.network[0].addrs,
        ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
    );
    let ran = run(&engine, &granted_plan);
    assert_exited(&ran, 0);
    assert_eq!(ran.stdout, "ok granted\n");
    let net = ran.report.network.clone().unwrap();
    assert_eq!(net.connects.get(&address), Some(&1), "{net:?}");
    assert!(net.refused.is_empty(), "{net:?}");

    // Another name: refused at lookup (access-denied, no DNS query), and listed.
    let mut req = net_guest(&w, "net2.wat", "other.test", granted);
    req.grants.network = vec![grant.clone()];
    let ran = run(&engine, &plan(&policy, &req, &w.ws));
    assert_eq!(ran.stdout, "lookup-error 1\n");
    let net = ran.report.network.unwrap();
    assert_eq!(net.refused.get("lookup other.test"), Some(&1), "{net:?}");

    // The granted address at another port, and a private address: refused at connect.
    for (name, port) in [("127.0.0.1", other), ("10.255.255.1", granted)] {
        let mut req = net_guest(&w, "net3.wat", name, port);
        req.grants.network = vec![grant.clone()];
        let ran = run(&engine, &plan(&policy, &req, &w.ws));
        assert_eq!(ran.stdout, "connect-error 1\n", "{name}:{port}");
        let net = ran.report.network.unwrap();
        let key = format!("connect {name}:{port}");
        assert_eq!(net.refused.get(&key), Some(&1), "{net:?}");
    }

    // No grant: no sockets at all (the lookup is refused before anything).
    let req = net_guest(&w, "net4.wat", "127.0.0.1", granted);
    let ran = run(&engine, &plan(&policy, &req, &w.ws));
    // wasmtime's own answer with name lookups off: permanent-resolver-failure.
    assert_eq!(ran.stdout, "lookup-error 20\n");
    assert!(ran.report.network.is_none());
}
