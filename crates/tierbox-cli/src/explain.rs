//! `tierbox explain`: why a run was refused what it was (its denials, from an outcome or
//! the audit log), or whether a policy allows a path or a host and which rule decides.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use tierbox_policy::{EgressMode, Policy};
use tierbox_runner::denials::{PathVerdict, path_verdict};

/// What a path is opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// Read a file, list a directory.
    Read,
    /// Write, create, delete or rename.
    Write,
    /// Execute a file.
    Exec,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Exec => "exec",
        }
    }
}

/// `explain --path P --op OP`: what the policy's grants (resolved in the runner's
/// workspace) say of `path`. Exit 0 when allowed, 1 when denied.
pub fn path(runner: &tierbox_runner::Runner, path: &Path, op: Op) -> Result<ExitCode> {
    let plan = match runner.check_grants() {
        Ok(plan) => plan,
        Err(rej) => {
            eprintln!("tierbox: [{}] {rej}", rej.code());
            return Ok(ExitCode::from(1));
        }
    };
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let shown = path.display();
    let PathVerdict { allowed, why, fix } = path_verdict(&plan, &path, op == Op::Write);
    let verdict = if allowed { "allowed" } else { "denied" };
    println!("{} {shown}: {verdict}: {why}", op.name());
    if !allowed {
        match fix {
            Some(f) => println!("to allow: {f}"),
            None => println!("no policy can allow it"),
        }
    }
    if op == Op::Exec && allowed {
        println!("note: running it as a command also needs its name in exec.allowed_executables");
    }
    Ok(ExitCode::from(u8::from(!allowed)))
}

/// `explain --host HOST[:PORT] [--request "METHOD /path"]`: whether the policy's egress
/// lets a run connect there, and which entry decides; for a host whose TLS the proxy
/// terminates, its rules and credentials, and whether they allow the request, decided as
/// the proxy decides. Exit 0 when allowed, 1 when denied.
pub fn host(policy: &Policy, raw: &str, request: Option<&str>) -> Result<ExitCode> {
    let (host, port) = match tierbox_policy::hosts::parse_host_and_port(raw) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("tierbox: {raw:?} is not HOST or HOST:PORT: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let target = host.with_port(port);
    let e = &policy.egress;
    // Without the host's network (Tier C), the host's loopback is reached only through
    // a host port; `strict` may still name a loopback address for the proxy.
    if matches!(e.mode, EgressMode::BlockAll | EgressMode::Strict)
        && let Some((allowed, why, fix)) = loopback(policy, &host, port)
        && (allowed || e.mode == EgressMode::BlockAll)
    {
        println!(
            "connect {target}: {}: {why}",
            if allowed { "allowed" } else { "denied" }
        );
        if let Some(f) = fix {
            println!("to allow: {f}");
        }
        return Ok(ExitCode::from(u8::from(!allowed)));
    }
    let (allowed, why, fix) = match e.mode {
        EgressMode::AllowAll => (
            true,
            "egress.mode = \"allow_all\": any host".to_owned(),
            None,
        ),
        EgressMode::BlockAll => (
            false,
            "egress.mode = \"block_all\": no network at all".to_owned(),
            Some(format!(
                "egress.mode = \"strict\" and egress.allow += \"{target}\""
            )),
        ),
        EgressMode::Preflight | EgressMode::Strict => {
            let entry = e.allow.iter().find(|a| {
                a.parse::<tierbox_policy::hosts::HostPattern>()
                    .is_ok_and(|p| p.matches_host(&host, port))
            });
            match entry {
                Some(entry) => (true, format!("egress.allow \"{entry}\" matches"), None),
                None => (
                    false,
                    format!(
                        "no egress.allow entry matches (egress.mode = \"{}\")",
                        e.mode.as_str()
                    ),
                    Some(format!("egress.allow += \"{target}\"")),
                ),
            }
        }
    };
    println!(
        "connect {target}: {}: {why}",
        if allowed { "allowed" } else { "denied" }
    );
    if let Some(f) = fix {
        println!("to allow: {f}");
    }
    if allowed && e.mode == EgressMode::Strict {
        println!(
            "note: in strict mode the proxy still refuses a name that resolves to a loopback, private, link-local or metadata address unless an address entry covers it"
        );
    }
    let request_allowed = terminated(policy, &host, request)?;
    Ok(ExitCode::from(u8::from(!allowed || !request_allowed)))
}

/// `explain --host` of a loopback address: inside Tier C the loopback is the sandbox's own,
/// and the host's is reached only at `127.0.0.1:PORT` of an `egress.host_ports` entry.
/// `None` for any other host.
fn loopback(
    policy: &Policy,
    host: &tierbox_policy::hosts::CanonicalHost,
    port: Option<u16>,
) -> Option<(bool, String, Option<String>)> {
    let name = host.to_string();
    let v4 = name == "localhost" || name == "127.0.0.1";
    let other = name.starts_with("127.") || name == "::1" || name == "[::1]";
    if !v4 && !other {
        return None;
    }
    let ports = &policy.egress.host_ports;
    Some(match port {
        Some(p) if v4 && ports.contains(&p) => (
            true,
            format!(
                "egress.host_ports {p}: in tier c the supervisor relays 127.0.0.1:{p} inside the sandbox to the host's 127.0.0.1:{p} (tier b refuses host_ports)"
            ),
            None,
        ),
        Some(p) if v4 => (
            false,
            format!(
                "the sandbox's loopback is its own (tier c); the host's 127.0.0.1:{p} is reached only through egress.host_ports (it lists {ports:?})"
            ),
            Some(format!("egress.host_ports += {p} (tier c)")),
        ),
        Some(p) => (
            false,
            format!(
                "only 127.0.0.1 inside the sandbox reaches a host port; {name} is the sandbox's own loopback"
            ),
            Some(format!(
                "connect to 127.0.0.1:{p}, with egress.host_ports += {p} (tier c)"
            )),
        ),
        None => (
            false,
            "a host port is one TCP port: give HOST:PORT".to_owned(),
            None,
        ),
    })
}

/// `explain --socket PATH`: whether a run may connect to the host socket at `path`: the
/// `egress.unix_sockets` entry that resolves to it (in this process's environment, as a
/// run validated here would resolve it), or the key that would allow it. Exit 0 when
/// allowed, 1 when denied.
pub fn socket(policy: &Policy, path: &Path) -> Result<ExitCode> {
    use tierbox_policy::unix_sockets::{SocketEntry, is_privileged_socket};
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let want = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let shown = want.display();
    let mut unresolved = Vec::new();
    for entry in &policy.egress.unix_sockets {
        let resolved = entry
            .parse::<SocketEntry>()
            .map_err(|e| e.to_string())
            .and_then(|e| e.expand(&env).map_err(|e| e.to_string()))
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
        match resolved {
            Ok(p) if p == want => {
                let privileged = is_privileged_socket(&want) || is_privileged_socket(path);
                if privileged && !policy.egress.danger_privileged_sockets {
                    println!(
                        "connect {shown}: denied: egress.unix_sockets entry {entry:?} names it, but its peer controls the host"
                    );
                    println!(
                        "to allow: egress.danger_privileged_sockets = true (whatever runs inside can then become root on the host)"
                    );
                    return Ok(ExitCode::from(1));
                }
                println!(
                    "connect {shown}: allowed: egress.unix_sockets entry {entry:?} (tier c binds it read-only at {shown}; tier b refuses the key)"
                );
                return Ok(ExitCode::SUCCESS);
            }
            Ok(_) => {}
            Err(why) => unresolved.push(format!("{entry:?}: {why}")),
        }
    }
    println!(
        "connect {shown}: denied: no egress.unix_sockets entry resolves to it; a run reaches no host socket but those"
    );
    for note in &unresolved {
        println!("note: {note}");
    }
    let danger = match is_privileged_socket(&want) || is_privileged_socket(path) {
        true => " and egress.danger_privileged_sockets = true (its peer controls the host)",
        false => "",
    };
    println!("to allow: egress.unix_sockets += \"{shown}\"{danger} (tier c)");
    Ok(ExitCode::from(1))
}

/// What `explain --host` adds for a terminated host (its rules, its credentials), and the
/// verdict on `request` (`METHOD /path`), as the proxy reaches it: normal form first,
/// then the rules. Whether the request is allowed.
fn terminated(
    policy: &Policy,
    host: &tierbox_policy::hosts::CanonicalHost,
    request: Option<&str>,
) -> Result<bool> {
    use tierbox_policy::egress_rules::{RequestRule, path_in_normal_form};
    let name = host.to_string();
    let hosts = tierbox_policy::plan::NetworkPlan::terminated_from(&policy.egress);
    let Some(t) = hosts.get(&name) else {
        if let Some(r) = request {
            println!(
                "request {r}: allowed: the proxy does not read requests to {name} (a plain tunnel; egress.hosts holds a host to request rules)"
            );
        }
        return Ok(true);
    };
    match t.allow.is_empty() {
        true => println!("terminated: the proxy reads {name}'s requests; no rules: every request"),
        false => println!(
            "terminated: the proxy reads {name}'s requests, held to egress.hosts.\"{name}\".allow = {:?}",
            t.allow
        ),
    }
    for c in &t.credentials {
        let place = c.header.as_deref().map_or_else(
            || format!("query {}", c.query.as_deref().unwrap_or("")),
            |h| format!("header {h}"),
        );
        println!(
            "credential {}: the program's ${} holds a placeholder; the proxy puts the secret into {place} of allowed requests",
            c.name, c.env
        );
    }
    let Some(raw) = request else {
        return Ok(true);
    };
    let Some((method, target)) = raw.split_once(' ') else {
        anyhow::bail!("--request {raw:?}: give METHOD /path, as \"GET /repos/o/r\"");
    };
    let path = target.split('?').next().unwrap_or(target);
    let (allowed, why) = if let Some(bad) = path_in_normal_form(path) {
        (
            false,
            format!(
                "its path is not in normal form ({bad}): refused before any rule, and no rule can allow it"
            ),
        )
    } else if t.allow.is_empty() {
        (true, "no rules: every request".to_owned())
    } else {
        let rules: Vec<RequestRule> = t
            .allow
            .iter()
            .filter_map(|r| RequestRule::parse(r).ok())
            .collect();
        match rules.iter().find(|r| r.allows(method, path)) {
            Some(r) => (true, format!("rule \"{}\" matches", r.as_str())),
            None => (
                false,
                format!(
                    "no rule matches; to allow: add \"{method} {path}\" to egress.hosts.\"{name}\".allow"
                ),
            ),
        }
    };
    println!(
        "request {method} {path}: {}: {why}",
        if allowed { "allowed" } else { "denied" }
    );
    Ok(allowed)
}

/// `explain --outcome FILE`: the denials of an outcome (`tierbox run --json`), and the
/// layers whose denials were not recorded.
pub fn outcome(file: &Path) -> Result<ExitCode> {
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", file.display()))?;
    print_denials(&v["denials"]);
    if let Some(reports) = v["enforcement"]["denial_reports"].as_object() {
        for (layer, r) in reports {
            if r["applied"] == false {
                println!(
                    "{layer}: not recorded here: {}",
                    r["detail"].as_str().unwrap_or("")
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `explain RUN_ID`: the denials the audit log `log` recorded for the run.
pub fn run_id(log: &Path, run_id: &str) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let body = &record["record"]["envelope"]["attestation"]["body"];
        if body["outcome"]["run_id"] == run_id {
            print_denials(&body["outcome"]["denials"]);
            return Ok(ExitCode::SUCCESS);
        }
    }
    eprintln!("tierbox: run {run_id} is not in {}", log.display());
    Ok(ExitCode::from(1))
}

fn print_denials(denials: &serde_json::Value) {
    let list = denials.as_array().map(Vec::as_slice).unwrap_or_default();
    if list.is_empty() {
        println!("no denials recorded");
    }
    for d in list {
        println!(
            "{} {} ({}, {} time{}): to allow: {}",
            d["operation"].as_str().unwrap_or(""),
            d["target"].as_str().unwrap_or(""),
            d["layer"].as_str().unwrap_or(""),
            d["count"],
            if d["count"] == 1 { "" } else { "s" },
            d["hint"].as_str().unwrap_or("")
        );
    }
}

/// The audit log to read: `--log`, else the policy's `audit.log`.
pub fn log_path(log: Option<PathBuf>, policy: &Policy) -> Option<PathBuf> {
    log.or_else(|| policy.audit.log.clone())
}
