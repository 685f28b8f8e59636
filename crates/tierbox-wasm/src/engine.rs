//! The process-wide engine: configuration, the epoch ticker, the WASI linkers and the
//! compiled-module caches.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tierbox_policy::Rejection;
use tierbox_policy::wasm::{ModuleSource, WasmPlan};
use wasmtime::component::{Component, Linker as ComponentLinker};
use wasmtime::{Config, Engine, InstancePre, Linker, Module};
use wasmtime_wasi::p2::bindings::CommandPre;

use crate::cache::{DiskCache, Lookup, sha256_hex};
use crate::module_file::{FileIdentity, ModuleFile};
use crate::run::{CacheSource, P1Host, P2Host};

/// Period of the epoch ticker. The wall-clock deadline is checked at every tick, so a
/// guest overruns its deadline by at most about this much; it also bounds how long a
/// guest computes before yielding to the async runtime.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Compiled modules kept in memory (with their `InstancePre`), least recently used
/// evicted first. Bounds the supervisor's memory: a compiled CPython is tens of MiB.
pub const MAX_MEMORY_CACHED_MODULES: usize = 16;

/// Size of the guest's WASM stack, in bytes. Deep recursion in an interpreter traps
/// (stack overflow) instead of exhausting the host stack.
const MAX_WASM_STACK_BYTES: usize = 1024 * 1024;

/// Size of the host stack each async call runs on; must exceed the WASM stack.
const ASYNC_STACK_BYTES: usize = 4 * 1024 * 1024;

/// A compiled module or component, pre-linked against WASI.
#[derive(Clone)]
pub(crate) enum Compiled {
    Module(InstancePre<P1Host>),
    Component(CommandPre<P2Host>),
}

pub(crate) struct Loaded {
    pub(crate) compiled: Compiled,
    pub(crate) digest: String,
    pub(crate) source: CacheSource,
    pub(crate) compile_ms: u64,
    /// A disk cache entry for the module that failed its checks and was not loaded.
    pub(crate) cache_refused: Option<String>,
}

impl Loaded {
    fn from_memory(compiled: Compiled, digest: String, compile_ms: u64) -> Self {
        Self {
            compiled,
            digest,
            source: CacheSource::Memory,
            compile_ms,
            cache_refused: None,
        }
    }
}

pub(crate) fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Runs that need the epoch ticker, and the signal that wakes it.
#[derive(Default)]
struct Ticker {
    active: Mutex<usize>,
    wake: Condvar,
}

/// Keeps the epoch ticker running for the duration of a run.
pub(crate) struct TickGuard(Arc<Ticker>);

impl Drop for TickGuard {
    fn drop(&mut self) {
        if let Ok(mut n) = self.0.active.lock() {
            *n = n.saturating_sub(1);
        }
    }
}

/// The process-wide Tier A engine.
///
/// Cheap to share (`Arc` it); every run gets its own `Store`. The engine consumes fuel
/// and checks epochs in compiled code, so code compiled by another configuration is never
/// mixed in: the disk cache is keyed by the engine's compatibility fingerprint.
pub struct WasmEngine {
    pub(crate) engine: Engine,
    linkers: Arc<Linkers>,
    memory: Arc<MemoryCache>,
    /// Per-digest locks held while a module is loaded (entries removed when unused).
    loading: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    disk: Option<DiskCache>,
    ticker: Arc<Ticker>,
    /// [`MAX_CONCURRENT_COMPILATIONS`] permits.
    compiling: Arc<tokio::sync::Semaphore>,
}

/// Modules compiled (or loaded from the disk cache) at once by one engine. Compiling
/// uses every core already (cranelift compiles functions in parallel); more at once only
/// adds memory — three large modules compiling together peaked at 3.2 GiB.
pub const MAX_CONCURRENT_COMPILATIONS: usize = 1;

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("disk_cache", &self.disk.is_some())
            .finish_non_exhaustive()
    }
}

impl WasmEngine {
    /// Creates the engine; `cache_dir` enables the on-disk compiled-code cache (created
    /// 0700; used only while it stays private to this user).
    pub fn new(cache_dir: Option<PathBuf>) -> wasmtime::Result<Self> {
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .epoch_interruption(true)
            .parallel_compilation(true)
            .max_wasm_stack(MAX_WASM_STACK_BYTES)
            .async_stack_size(ASYNC_STACK_BYTES);
        let engine = Engine::new(&config)?;
        let mut p1 = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut p1, |h: &mut P1Host| &mut h.wasi)?;
        let mut p2 = ComponentLinker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut p2)?;
        // Name lookups are answered from the plan's grants, never by a DNS query.
        p2.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::add_to_linker::<
            P2Host,
            crate::net::GuardedLookup,
        >(&mut p2, P2Host::lookup_view)?;
        p2.allow_shadowing(false);
        let disk = cache_dir.map(|dir| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut h);
            DiskCache::new(dir, format!("{:016x}", h.finish()))
        });
        let ticker = Arc::new(Ticker::default());
        spawn_ticker(engine.weak(), ticker.clone())
            .map_err(|e| wasmtime::format_err!("start the epoch ticker thread: {e}"))?;
        Ok(Self {
            engine,
            linkers: Arc::new(Linkers { p1, p2 }),
            memory: Arc::new(MemoryCache::default()),
            loading: Mutex::new(std::collections::HashMap::new()),
            disk,
            ticker,
            compiling: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_COMPILATIONS)),
        })
    }

    /// The lock serialising loads of `digest`; forgets locks nobody else holds.
    fn loading_gate(&self, digest: &str) -> Arc<tokio::sync::Mutex<()>> {
        let Ok(mut map) = self.loading.lock() else {
            return Arc::new(tokio::sync::Mutex::new(()));
        };
        map.retain(|_, gate| Arc::strong_count(gate) > 1);
        map.entry(digest.to_owned()).or_default().clone()
    }

    /// Starts the epoch ticker for one run.
    pub(crate) fn tick(&self) -> TickGuard {
        if let Ok(mut n) = self.ticker.active.lock() {
            *n += 1;
        }
        self.ticker.wake.notify_all();
        TickGuard(self.ticker.clone())
    }

    /// Reads, converts (WAT), and compiles or fetches from a cache the plan's module.
    pub(crate) async fn load(&self, plan: &WasmPlan) -> Result<Loaded, Rejection> {
        // A module file unchanged since it was last loaded (same device, inode, size,
        // mtime and ctime — ctime cannot be set back by the file's owner) is not read and
        // hashed again: for CPython that is 26 MB per run.
        let max = plan.limits.max_module_bytes;
        let (file, inline) = match &plan.module {
            ModuleSource::File(path) => (Some(ModuleFile::open(path, &plan.workspace, max)?), None),
            ModuleSource::Inline(bytes) => (None, Some(bytes)),
        };
        let identity = file.as_ref().map(|f| f.identity.clone());
        if let Some(id) = &identity
            && let Some(digest) = self.memory.digest_of(id)
            && let Some(compiled) = self.memory.get(&digest)
        {
            return Ok(Loaded::from_memory(compiled, digest, 0));
        }
        // The identity was taken from the descriptor the content is read from: a change
        // during the read gives a new ctime, so a digest is never remembered for content
        // it does not match.
        let (name, bytes) = match file {
            Some(file) => file.read(max)?,
            None => ("(inline)".to_owned(), inline.cloned().unwrap_or_default()),
        };
        let invalid = |reason: String| Rejection::WasmModuleInvalid {
            module: name.clone(),
            reason,
        };
        let binary = if bytes.starts_with(b"\0asm") {
            bytes
        } else {
            wat::parse_bytes(&bytes)
                .map(|b| b.into_owned())
                .map_err(|e| invalid(format!("it is neither a WASM binary nor valid WAT: {e}")))?
        };
        let component = is_component(&binary);
        let digest = sha256_hex(&binary);
        if let Some(id) = identity {
            self.memory.remember(id, &digest);
        }
        let started = Instant::now();
        // One load per module at a time: concurrent first runs of the same module wait
        // for the one compilation instead of each compiling it.
        let gate = self.loading_gate(&digest);
        let _loading = gate.lock().await;
        if let Some(compiled) = self.memory.get(&digest) {
            return Ok(Loaded::from_memory(compiled, digest, elapsed_ms(started)));
        }
        let engine = self.engine.clone();
        let disk = self.disk.clone();
        let linkers = self.linkers.clone();
        let memory = self.memory.clone();
        let d = digest.clone();
        // Loading is CPU-bound (seconds to compile CPython): keep it off the async worker
        // threads. The task finishes and fills the caches even when this run's deadline
        // passes first, so the next run does not start over.
        // One compilation at a time in this engine, counted against the run's deadline
        // (the caller's timeout covers this wait); the slot is held until the compiler
        // is done, even when the run has already ended at its deadline.
        let compiling = self
            .compiling
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| invalid(format!("the compiler is shut down: {e}")))?;
        let task = tokio::task::spawn_blocking(move || {
            let (cached, refused) = match disk.as_ref().map(|disk| disk.get(&d)) {
                Some(Lookup::Hit(bytes)) => (Some(bytes), None),
                Some(Lookup::Refused(why)) => (None, Some(why)),
                Some(Lookup::Miss) | None => (None, None),
            };
            let (built, source) = match cached.and_then(|b| from_cache(&engine, &b, component)) {
                Some(built) => (built, CacheSource::Disk),
                None => {
                    crate::complexity::check(&binary)
                        .map_err(|e| format!("it is too costly to compile: {e}"))?;
                    let began = Instant::now();
                    crate::progress::report(crate::progress::Compile::Started {
                        module_bytes: binary.len(),
                    });
                    let built = compile(&engine, &binary, component, disk.as_ref(), &d);
                    crate::progress::report(crate::progress::Compile::Finished {
                        millis: elapsed_ms(began),
                    });
                    (
                        built.map_err(|e| format!("it does not compile: {e:#}"))?,
                        CacheSource::Compiled,
                    )
                }
            };
            drop(compiling);
            let compiled = linkers.link(built).map_err(|e| format!("{e:#}"))?;
            memory.put(&d, compiled.clone());
            Ok::<_, String>((compiled, source, refused))
        });
        let (compiled, source, cache_refused) = task
            .await
            .map_err(|e| invalid(format!("compilation aborted: {e}")))?
            .map_err(invalid)?;
        Ok(Loaded {
            compiled,
            digest,
            source,
            compile_ms: elapsed_ms(started),
            cache_refused,
        })
    }
}

/// The WASI preview 1 and preview 2 linkers, shared by every run.
struct Linkers {
    p1: Linker<P1Host>,
    p2: ComponentLinker<P2Host>,
}

impl Linkers {
    /// Pre-links against WASI; an import Tier A does not provide is named here.
    fn link(&self, built: Built) -> wasmtime::Result<Compiled> {
        Ok(match built {
            Built::Module(m) => Compiled::Module(self.p1.instantiate_pre(&m).map_err(|e| {
                e.context("it imports something Tier A does not provide (only WASI preview 1)")
            })?),
            Built::Component(c) => {
                let pre = self.p2.instantiate_pre(&c).map_err(|e| {
                    e.context("it imports something Tier A does not provide (only WASI preview 2)")
                })?;
                Compiled::Component(CommandPre::new(pre).map_err(|e| {
                    e.context("it is not a WASI command component (no wasi:cli/run export)")
                })?)
            }
        })
    }
}

/// Compiled modules in memory, least recently used first, and the digests of module
/// files by identity.
#[derive(Default)]
struct MemoryCache {
    compiled: Mutex<VecDeque<(String, Compiled)>>,
    files: Mutex<VecDeque<(FileIdentity, String)>>,
}

impl MemoryCache {
    fn digest_of(&self, id: &FileIdentity) -> Option<String> {
        let files = self.files.lock().ok()?;
        files.iter().find(|(f, _)| f == id).map(|(_, d)| d.clone())
    }

    fn remember(&self, id: FileIdentity, digest: &str) {
        if let Ok(mut files) = self.files.lock() {
            files.retain(|(f, _)| f.path != id.path);
            if files.len() >= MAX_MEMORY_CACHED_MODULES * 4 {
                files.pop_front();
            }
            files.push_back((id, digest.to_owned()));
        }
    }

    fn get(&self, digest: &str) -> Option<Compiled> {
        let mut cache = self.compiled.lock().ok()?;
        let at = cache.iter().position(|(d, _)| d == digest)?;
        let entry = cache.remove(at)?;
        let compiled = entry.1.clone();
        cache.push_back(entry);
        Some(compiled)
    }

    fn put(&self, digest: &str, compiled: Compiled) {
        if let Ok(mut cache) = self.compiled.lock() {
            cache.retain(|(d, _)| d != digest);
            if cache.len() >= MAX_MEMORY_CACHED_MODULES {
                cache.pop_front();
            }
            cache.push_back((digest.to_owned(), compiled));
        }
    }
}

fn from_cache(engine: &Engine, bytes: &[u8], component: bool) -> Option<Built> {
    if component {
        crate::sys::load_component(engine, bytes)
            .ok()
            .map(Built::Component)
    } else {
        crate::sys::load_module(engine, bytes)
            .ok()
            .map(Built::Module)
    }
}

enum Built {
    Module(Module),
    Component(Component),
}

fn compile(
    engine: &Engine,
    binary: &[u8],
    component: bool,
    disk: Option<&DiskCache>,
    digest: &str,
) -> wasmtime::Result<Built> {
    if component {
        let c = Component::new(engine, binary)?;
        if let Some(disk) = disk {
            disk.put(digest, &c.serialize()?);
        }
        Ok(Built::Component(c))
    } else {
        let m = Module::new(engine, binary)?;
        if let Some(disk) = disk {
            disk.put(digest, &m.serialize()?);
        }
        Ok(Built::Module(m))
    }
}

/// A component's preamble: `\0asm`, then layer 1 (version `0x0d 0x00`, layer `0x01 0x00`).
fn is_component(binary: &[u8]) -> bool {
    binary.get(4..8) == Some(&[0x0d, 0x00, 0x01, 0x00])
}

/// Increments the engine's epoch every [`EPOCH_TICK`] while a run is active; sleeps on
/// the condition variable otherwise; exits when the engine is dropped.
fn spawn_ticker(engine: wasmtime::EngineWeak, ticker: Arc<Ticker>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("tierbox-epoch".to_owned())
        .spawn(move || {
            loop {
                {
                    let Ok(mut active) = ticker.active.lock() else {
                        return;
                    };
                    while *active == 0 {
                        match ticker.wake.wait_timeout(active, Duration::from_secs(1)) {
                            Ok((guard, _)) => active = guard,
                            Err(_) => return,
                        }
                        if engine.upgrade().is_none() {
                            return;
                        }
                    }
                }
                std::thread::sleep(EPOCH_TICK);
                match engine.upgrade() {
                    Some(e) => e.increment_epoch(),
                    None => return,
                }
            }
        })
        .map(drop)
}
