//! Credentials injected at the proxy for real tools: Python `requests`, `git clone` over
//! smart HTTP (`git http-backend`), `pip download` from a simple index and `npm view`
//! against a registry, each against an HTTPS upstream in the lab's network namespace
//! (`tools_upstream.py`, the lab's CA as `egress.upstream_roots`) that answers 401
//! unless the request carries the real secret. The tools find the run's CA through the
//! bundle variables alone; git and pip send the placeholder inside `Basic` credentials,
//! `requests` and npm as a bearer token.
//!
//! While `requests` waits after its call, the test reads the program's whole memory from
//! the host (`/proc/PID/mem`): the placeholder is there (its environment), the secret is
//! not (the response that echoed it came back with the placeholder).

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::netlab::NetLab;
use crate::strict::{TIER_TABLE, Tier, ready, try_run_with};

const TOOLS_UPSTREAM_PY: &str = include_str!("tools_upstream.py");

/// The port the upstream of the Tier C native test listens on (on the lab's `other`
/// address); the bwrap test's is the next one (the two run at once).
const BASE_PORT: u16 = 8443;

/// The four secrets: (host, credential, placeholder variable, scheme, value).
const SECRETS: [(&str, &str, &str, &str, &str); 4] = [
    (
        "api.test",
        "api",
        "API_TOKEN",
        "bearer",
        "api-secret-0b8d5a1f",
    ),
    (
        "git.test",
        "git",
        "GIT_TOKEN",
        "basic",
        "git-secret-7e2c9d40",
    ),
    (
        "pypi.test",
        "pypi",
        "PYPI_TOKEN",
        "basic",
        "pypi-secret-3a6f1e88",
    ),
    (
        "npm.test",
        "npm",
        "NPM_TOKEN",
        "bearer",
        "npm-secret-c4d2b7e1",
    ),
];

/// The upstream process, killed (and its stdin closed) when dropped.
struct Upstream {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Upstream {
    fn start(lab: &NetLab, port: u16) -> Upstream {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("tools_upstream.py");
        std::fs::write(&script, TOOLS_UPSTREAM_PY).unwrap();
        let git_root = dir.path().join("git");
        make_repository(&git_root.join("repo.git"));
        let (cert, key) = lab.leaf();
        let (log, ready) = (dir.path().join("log.jsonl"), dir.path().join("ready"));
        let mut cmd = lab.in_namespace("python3");
        cmd.arg(&script)
            .args(["--bind", &lab.host("other").v4.to_string()])
            .args(["--port", &port.to_string()])
            .arg("--cert")
            .arg(&cert)
            .arg("--key")
            .arg(&key)
            .arg("--git-root")
            .arg(&git_root)
            .arg("--log")
            .arg(&log)
            .arg("--ready")
            .arg(&ready);
        for (host, _, _, scheme, value) in SECRETS {
            cmd.args(["--secret", &format!("{host}={scheme}:{value}")]);
        }
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let upstream = Upstream {
            child,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(
                Instant::now() < deadline,
                "the tools upstream never got ready"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        upstream
    }

    /// The requests it logged.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A bare repository with one commit (a README).
fn make_repository(bare: &Path) {
    let work = bare.with_extension("work");
    let git = |args: &[&str], cwd: &Path| {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=lab",
                "-c",
                "user.email=lab@test",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    std::fs::create_dir_all(&work).unwrap();
    git(&["init", "-q"], &work);
    std::fs::write(work.join("README"), "hello from the lab repository\n").unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-q", "-m", "first"], &work);
    let parent = bare.parent().unwrap();
    git(
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
        parent,
    );
    // The upstream accepts pushes: only the proxy's rules stand between a push and it.
    git(&["config", "http.receivepack", "true"], bare);
}

fn policy(lab: &NetLab, port: u16, api_secret_file: &Path) -> String {
    let other = lab.host("other").v4;
    let mut allow = vec![format!("\"{other}\"")];
    let mut resolve = String::new();
    let mut credentials = String::new();
    for (host, name, env, _, _) in SECRETS {
        allow.push(format!("\"{host}:{port}\""));
        resolve.push_str(&format!("\"{host}\" = [\"{other}\"]\n"));
        let secret = match name {
            "api" => format!("{{ file = \"{}\" }}", api_secret_file.display()),
            _ => format!("{{ env = \"TBX_LAB_{}_SECRET\" }}", name.to_uppercase()),
        };
        credentials.push_str(&format!(
            "\n[[egress.credentials]]\nname = \"{name}\"\nhost = \"{host}\"\n\
             header = \"Authorization\"\nenv = \"{env}\"\nsecret = {secret}\n"
        ));
    }
    // git's host allows clone and fetch (the docs' GitHub preset, for one path segment),
    // never push.
    let git_rules =
        "[egress.hosts.\"git.test\"]\nallow = [\"GET /*\", \"POST /*/git-upload-pack\"]\n";
    format!(
        r#"version = 1

{TIER_TABLE}
[exec]
allowed_executables = ["sh"]
allow_interpreters = true

[env]
path = "/usr/bin:/bin"

[limits]
timeout_ms = 120000

[egress]
mode = "strict"
allow = [{}]
upstream_roots = ["{}"]

[egress.resolve]
{resolve}
{git_rules}{credentials}"#,
        allow.join(", "),
        lab.ca_cert().display(),
    )
}

/// The sandbox's script: each tool once, with nothing but the placeholders and the
/// bundle variables the run was given (`PORT` and `MARKER` replaced).
const TOOLS_SH: &str = r#"set -eu
python3 req.py MARKER > req.txt
git clone -q "https://x-access-token:$GIT_TOKEN@git.test:PORT/repo.git" clone
cat clone/README
(cd clone && git -c user.name=agent -c user.email=agent@test commit -q --allow-empty -m x \
  && { git push -q origin HEAD 2> ../push.err || echo "push failed: $?"; })
pip download --no-deps --no-cache-dir --disable-pip-version-check -q -d wheels \
  --index-url "https://__token__:$PYPI_TOKEN@pypi.test:PORT/simple/" tbxdemo
ls wheels
npm view tbxdemo version --registry https://npm.test:PORT/ --no-update-notifier
"#;

/// `requests` with a bearer placeholder; then it waits (at most 30 s) for the host to
/// have read its memory (`scanned` in the workspace).
const REQ_PY: &str = r#"import os, time, requests
r = requests.get("https://api.test:PORT/echo",
                 headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}, timeout=20)
print(r.status_code, r.text.strip(), flush=True)
open("req.done", "w").close()
deadline = time.monotonic() + 30
while not os.path.exists("scanned") and time.monotonic() < deadline:
    time.sleep(0.05)
"#;

const NPMRC: &str = "//npm.test:PORT/:_authToken=${NPM_TOKEN}\n";

/// Finds the sandboxed `req.py` from the host (`marker` in its arguments, the
/// placeholder variable in its environment), waits for its request to be done, reads
/// every readable mapping of its memory, and says whether `secret` and the placeholder
/// variable appear; then tells it to go on.
fn scan_program_memory(marker: &str, secret: &str) -> Option<(bool, bool)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid = loop {
        if Instant::now() > deadline {
            return None;
        }
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let is_req = cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes());
            let has_var = environ.windows(17).any(|w| w == b"API_TOKEN=tbx_ph_");
            (is_req && has_var).then_some(pid)
        });
        if let Some(pid) = found
            && Path::new(&format!("/proc/{pid}/cwd/req.done")).exists()
        {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let maps = std::fs::File::open(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let (mut secret_seen, mut placeholder_seen) = (false, false);
    for line in std::io::BufReader::new(maps).lines().map_while(Result::ok) {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.contains("[vsyscall]") {
            continue;
        }
        let mut bytes = Vec::new();
        if mem.seek(SeekFrom::Start(start)).is_err()
            || (&mut mem)
                .take(end - start)
                .read_to_end(&mut bytes)
                .is_err()
        {
            continue;
        }
        secret_seen |= bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
        placeholder_seen |= bytes.windows(17).any(|w| w == b"API_TOKEN=tbx_ph_");
    }
    // On the host's side of the workspace (bound at its own path in the sandbox): the
    // sandbox's view of it may be idmapped, where root's ids do not exist.
    let ws = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    std::fs::write(ws.join("scanned"), "").unwrap();
    Some((secret_seen, placeholder_seen))
}

fn real_tools_authenticate_through_placeholders(test: &str, tier: Tier) {
    let Some(lab) = ready(test, tier) else { return };
    for tool in ["git", "pip", "npm"] {
        if !Path::new("/usr/bin").join(tool).exists() {
            tierbox_test_support::skip(test, &format!("/usr/bin/{tool} is not installed"));
            return;
        }
    }
    let requests = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import requests"])
        .status()
        .is_ok_and(|s| s.success());
    if !requests {
        tierbox_test_support::skip(test, "python3-requests is not installed");
        return;
    }
    let port = match tier {
        Tier::CBwrap => BASE_PORT + 1,
        _ => BASE_PORT,
    };
    let marker = format!("tbx-scan-{port}");
    let fill = |text: &str| {
        text.replace("PORT", &port.to_string())
            .replace("MARKER", &marker)
    };
    let upstream = Upstream::start(lab, port);
    let secret_dir = tempfile::tempdir().unwrap();
    let api_file = secret_dir.path().join("api-token");
    std::fs::write(&api_file, format!("{}\n", SECRETS[0].4)).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&api_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let env: Vec<(String, String)> = SECRETS[1..]
        .iter()
        .map(|(_, name, _, _, value)| {
            (
                format!("TBX_LAB_{}_SECRET", name.to_uppercase()),
                (*value).to_owned(),
            )
        })
        .collect();
    let scan_marker = marker.clone();
    let scanner = std::thread::spawn(move || scan_program_memory(&scan_marker, SECRETS[0].4));
    let (tools, req, npmrc) = (fill(TOOLS_SH), fill(REQ_PY), fill(NPMRC));
    let r = try_run_with(
        lab,
        tier,
        &policy(lab, port, &api_file),
        &["sh", "tools.sh"],
        &[("tools.sh", &tools), ("req.py", &req), (".npmrc", &npmrc)],
        &env,
    );
    let scanned = scanner.join().unwrap();
    let seen = upstream.requests();
    let describe = format!(
        "status {}\nstdout: {}\nstderr: {}\nupstream: {seen:#?}\noutcome: {}",
        r.status, r.stdout, r.outcome["stderr"]["text"], r.outcome
    );
    assert_eq!(r.status, 0, "{describe}");
    let (secret_in_memory, placeholder_in_memory) =
        scanned.unwrap_or_else(|| panic!("req.py was never found from the host: {describe}"));
    assert!(
        placeholder_in_memory,
        "the scan found not even the placeholder"
    );
    assert!(!secret_in_memory, "the program's memory holds the secret");
    let ws = r.workspace.path();
    let req = std::fs::read_to_string(ws.join("req.txt")).unwrap();
    assert!(req.starts_with("200 auth=Bearer tbx_ph_"), "{req}");
    assert!(
        r.stdout.contains("hello from the lab repository"),
        "{describe}"
    );
    // The push was refused at the proxy (the host's rules allow clone and fetch only),
    // with the rule that would allow it.
    assert!(r.stdout.contains("push failed: "), "{describe}");
    let push_err = std::fs::read_to_string(ws.join("push.err")).unwrap();
    assert!(push_err.contains("403"), "{push_err}");
    let denial = r
        .denial("request")
        .unwrap_or_else(|| panic!("no request denial: {describe}"));
    assert_eq!(
        denial["target"],
        format!("POST /repo.git/git-receive-pack on git.test:{port}"),
        "{denial}"
    );
    assert_eq!(
        denial["hint"],
        "add \"POST /repo.git/git-receive-pack\" to egress.hosts.\"git.test\".allow",
        "{denial}"
    );
    assert!(
        ws.join("wheels/tbxdemo-1.0-py3-none-any.whl").is_file(),
        "{describe}"
    );
    assert!(r.stdout.trim_end().ends_with("1.0.0"), "{describe}");
    // Each host got its real secret; nothing arrived unauthorized after the tools'
    // first tries (git asks once without credentials, as against any server).
    for (host, name, _, _, _) in SECRETS {
        assert!(
            seen.iter().any(|q| q["host"] == host && q["ok"] == true),
            "{host} never got its secret: {describe}"
        );
        let used = r.outcome["egress"]["credentials_used"][name]
            .as_u64()
            .unwrap_or(0);
        assert!(used >= 1, "{name}: {describe}");
    }
    for (_, _, _, _, value) in SECRETS {
        assert!(
            !r.outcome.to_string().contains(value),
            "outcome holds {value}"
        );
        let files = tierbox_test_support::files_containing(ws, value.as_bytes());
        assert!(files.is_empty(), "workspace files hold {value}: {files:?}");
        let files = tierbox_test_support::files_containing(r.state.path(), value.as_bytes());
        assert!(files.is_empty(), "state files hold {value}: {files:?}");
    }
}

mod real_tools_authenticate_through_placeholders {
    #[test]
    fn tier_c() {
        super::real_tools_authenticate_through_placeholders(
            "terminate_tools::tier_c",
            super::Tier::C,
        );
    }
    #[test]
    fn tier_c_bwrap() {
        super::real_tools_authenticate_through_placeholders(
            "terminate_tools::tier_c_bwrap",
            super::Tier::CBwrap,
        );
    }
}
