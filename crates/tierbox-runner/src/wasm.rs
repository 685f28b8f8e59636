//! Tier A runs: a [`WasmPlan`] on the process-wide [`WasmEngine`], with output captured
//! under the same quota, truncation and redaction rules as process runs, returned as the
//! same [`Outcome`].

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tierbox_policy::wasm::WasmPlan;
use tierbox_policy::{Enforcement, QuotaMode, Tier};
use tierbox_redact::Redactor;
use tierbox_wasm::{OutputSink, WasmEngine, WasmError, WasmLimit};

use tierbox_policy::handle::Stream;

use crate::capture::{Push, StreamCapture};
use crate::outcome::{LimitHit, Outcome, StreamOutput, Usage};
use crate::stdin::StdinSource;
use crate::stream::{OutputEvent, Tap};
use crate::supervisor::{RunError, RunOptions, new_run_id};

/// Name of the compiled-code cache directory under the state directory.
pub const WASM_CACHE_DIR: &str = "wasm-cache";

/// The process-wide engine. Its disk cache is `<state_dir>/wasm-cache` of the first Tier A
/// run in this process.
fn engine(opts: &RunOptions) -> Result<Arc<WasmEngine>, RunError> {
    static ENGINE: OnceLock<Arc<WasmEngine>> = OnceLock::new();
    if let Some(e) = ENGINE.get() {
        return Ok(e.clone());
    }
    let e = WasmEngine::new(Some(opts.state_dir.join(WASM_CACHE_DIR)))
        .map_err(|e| RunError::Launch(format!("tier a engine: {e:#}")))?;
    Ok(ENGINE.get_or_init(|| Arc::new(e)).clone())
}

/// One output stream of a guest, captured under the plan's quota.
struct Sink {
    capture: Mutex<StreamCapture>,
    mode: QuotaMode,
    tap: Option<(Arc<Tap>, Stream)>,
}

impl OutputSink for Sink {
    fn push(&self, chunk: &[u8]) -> bool {
        if let Some((tap, stream)) = &self.tap {
            tap.push(*stream, chunk);
        }
        let pushed = match self.capture.lock() {
            Ok(mut c) => c.push(chunk),
            Err(_) => return false,
        };
        !(self.mode == QuotaMode::Kill && pushed == Push::QuotaExceeded)
    }
}

impl Sink {
    fn new(plan: &WasmPlan, tap: Option<(Arc<Tap>, Stream)>) -> Arc<Self> {
        Arc::new(Self {
            capture: Mutex::new(StreamCapture::new(plan.output.max_bytes, plan.output.mode)),
            mode: plan.output.mode,
            tap,
        })
    }

    fn finish(&self, plan: &WasmPlan) -> crate::capture::Captured {
        let fresh = StreamCapture::new(plan.output.max_bytes, plan.output.mode);
        match self.capture.lock() {
            Ok(mut c) => std::mem::replace(&mut *c, fresh).finish(),
            Err(p) => std::mem::replace(&mut *p.into_inner(), fresh).finish(),
        }
    }
}

/// Runs a Tier A plan to the end.
///
/// Must be awaited inside a tokio runtime with time enabled. The call returns by the
/// plan's deadline (plus one epoch tick) whatever the guest does.
pub async fn run_wasm_plan(plan: &WasmPlan, opts: &RunOptions) -> Result<Outcome, RunError> {
    run_wasm_tapped(plan, opts, None, None).await
}

/// What a [`crate::Runner`] calls to run a Tier A plan: [`run_wasm_plan`] or
/// [`run_wasm_plan_streaming`], as a plain function a runner holds, so that a program
/// building its runners with [`crate::Runner::without_tier_a`] never refers to the
/// WebAssembly engine and the linker leaves it out.
pub(crate) type TierARun = for<'a> fn(
    &'a WasmPlan,
    &'a RunOptions,
    Option<tokio::sync::mpsc::Sender<OutputEvent>>,
    Option<StdinSource>,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Outcome, RunError>> + Send + 'a>,
>;

/// The [`TierARun`] of [`crate::Runner::new`].
pub(crate) fn tier_a_run<'a>(
    plan: &'a WasmPlan,
    opts: &'a RunOptions,
    events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
    stdin: Option<StdinSource>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Outcome, RunError>> + Send + 'a>> {
    Box::pin(async move {
        let tap = events.map(|tx| Arc::new(Tap::for_plan(tx, &plan.redaction, &plan.output)));
        run_wasm_tapped(plan, opts, tap, stdin).await
    })
}

/// [`run_wasm_plan`], sending the guest's output as it happens to `events` (see
/// [`crate::stream`]).
pub async fn run_wasm_plan_streaming(
    plan: &WasmPlan,
    opts: &RunOptions,
    events: tokio::sync::mpsc::Sender<OutputEvent>,
) -> Result<Outcome, RunError> {
    let tap = Arc::new(Tap::for_plan(events, &plan.redaction, &plan.output));
    run_wasm_tapped(plan, opts, Some(tap), None).await
}

/// The guest's stdin, when it has one: the plan's inline bytes, then `stdin` (the
/// caller's stream, for a streamed plan), forwarded as the guest reads, through a pipe.
fn guest_stdin(
    plan: &WasmPlan,
    stdin: Option<StdinSource>,
) -> Result<Option<(tierbox_wasm::GuestStdin, crate::stdin::Forwarding)>, RunError> {
    let Some(inline) = &plan.stdin else {
        return Ok(None);
    };
    let io = |what| move |source| RunError::Io { what, source };
    let (rx, tx) = std::io::pipe().map_err(io("create the guest's stdin pipe"))?;
    let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(rx.into())
        .map_err(io("register the guest's stdin pipe"))?;
    let forwarding =
        crate::stdin::forward(tx.into(), inline.clone(), stdin, plan.limits.stdin_bytes)
            .map_err(io("start the stdin writer thread"))?;
    Ok(Some((Box::new(rx), forwarding)))
}

async fn run_wasm_tapped(
    plan: &WasmPlan,
    opts: &RunOptions,
    tap: Option<Arc<Tap>>,
    stdin: Option<StdinSource>,
) -> Result<Outcome, RunError> {
    crate::supervisor::check_stdin_source(plan.stdin_streamed, &stdin)?;
    let engine = engine(opts)?;
    // Tier A protects no path (its preopens are the grants); the searches before and
    // after tell the host which repositories the guest made.
    let limits = tierbox_policy::validate::ScanLimits::default();
    let repos_at_launch = tierbox_policy::validate::scan_repos(&plan.workspace, limits)
        .map(|scan| scan.repos)
        .map_err(|e| e.to_string());
    let started = Instant::now();
    let out = Sink::new(plan, tap.clone().map(|t| (t, Stream::Stdout)));
    let err = Sink::new(plan, tap.clone().map(|t| (t, Stream::Stderr)));
    let (guest_stdin, forwarding) = guest_stdin(plan, stdin)?.unzip();
    let report = engine
        .run_with_stdin(plan, out.clone(), err.clone(), guest_stdin)
        .await
        .map_err(|e| match e {
            WasmError::Rejected(r) => RunError::Rejected(r),
            WasmError::Host(m) => RunError::Launch(m),
        })?;
    // The guest is done with its stdin.
    let stdin = match forwarding {
        Some(f) => Some(f.finish().await),
        None => None,
    };
    let live_dropped = match &tap {
        Some(tap) => tap.finish().await.dropped,
        None => [0, 0],
    };
    let redactor = plan
        .redaction
        .enabled
        .then(|| Redactor::new(&plan.redaction.sensitive_values));
    let stdout = StreamOutput {
        live_dropped_bytes: live_dropped[0],
        ..StreamOutput::from_captured(out.finish(plan), redactor.as_ref(), false)
    };
    let mut stderr = StreamOutput {
        live_dropped_bytes: live_dropped[1],
        ..StreamOutput::from_captured(err.finish(plan), redactor.as_ref(), false)
    };
    if let Some(trap) = &report.trap {
        // The guest's own stderr first, then why it stopped.
        stderr.push_note(&format!("[tierbox: wasm trap: {trap}]\n"));
    }
    let redacted = stdout.redacted || stderr.redacted;
    let limit_hit = report.limit.map(|l| match l {
        WasmLimit::WallTime => LimitHit::WallTime,
        WasmLimit::Fuel => LimitHit::Fuel,
        WasmLimit::Memory => LimitHit::Memory,
        WasmLimit::Table => LimitHit::Table,
        WasmLimit::Instances => LimitHit::Instances,
        WasmLimit::Output => LimitHit::Output,
    });
    // Output cut in truncate mode constrained the run without ending it.
    let limit_hit = limit_hit
        .or_else(|| (stdout.truncated || stderr.truncated).then_some(LimitHit::Output))
        .or_else(|| {
            stdin
                .as_ref()
                .is_some_and(|s| s.limit_hit)
                .then_some(LimitHit::Stdin)
        });
    let (created_git_dirs, created_git_dirs_incomplete) = match &repos_at_launch {
        Ok(at_launch) => crate::outcome::created_git_dirs(&plan.workspace, at_launch, &[], limits),
        Err(e) => (Vec::new(), Some(e.clone())),
    };
    let report_network = report.network.clone();
    Ok(Outcome {
        run_id: new_run_id(),
        exit_code: report.exit_code,
        signal: None,
        signal_name: None,
        timed_out: report.timed_out,
        quota_exceeded: report.quota_exceeded,
        limit_hit,
        stdout,
        stderr,
        stdin,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        usage: Usage {
            peak_memory_bytes: Some(report.peak_memory_bytes),
            ..Usage::default()
        },
        tier: Tier::A,
        backend: tierbox_wasm::BACKEND,
        enforcement: enforcement(plan),
        egress_preflight_hosts: Vec::new(),
        egress: None,
        reach: Vec::new(),
        unix_sockets: Vec::new(),
        warnings: Vec::new(),
        redacted,
        plan_sha256: tierbox_attest::wasm_plan_digest(plan),
        wasm: Some(report),
        attestation: None,
        audit_error: None,
        sandbox_failure: None,
        created_git_dirs,
        created_git_dirs_incomplete,
        protected_changed: Vec::new(),
        changes: None,
        changes_error: None,
        changes_evicted: Vec::new(),
        denials: {
            let mut d = crate::denials::of_run(None, limit_hit.map(|l| (l, true, None)));
            if let Some(net) = report_network {
                d.extend(crate::denials::of_tier_a_network(&net));
            }
            d
        },
    })
}

/// What Tier A enforced: no host process at all, and exactly these grants and limits.
fn enforcement(plan: &WasmPlan) -> Enforcement {
    let not_applicable =
        || tierbox_policy::LayerReport::missing("not applicable: tier a runs no host process");
    let mut grants: Vec<String> = plan
        .preopens
        .iter()
        .map(|p| {
            format!(
                "preopen {} -> {} ({})",
                p.guest,
                p.host.display(),
                if p.writable {
                    "read_write"
                } else {
                    "read_only"
                }
            )
        })
        .collect();
    grants.extend(plan.env.iter().map(|(k, _)| format!("env {k}")));
    grants.extend(plan.network.iter().map(|g| {
        let addrs: Vec<String> = g.addrs.iter().map(ToString::to_string).collect();
        format!("network {}:{} ({})", g.host, g.port, addrs.join(", "))
    }));
    let l = &plan.limits;
    grants.push(format!("fuel {}", l.fuel));
    grants.push(format!("memory_bytes {}", l.memory_bytes));
    grants.push(format!("table_elements {}", l.table_elements));
    grants.push(format!("instances {}", l.instances));
    grants.push(format!("wall_timeout_ms {}", l.wall_timeout_ms));
    Enforcement {
        tier: Some(Tier::A),
        backend: tierbox_wasm::BACKEND,
        kernel: String::new(),
        uid: None,
        gid: None,
        capabilities: "none (no host process)".to_owned(),
        no_new_privs: false,
        landlock: not_applicable(),
        seccomp: not_applicable(),
        cgroup: not_applicable(),
        namespaces: Vec::new(),
        rlimits: Vec::new(),
        network: match plan.network.is_empty() {
            true => "none: no WASI sockets are granted".to_owned(),
            false => format!(
                "wasi:sockets tcp connects to the granted hosts' resolved addresses only; name lookups answered from the grants ({})",
                plan.network
                    .iter()
                    .map(|g| format!("{}:{}", g.host, g.port))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        protected_paths: not_applicable(),
        disk: tierbox_policy::LayerReport::missing(
            "not applied: a guest writes only its preopened directories, bounded per file by limits.file_size_bytes",
        ),
        missing_layers: Vec::new(),
        passed_over: None,
        grants,
        denial_reports: crate::denials::tier_a_sources(!plan.network.is_empty()),
    }
}
