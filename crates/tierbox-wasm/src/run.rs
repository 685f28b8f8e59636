//! One run: a fresh `Store` with exactly the plan's grants, the limits, the call, and the
//! classification of how it ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tierbox_policy::Rejection;
use tierbox_policy::wasm::WasmPlan;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::engine::{Compiled, WasmEngine, elapsed_ms};
use crate::io::{GuestOutput, OutputSink};
use crate::limits::Limiter;

/// Where the compiled code of a run came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheSource {
    /// Compiled for this run (and stored in the caches).
    Compiled,
    /// Loaded from the on-disk cache (no compilation).
    Disk,
    /// Already in this process's memory cache (no compilation, no linking).
    Memory,
}

/// A Tier A limit that ended or constrained a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WasmLimit {
    /// The wall-clock deadline (compilation included).
    WallTime,
    /// The fuel budget.
    Fuel,
    /// The run's linear memories and tables together would have grown past
    /// `wasm.memory_bytes`.
    Memory,
    /// A table would have grown past `wasm.table_elements`.
    Table,
    /// Instantiation would have made more core instances, memories or tables than
    /// `wasm.instances`.
    Instances,
    /// The output quota in `kill` mode.
    Output,
}

/// How a Tier A run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunReport {
    /// Exit code: `proc_exit`'s, 0 when `_start` returned, 1 when a component's `run`
    /// returned an error. `None` when the guest trapped or was stopped.
    pub exit_code: Option<i32>,
    /// The trap, when the guest trapped for a reason other than a limit (e.g.
    /// `unreachable`, stack overflow, out-of-bounds access).
    pub trap: Option<String>,
    /// The limit that ended or constrained the run.
    pub limit: Option<WasmLimit>,
    /// The deadline passed and the guest was stopped.
    pub timed_out: bool,
    /// The output quota (`kill` mode) stopped the guest.
    pub quota_exceeded: bool,
    /// `module` (WASI preview 1) or `component` (WASI preview 2).
    pub kind: String,
    /// SHA-256 of the module binary (after WAT conversion).
    pub module_sha256: String,
    /// Where the compiled code came from.
    pub cache: CacheSource,
    /// An entry of the on-disk cache for this module that failed its integrity check
    /// (changed since Tierbox stored it, or not private to Tierbox's user): it was not
    /// loaded, the module was compiled again, and this says which entry and why. Recorded
    /// in the audit log with the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_refused: Option<String>,
    /// Time spent compiling or loading compiled code, in milliseconds.
    pub compile_ms: u64,
    /// Fuel consumed by the guest.
    pub fuel_consumed: u64,
    /// Largest total of the run's linear memories and tables at any time, in bytes (what
    /// `wasm.memory_bytes` bounds).
    pub peak_memory_bytes: u64,
    /// Wall-clock duration, compilation included, in milliseconds.
    pub duration_ms: u64,
    /// What the guest did with its network grants (`grants.network`): connects made and
    /// what was refused. Absent when the run had no grant and nothing was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::net::NetReport>,
}

/// Store data of a WASI preview 1 module.
pub(crate) struct P1Host {
    pub(crate) wasi: WasiP1Ctx,
    limiter: Limiter,
}

/// Store data of a WASI preview 2 component.
pub(crate) struct P2Host {
    ctx: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    net: Arc<crate::net::NetGuard>,
}

impl P2Host {
    /// The view that answers the guest's name lookups: `wasmtime_wasi`'s sockets view and
    /// the run's guard.
    pub(crate) fn lookup_view(&mut self) -> crate::net::LookupView<'_> {
        use wasmtime_wasi::sockets::WasiSocketsView;
        let guard = self.net.clone();
        crate::net::LookupView {
            inner: self.sockets(),
            guard,
        }
    }
}

impl WasiView for P2Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// The part of a store the run's classification reads back.
trait Limited {
    fn limiter(&mut self) -> &mut Limiter;
}

impl Limited for P1Host {
    fn limiter(&mut self) -> &mut Limiter {
        &mut self.limiter
    }
}

impl Limited for P2Host {
    fn limiter(&mut self) -> &mut Limiter {
        &mut self.limiter
    }
}

/// A guest's stdin read as the guest asks for it ([`WasmEngine::run_with_stdin`]).
pub type GuestStdin = Box<dyn tokio::io::AsyncRead + Send + Sync + Unpin>;

/// Why a run could not start, that is not the guest's doing.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The plan's module or a grant is unusable (a typed rejection: nothing ran).
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The host failed to set the run up (a preopened directory vanished, …).
    #[error("tier a setup failed: {0}")]
    Host(String),
}

impl WasmEngine {
    /// Runs `plan` to the end and reports how it ended. Output goes to `stdout` and
    /// `stderr` as the guest writes it.
    ///
    /// Must be awaited in a tokio runtime with time enabled. The call returns by the
    /// deadline (plus one [`crate::EPOCH_TICK`]) whatever the guest does: computing,
    /// sleeping in `poll_oneoff`, or still being compiled. Dropping the future stops the
    /// guest at its next epoch check.
    pub async fn run(
        &self,
        plan: &WasmPlan,
        stdout: Arc<dyn OutputSink>,
        stderr: Arc<dyn OutputSink>,
    ) -> Result<RunReport, WasmError> {
        self.run_with_stdin(plan, stdout, stderr, None).await
    }

    /// [`WasmEngine::run`] with the guest's stdin read from `stdin` as the guest asks for
    /// it, instead of the plan's inline bytes (a streamed stdin: the caller bounds what
    /// it carries). `None`: the plan's.
    pub async fn run_with_stdin(
        &self,
        plan: &WasmPlan,
        stdout: Arc<dyn OutputSink>,
        stderr: Arc<dyn OutputSink>,
        stdin: Option<GuestStdin>,
    ) -> Result<RunReport, WasmError> {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(plan.limits.wall_timeout_ms);
        let _tick = self.tick();
        let loaded = match tokio::time::timeout_at(deadline.into(), self.load(plan)).await {
            Ok(loaded) => loaded?,
            Err(_) => {
                return Ok(RunReport {
                    exit_code: None,
                    trap: None,
                    limit: Some(WasmLimit::WallTime),
                    timed_out: true,
                    quota_exceeded: false,
                    kind: "unknown".to_owned(),
                    module_sha256: String::new(),
                    cache: CacheSource::Compiled,
                    cache_refused: None,
                    compile_ms: elapsed_ms(started),
                    fuel_consumed: 0,
                    peak_memory_bytes: 0,
                    duration_ms: elapsed_ms(started),
                    network: None,
                });
            }
        };
        if let Compiled::Module(pre) = &loaded.compiled {
            let callable = matches!(
                pre.module().get_export(&plan.entrypoint),
                Some(wasmtime::ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0
            );
            if !callable {
                return Err(Rejection::WasmModuleInvalid {
                    module: plan.argv.first().cloned().unwrap_or_default(),
                    reason: format!(
                        "it exports no function {:?} taking and returning nothing",
                        plan.entrypoint
                    ),
                }
                .into());
            }
        }
        let stopped = Arc::new(AtomicBool::new(false));
        let net = crate::net::NetGuard::new(&plan.network);
        let mut wasi = build_ctx(plan, stdout, stderr, stdin, &stopped)?;
        crate::net::configure(&mut wasi, &net);
        let limiter = Limiter::new(&plan.limits);
        let (kind, ended) = match &loaded.compiled {
            Compiled::Module(pre) => {
                let mut b = wasi;
                let host = P1Host {
                    wasi: b.build_p1(),
                    limiter,
                };
                let mut store = self.store(host, plan, deadline)?;
                let call = async {
                    let instance = pre.instantiate_async(&mut store).await?;
                    let func = instance
                        .get_typed_func::<(), ()>(&mut store, &plan.entrypoint)
                        .map_err(|e| {
                            e.context(format!(
                                "the module exports no function {:?} of type () -> ()",
                                plan.entrypoint
                            ))
                        })?;
                    func.call_async(&mut store, ()).await?;
                    Ok(0)
                };
                let ended = tokio::time::timeout_at(deadline.into(), call).await;
                ("module", finish(ended, &mut store, plan.limits.fuel))
            }
            Compiled::Component(pre) => {
                let mut b = wasi;
                let host = P2Host {
                    ctx: b.build(),
                    table: ResourceTable::new(),
                    limiter,
                    net: net.clone(),
                };
                let mut store = self.store(host, plan, deadline)?;
                let call = async {
                    let command = pre.instantiate_async(&mut store).await?;
                    let result = command.wasi_cli_run().call_run(&mut store).await?;
                    Ok(if result.is_ok() { 0 } else { 1 })
                };
                let ended = tokio::time::timeout_at(deadline.into(), call).await;
                ("component", finish(ended, &mut store, plan.limits.fuel))
            }
        };
        let quota_exceeded = stopped.load(Ordering::Relaxed);
        let (exit_code, trap, mut limit, fuel_consumed, peak_memory_bytes) = ended;
        if quota_exceeded {
            limit = Some(WasmLimit::Output);
        }
        Ok(RunReport {
            exit_code: if quota_exceeded { None } else { exit_code },
            trap: if quota_exceeded { None } else { trap },
            timed_out: limit == Some(WasmLimit::WallTime),
            quota_exceeded,
            limit,
            kind: kind.to_owned(),
            module_sha256: loaded.digest,
            cache: loaded.source,
            cache_refused: loaded.cache_refused,
            compile_ms: loaded.compile_ms,
            fuel_consumed,
            peak_memory_bytes,
            duration_ms: elapsed_ms(started),
            network: net.report(),
        })
    }

    /// A store with the plan's limits: fuel, the limiter, and an epoch callback that
    /// yields to the async runtime at every tick and interrupts the guest at the deadline.
    fn store<T: Limited + Send + 'static>(
        &self,
        host: T,
        plan: &WasmPlan,
        deadline: Instant,
    ) -> Result<Store<T>, WasmError> {
        let mut store = Store::new(&self.engine, host);
        store.limiter(|h| h.limiter());
        store
            .set_fuel(plan.limits.fuel)
            .map_err(|e| WasmError::Host(format!("set fuel: {e}")))?;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            Ok(if Instant::now() >= deadline {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        Ok(store)
    }
}

type Ended = (Option<i32>, Option<String>, Option<WasmLimit>, u64, u64);

/// Whether `e` is wasmtime refusing an instantiation over the store's instance, memory
/// or table count (the limiter's `instances`, `memories` and `tables`). wasmtime says so
/// only in words ("resource limit exceeded: instance count too high at 2"); a test pins
/// them.
fn is_count_limit(e: &wasmtime::Error) -> bool {
    e.chain().any(|cause| {
        let text = cause.to_string();
        text.starts_with("resource limit exceeded:") && text.contains(" count too high")
    })
}

/// Classifies the end of a call: exit code, trap, limit, fuel used, peak memory.
fn finish<T: Limited>(
    result: Result<wasmtime::Result<i32>, tokio::time::error::Elapsed>,
    store: &mut Store<T>,
    fuel_budget: u64,
) -> Ended {
    let fuel_consumed = fuel_budget.saturating_sub(store.get_fuel().unwrap_or(0));
    let limiter = store.data_mut().limiter();
    let hit = limiter.hit;
    let peak = limiter.peak_memory_bytes;
    let (code, trap, limit) = match result {
        Err(_elapsed) => (None, None, Some(WasmLimit::WallTime)),
        Ok(Ok(code)) => (Some(code), None, hit),
        Ok(Err(e)) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                (Some(exit.0), None, hit)
            } else {
                match e.downcast_ref::<Trap>() {
                    Some(Trap::OutOfFuel) => (None, None, Some(WasmLimit::Fuel)),
                    Some(Trap::Interrupt) => (None, None, Some(WasmLimit::WallTime)),
                    _ if is_count_limit(&e) => {
                        (None, Some(format!("{e:#}")), Some(WasmLimit::Instances))
                    }
                    _ => (None, Some(format!("{e:#}")), hit),
                }
            }
        }
    };
    (code, trap, limit, fuel_consumed, peak)
}

/// The WASI context of a run: exactly the plan's arguments, environment, stdin and
/// preopens; output to the sinks; no network (the caller adds the plan's grants,
/// `net::configure`).
fn build_ctx(
    plan: &WasmPlan,
    stdout: Arc<dyn OutputSink>,
    stderr: Arc<dyn OutputSink>,
    stdin: Option<GuestStdin>,
    stopped: &Arc<AtomicBool>,
) -> Result<WasiCtxBuilder, WasmError> {
    let mut b = WasiCtxBuilder::new();
    b.args(&plan.argv)
        .envs(&plan.env)
        .stdout(GuestOutput::new(stdout, stopped.clone()))
        .stderr(GuestOutput::new(stderr, stopped.clone()));
    match (stdin, &plan.stdin) {
        (Some(reader), _) => {
            b.stdin(wasmtime_wasi::cli::AsyncStdinStream::new(reader));
        }
        (None, Some(data)) => {
            b.stdin(MemoryInputPipe::new(data.clone()));
        }
        (None, None) => {}
    }
    for p in &plan.preopens {
        let perms = if p.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        b.preopened_dir(&p.host, &p.guest, perms).map_err(|e| {
            WasmError::Host(format!("preopen {} as {}: {e}", p.host.display(), p.guest))
        })?;
    }
    Ok(b)
}
