//! The request a command line asks for: a `ProcessRunRequest` from `--request FILE` or
//! from the command and its flags (`--env`, `--env-file`, …), and `--stdin` as the run's
//! streamed stdin. Bad input is a [`Rejection`], as the request's own validation gives.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use tierbox_policy::{ProcessRunRequest, Rejection};

use crate::cli::RequestArgs;

/// The request from `--request FILE` or from `-- COMMAND ARGS` plus flags.
pub fn build_request(args: RequestArgs) -> std::result::Result<ProcessRunRequest, Rejection> {
    if let Some(file) = &args.request {
        return ProcessRunRequest::from_json(&read_request_file(file)?);
    }
    let mut cmd = args.cmd.into_iter();
    let command = cmd.next().ok_or(Rejection::CommandEmpty)?;
    let mut req = ProcessRunRequest::new(command);
    req.args = cmd.collect();
    req.cwd = args.cwd;
    req.timeout_ms = args.timeout_ms;
    req.tier = args.tier.into();
    req.requested_egress_hosts = args.egress_hosts;
    req.publish = args.publish;
    if args.overlay {
        req.workspace_mode = Some(tierbox_policy::WorkspaceMode::Overlay);
    }
    for file in &args.env_files {
        insert_env_file(file, &mut req.env)?;
    }
    insert_env_pairs(args.env, &mut req.env)?;
    Ok(req)
}

/// Adds `--env` flags to a request's environment: `NAME=VALUE`, or `NAME` for the value
/// this process has (rejected when it has none). The request's own validation judges
/// names and values.
pub fn insert_env_pairs(
    pairs: Vec<String>,
    env: &mut std::collections::BTreeMap<String, String>,
) -> std::result::Result<(), Rejection> {
    for kv in pairs {
        match kv.split_once('=') {
            Some((k, v)) => {
                env.insert(k.to_owned(), v.to_owned());
            }
            None => {
                let value = std::env::var(&kv).map_err(|_| Rejection::EnvNameInvalid {
                    name: kv.clone(),
                    reason: "not set (or not UTF-8) in tierbox's own environment, which `-e NAME` passes on; give NAME=VALUE or use --env-file".to_owned(),
                })?;
                env.insert(kv, value);
            }
        }
    }
    Ok(())
}

/// Largest `--env-file` read, in bytes: far above what the request's own limits accept,
/// so those limits, not this one, reject a large environment.
const ENV_FILE_MAX_BYTES: u64 = 1 << 20;

/// Adds the `NAME=VALUE` lines of `file` to a request's environment.
fn insert_env_file(
    file: &Path,
    env: &mut std::collections::BTreeMap<String, String>,
) -> std::result::Result<(), Rejection> {
    let mut text = String::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(ENV_FILE_MAX_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| Rejection::Malformed {
            detail: format!("--env-file {}: {e}", file.display()),
        })?;
    if text.len() as u64 > ENV_FILE_MAX_BYTES {
        return Err(Rejection::Malformed {
            detail: format!(
                "--env-file {}: larger than {ENV_FILE_MAX_BYTES} bytes",
                file.display()
            ),
        });
    }
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| Rejection::EnvNameInvalid {
                name: line.chars().take(64).collect(),
                reason: format!(
                    "--env-file {} line {}: expected NAME=VALUE",
                    file.display(),
                    n + 1
                ),
            })?;
        env.insert(k.trim_start().to_owned(), v.to_owned());
    }
    Ok(())
}

/// A request document from FILE ("-" for stdin), read up to one byte past the cap so an
/// oversize document is rejected by the parser's size check.
pub fn read_request_file(file: &Path) -> std::result::Result<Vec<u8>, Rejection> {
    let mut bytes = Vec::new();
    let limit = tierbox_policy::request::MAX_REQUEST_BYTES as u64 + 1;
    let read = if file.as_os_str() == "-" {
        std::io::stdin().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(limit).read_to_end(&mut bytes))
    };
    read.map_err(|e| Rejection::Malformed {
        detail: format!("cannot read {}: {e}", file.display()),
    })?;
    Ok(bytes)
}

/// `--stdin` and `--stdin-limit`.
#[derive(Debug, Clone, Copy)]
pub struct StdinFlags {
    pub pass: bool,
    pub limit: Option<u64>,
}

impl StdinFlags {
    /// With `--stdin`: this process's stdin as the run's streamed stdin (read on a thread
    /// of its own, a few chunks ahead of the program, bytes of any kind), the request's
    /// `stdin_stream` set and its limit narrowed by `--stdin-limit`.
    pub fn source(
        self,
        stream: &mut bool,
        limit: &mut Option<u64>,
    ) -> Result<Option<tierbox_runner::StdinSource>> {
        if !self.pass {
            return Ok(None);
        }
        *stream = true;
        *limit = self.limit.or(*limit);
        tierbox_runner::StdinSource::from_blocking_reader(std::io::stdin())
            .map(Some)
            .context("starting the thread that reads stdin")
    }
}
