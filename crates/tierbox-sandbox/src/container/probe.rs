//! Finding a container engine and checking that it answers.
//!
//! The binary comes from [`super::ENGINE_DIRS`] only. The probe asks the engine itself
//! (`docker version --format '{{.Server.Version}}'`, `podman info --format
//! '{{.Version.Version}}'`) with a clean environment and [`PROBE_TIMEOUT`]: a CLI
//! without a reachable daemon fails the probe, and the run is rejected with the engine's
//! own message. Results are cached for [`PROBE_CACHE_TTL`].

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{ENGINE_DIRS, Engine};

/// How long an engine probe may take before the engine counts as unreachable. Docker
/// answers `version` in well under a second; a hung daemon socket must not hang runs.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a probe result is reused. Short, so an engine that goes away is noticed
/// soon, yet long enough that back-to-back runs do not each pay for a probe.
pub const PROBE_CACHE_TTL: Duration = Duration::from_secs(10);

/// Most bytes of the engine's output kept for a message.
const MAX_MESSAGE_BYTES: usize = 4096;

/// The environment an engine CLI gets (the probe's and the run's): a fixed PATH for the
/// engine's own helpers (conmon, runc), nothing else. `DOCKER_HOST` and friends are not
/// passed: the engine's default endpoint is used.
pub const ENGINE_ENV: &[(&str, &str)] = &[("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")];

/// A reachable engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// The engine.
    pub engine: Engine,
    /// Absolute path of its CLI.
    pub path: PathBuf,
    /// The version the probe printed (the server's for docker).
    pub detail: String,
}

/// Why an engine cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The CLI is in none of [`ENGINE_DIRS`].
    #[error("{engine} not found in {dirs}", dirs = ENGINE_DIRS.join(", "))]
    NotFound {
        /// The engine.
        engine: Engine,
    },
    /// The CLI runs but the engine does not answer.
    #[error("{engine} engine unreachable: {reason}")]
    Unreachable {
        /// The engine.
        engine: Engine,
        /// The engine's message, or the timeout.
        reason: String,
    },
}

/// The engine's CLI in [`ENGINE_DIRS`], if any.
pub fn find_engine(engine: Engine) -> Option<PathBuf> {
    find_in(engine, ENGINE_DIRS.iter().map(Path::new))
}

fn find_in<'a>(engine: Engine, dirs: impl Iterator<Item = &'a Path>) -> Option<PathBuf> {
    dirs.map(|d| d.join(engine.binary()))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
}

/// The probe's arguments.
pub fn probe_args(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Docker => &["version", "--format", "{{.Server.Version}}"],
        Engine::Podman => &["info", "--format", "{{.Version.Version}}"],
    }
}

/// Probes `engine` now (uncached; prefer [`probe_engine_cached`]).
///
/// ```no_run
/// use tierbox_sandbox::container::{Engine, probe::probe_engine};
/// match probe_engine(Engine::Docker) {
///     Ok(info) => println!("docker {} at {}", info.detail, info.path.display()),
///     Err(e) => println!("{e}"), // "docker engine unreachable: Cannot connect to ..."
/// }
/// ```
pub fn probe_engine(engine: Engine) -> Result<EngineInfo, EngineError> {
    let path = find_engine(engine).ok_or(EngineError::NotFound { engine })?;
    let unreachable = |reason: String| EngineError::Unreachable { engine, reason };
    let mut cmd = Command::new(&path);
    cmd.args(probe_args(engine))
        .env_clear()
        .envs(ENGINE_ENV.iter().copied())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| unreachable(format!("cannot start {}: {e}", path.display())))?;
    // Drain both pipes on threads so a chatty engine cannot block on a full pipe.
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(unreachable(format!(
                    "`{} {}` did not answer within {} s",
                    engine,
                    probe_args(engine).join(" "),
                    PROBE_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(unreachable(format!("waiting for the probe: {e}"))),
        }
    };
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
    let detail = stdout.trim().to_owned();
    if status.success() && !detail.is_empty() {
        return Ok(EngineInfo {
            engine,
            path,
            detail,
        });
    }
    let message = first_line(&stderr)
        .or_else(|| first_line(&stdout))
        .unwrap_or_else(|| format!("the probe exited with {status}"));
    Err(unreachable(message))
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r
            .by_ref()
            .take(MAX_MESSAGE_BYTES as u64)
            .read_to_end(&mut buf);
        // Keep reading to EOF so the engine never blocks on a full pipe.
        let _ = std::io::copy(&mut r, &mut std::io::sink());
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// The first non-empty line of `text`, trimmed; `Error: ` prefixes removed.
fn first_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.strip_prefix("Error: ").unwrap_or(l).to_owned())
}

/// `probe_engine`, cached per engine for `PROBE_CACHE_TTL`.
pub fn probe_engine_cached(engine: Engine) -> Result<EngineInfo, EngineError> {
    type Cache = HashMap<Engine, (Instant, Result<EngineInfo, EngineError>)>;
    static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
    let mut guard = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let cache = guard.get_or_insert_with(HashMap::new);
    if let Some((at, result)) = cache.get(&engine)
        && at.elapsed() < PROBE_CACHE_TTL
    {
        return result.clone();
    }
    let result = probe_engine(engine);
    cache.insert(engine, (Instant::now(), result.clone()));
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_engine_is_found_in_the_fixed_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("docker"), "").unwrap();
        let found = find_in(Engine::Docker, [dir.path()].into_iter());
        assert_eq!(found, Some(dir.path().join("docker")));
        assert_eq!(find_in(Engine::Podman, [dir.path()].into_iter()), None);
        assert!(ENGINE_DIRS.iter().all(|d| d.starts_with('/')));
    }

    #[test]
    fn messages_keep_the_engines_first_line() {
        assert_eq!(
            first_line("\n  Error: cannot connect\nmore\n").as_deref(),
            Some("cannot connect")
        );
        assert_eq!(first_line(" \n"), None);
    }

    /// On a host with the docker CLI but no daemon, the probe says so plainly.
    #[test]
    fn an_unreachable_docker_engine_is_reported_with_its_reason() {
        match probe_engine(Engine::Docker) {
            Ok(info) => println!("docker engine reachable: {}", info.detail),
            Err(EngineError::NotFound { .. }) => {
                tierbox_test_support::skip_optional_here("no docker CLI on this host");
            }
            Err(e @ EngineError::Unreachable { .. }) => {
                let msg = e.to_string();
                assert!(msg.starts_with("docker engine unreachable: "), "{msg}");
                assert!(msg.len() > "docker engine unreachable: ".len(), "{msg}");
            }
        }
    }
}
