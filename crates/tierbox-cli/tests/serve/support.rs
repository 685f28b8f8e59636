//! A `tierbox serve --http` under test and a minimal HTTP/1.1 client, plus host probes
//! that look at processes from outside (by their argv).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

pub fn tierbox() -> &'static str {
    env!("CARGO_BIN_EXE_tierbox")
}

/// Whether Tier C runs here; prints why not and fails under CI.
pub fn tier_c_available(test: &str) -> bool {
    tier_available(test, "c")
}

/// Whether Tier B runs here; prints why not and fails under CI.
pub fn tier_b_available(test: &str) -> bool {
    tier_available(test, "b")
}

/// Whether `tierbox doctor` says `tier` is available; prints why not and fails under CI.
fn tier_available(test: &str, tier: &str) -> bool {
    let out = Command::new(tierbox())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tier"] == tier)
        .cloned()
        .unwrap();
    if found["available"] == true {
        return true;
    }
    skip(
        test,
        &format!("tier {tier} unavailable: {}", found["reason"]),
    )
}

/// Whether bubblewrap is installed; prints why not and fails under CI.
pub fn bwrap_installed(test: &str) -> bool {
    Path::new("/usr/bin/bwrap").exists() || skip(test, "bubblewrap is not installed")
}

/// Skips `test` for `reason` (printed), or fails it under CI=true, where every feature a
/// test needs must be present. Returns `false` (the test should return).
pub fn skip(test: &str, reason: &str) -> bool {
    !tierbox_test_support::skip(test, reason)
}

/// A `tierbox serve --mcp` with its stdin and stdout piped, in a workspace and state
/// directory of its own (kept alive by the returned guards).
pub fn mcp_server() -> (Child, tempfile::TempDir, tempfile::TempDir) {
    mcp_server_with(None)
}

/// [`mcp_server`] with a policy file holding `policy`, if given.
pub fn mcp_server_with(policy: Option<&str>) -> (Child, tempfile::TempDir, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(tierbox());
    cmd.args(["serve", "--mcp"]);
    if let Some(p) = policy {
        let path = state.path().join("policy.toml");
        std::fs::write(&path, p).unwrap();
        cmd.arg("--policy").arg(path);
    }
    let child = cmd
        .arg("--workspace")
        .arg(ws.path())
        .arg("--state-dir")
        .arg(state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    (child, ws, state)
}

/// A running `tierbox serve --http 127.0.0.1:0`.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub ws: tempfile::TempDir,
    pub state: tempfile::TempDir,
    _token: tempfile::NamedTempFile,
}

impl Server {
    /// Starts a server with `extra` arguments and a policy file with `policy` appended to
    /// the built-in default, if given.
    pub fn start(extra: &[&str], policy: Option<&str>) -> Self {
        Self::start_via(&[], extra, policy)
    }

    /// [`Server::start`] through a wrapper command (e.g. `prlimit --nofile=256:256`).
    pub fn start_via(wrapper: &[&str], extra: &[&str], policy: Option<&str>) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), wrapper, extra, policy)
    }

    /// [`Server::start_via`] with `state` as its state directory (prepared beforehand).
    pub fn start_in(
        state: tempfile::TempDir,
        wrapper: &[&str],
        extra: &[&str],
        policy: Option<&str>,
    ) -> Self {
        let ws = tempfile::tempdir().unwrap();
        let mut token = tempfile::NamedTempFile::new().unwrap();
        writeln!(token, "{TOKEN}").unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(tierbox());
                c
            }
            None => Command::new(tierbox()),
        };
        cmd.args(["serve", "--http", "127.0.0.1:0", "--workspace"])
            .arg(ws.path())
            .arg("--state-dir")
            .arg(state.path())
            .arg("--token-file")
            .arg(token.path())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(p) = policy {
            let path = state.path().join("policy.toml");
            std::fs::write(&path, p).unwrap();
            cmd.arg("--policy").arg(path);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("serving the HTTP API on http://").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
                eprintln!("[server] {line}");
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server announced its address");
        Self {
            child,
            addr,
            ws,
            state,
            _token: token,
        }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// One request; returns the status and the body parsed as JSON (or as a string).
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        self.call_with(
            method,
            path,
            body,
            &[("Authorization", &format!("Bearer {TOKEN}"))],
        )
    }

    /// One request in a session.
    pub fn call_in(
        &self,
        session: &str,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, Value) {
        self.call_with(
            method,
            path,
            body,
            &[
                ("Authorization", &format!("Bearer {TOKEN}")),
                ("Tierbox-Session", session),
            ],
        )
    }

    pub fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let (status, _, text) = raw(&self.addr, method, path, body.map(str::as_bytes), headers);
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// Stops the server (which must exit 0), verifies the audit log at `log` against the
    /// server's signing key (`tierbox audit verify`) and returns the log's text.
    pub fn stop_and_verify_log(self, log: &Path) -> String {
        let key = Command::new(tierbox())
            .args(["attest", "pubkey", "--state-dir"])
            .arg(self.state.path())
            .output()
            .unwrap();
        let key = String::from_utf8(key.stdout).unwrap();
        assert!(self.stop().success());
        let v = Command::new(tierbox())
            .args(["audit", "verify"])
            .arg(log)
            .args(["--pubkey", key.trim()])
            .output()
            .unwrap();
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
        std::fs::read_to_string(log).unwrap()
    }

    /// SIGTERM, then wait (graceful shutdown); returns the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP/1.1 exchange (`Connection: close`): status, headers, body.
pub fn raw(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    raw_as(addr, method, path, body, headers, "application/json")
}

/// [`raw`] with a body of `content_type`.
pub fn raw_as(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
    content_type: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or(b"");
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading a large body: a failed write is fine.
    let _ = s.write_all(body);
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    parse_response(&resp)
}

/// An HTTP/1.1 response read whole: status, head, body (dechunked).
pub fn parse_response(resp: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(resp).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, head.to_owned(), body)
}

pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Pids whose argv is exactly `argv` and that are not zombies (read from /proc, i.e.
/// from outside every sandbox).
pub fn pids_with_argv(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let mut out = Vec::new();
    for d in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = d.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read(d.path().join("cmdline")).is_ok_and(|c| c == want)
            && proc_state(pid).is_none_or(|s| s != 'Z')
        {
            out.push(pid);
        }
    }
    out
}

/// The state letter of a process.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// Waits up to `limit` for `cond`.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// A policy that allows the tools these tests run, on top of the built-in default.
pub fn policy_allowing(extra_toml: &str) -> String {
    let out = Command::new(tierbox())
        .args(["policy", "init"])
        .output()
        .unwrap();
    let mut p = String::from_utf8(out.stdout).unwrap();
    p.push_str(extra_toml);
    p
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}

pub fn tmp_path(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// Children of `parent` that are zombies (exited, not reaped), read from /proc.
pub fn zombie_children(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|d| d.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                let rest: Vec<&str> = st
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .collect();
                rest.first() == Some(&"Z") && rest.get(1) == Some(&parent.to_string().as_str())
            })
        })
        .collect()
}
