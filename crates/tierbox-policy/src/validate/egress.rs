//! Egress preflight (SPEC §2.1, §4).
//!
//! Collects the hosts a request names — every `requested_egress_hosts` entry and the
//! hosts [`extract_hosts_for`] finds in the arguments — and, in `preflight` and `strict`
//! mode, requires each to match the allowlist. This is the advisory layer: it reads argv
//! text only. In `strict` mode the runtime proxy enforces the same allowlist on the
//! connections actually made; in `preflight` mode nothing does.
//!
//! | mode | extraction | check |
//! |---|---|---|
//! | `allow_all` | none | none |
//! | `block_all` | recorded in `preflight_hosts` | none (the network is off at runtime) |
//! | `preflight`, `strict` | recorded | every host must match; an empty allowlist denies all |

use crate::hosts::{CanonicalHost, HostPattern, extract_hosts_for, parse_host_and_port};
use crate::plan::NetworkPlan;
use crate::policy::{EgressMode, EgressPolicy};
use crate::reach::{PublishedPort, parse_published};
use crate::rejection::Rejection;
use crate::request::ProcessRunRequest;

/// Checks the hosts `req` names against `policy` and returns the network part of the
/// plan. `command` is the requested program (a bare name, or a path whose base name is
/// used); it decides which positional arguments are hosts (`ssh host`, `ping host`).
pub(crate) fn check(
    policy: &EgressPolicy,
    req: &ProcessRunRequest,
    command: &str,
) -> Result<NetworkPlan, Rejection> {
    // `Policy::check` refuses invalid entries when a policy is loaded; a policy built in
    // code skips that, and an entry that does not parse then allows nothing (fail closed).
    let allow: Vec<HostPattern> = policy.allow.iter().filter_map(|a| a.parse().ok()).collect();
    let publish = published(policy, req)?;
    if policy.mode == EgressMode::AllowAll {
        return Ok(NetworkPlan {
            mode: policy.mode,
            allow,
            preflight_hosts: Vec::new(),
            resolve: policy.resolve.clone(),
            terminated: NetworkPlan::terminated_from(policy),
            upstream_roots: policy.upstream_roots.clone(),
            publish,
            host_ports: policy.host_ports.clone(),
            unix_sockets: Vec::new(),
        });
    }
    let enforce = matches!(policy.mode, EgressMode::Preflight | EgressMode::Strict);
    let allowed = |host: &str, port: Option<u16>| match CanonicalHost::parse(host) {
        Ok(h) => allow.iter().any(|p| p.matches_host(&h, port)),
        // A URL host we could not parse (`http://bad_name/`) matches nothing.
        Err(_) => false,
    };
    let mut hosts: Vec<String> = Vec::new();

    for (i, raw) in req.requested_egress_hosts.iter().enumerate() {
        let (host, port) = match parse_host_and_port(raw) {
            Ok(parsed) => parsed,
            Err(e) if enforce => {
                return Err(Rejection::EgressHostInvalid {
                    host: raw.clone(),
                    reason: e.to_string(),
                });
            }
            // block_all: nothing can connect, so an unusable entry is only not recorded.
            Err(_) => continue,
        };
        if enforce && !allow.iter().any(|p| p.matches_host(&host, port)) {
            return Err(Rejection::EgressHostNotAllowed {
                host: host.with_port(port),
                source_desc: format!("requested_egress_hosts[{i}]"),
            });
        }
        hosts.push(host.to_string());
    }

    for found in extract_hosts_for(command, &req.args) {
        if enforce && !allowed(&found.host, found.port) {
            return Err(Rejection::EgressHostNotAllowed {
                host: crate::hosts::host_with_port(&found.host, found.port),
                source_desc: format!("args[{}]", found.arg_index),
            });
        }
        hosts.push(found.host);
    }

    hosts.sort();
    hosts.dedup();
    Ok(NetworkPlan {
        mode: policy.mode,
        allow,
        preflight_hosts: hosts,
        resolve: policy.resolve.clone(),
        terminated: NetworkPlan::terminated_from(policy),
        upstream_roots: policy.upstream_roots.clone(),
        publish,
        host_ports: policy.host_ports.clone(),
        unix_sockets: Vec::new(),
    })
}

/// The host sockets of `egress.unix_sockets`, resolved with variables from the
/// supervisor's environment (never the request's); see [`crate::unix_sockets`].
pub(crate) fn unix_sockets(
    policy: &EgressPolicy,
    ctx: &super::ValidateContext,
    deny_read: &[std::path::PathBuf],
) -> Result<Vec<crate::unix_sockets::UnixSocketGrant>, Rejection> {
    use crate::unix_sockets::{SocketRefusal, resolve};
    resolve(
        &policy.unix_sockets,
        policy.danger_privileged_sockets,
        &ctx.supervisor_env,
        deny_read,
    )
    .map_err(|refusal| match refusal {
        SocketRefusal::Unusable { entry, reason } => {
            Rejection::UnixSocketUnusable { entry, reason }
        }
        SocketRefusal::Privileged { entry, path } => Rejection::UnixSocketPrivileged {
            entry,
            path: path.display().to_string(),
        },
    })
}

/// The ports the request publishes: each well formed and one the policy's
/// `egress.publish` lists (a request may only choose among them).
fn published(
    policy: &EgressPolicy,
    req: &ProcessRunRequest,
) -> Result<Vec<PublishedPort>, Rejection> {
    if req.publish.is_empty() {
        return Ok(Vec::new());
    }
    let wanted = parse_published(&req.publish)
        .map_err(|(entry, reason)| Rejection::PublishInvalid { entry, reason })?;
    // `Policy::check` refused a bad list at load; one built in code that does not parse
    // allows nothing (fail closed).
    let allowed = parse_published(&policy.publish).unwrap_or_default();
    match wanted.iter().find(|w| !allowed.contains(w)) {
        None => Ok(wanted),
        Some(w) => Err(Rejection::PublishNotAllowed {
            entry: w.to_string(),
            allowed: match allowed.is_empty() {
                true => "nothing".to_owned(),
                false => allowed
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        }),
    }
}
