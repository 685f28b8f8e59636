//! What a run was refused, tied to the layer that refused it, with the smallest policy
//! change that would allow it — so an agent neither guesses nor asks for more than it
//! needs.
//!
//! Each [`Denial`] is `{layer, operation, target, count, first_ms, hint}`, deduplicated
//! by layer, operation and target. The layers whose refusals reach the list on a host are
//! named in the outcome's `enforcement.denial_reports`, with how, or why not: a layer
//! whose denials cannot be read there is said to be so, never shown as having refused
//! nothing.
//!
//! ```
//! use tierbox_runner::denials::{Denial, DenialLayer};
//!
//! let d = Denial::egress_not_allowlisted("pypi.org", 443, 1);
//! assert_eq!(d.layer, DenialLayer::Egress);
//! assert_eq!(d.hint, r#"egress.allow += "pypi.org:443""#);
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tierbox_egress::{EgressLog, Verdict};
use tierbox_policy::{EgressMode, LayerReport, Plan, Tier};

use crate::LimitHit;

/// Most denials listed; the rest are counted in the last one's `count` of their kind or
/// dropped (a run that is refused in a loop stays small).
pub const MAX_DENIALS: usize = 64;

/// The layer that refused.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DenialLayer {
    /// Landlock (a file or a port).
    Landlock,
    /// The seccomp filter (a system call).
    Seccomp,
    /// The egress proxy (a connection).
    Egress,
    /// A resource limit.
    Limits,
}

impl DenialLayer {
    /// Its name as serialised.
    pub fn name(self) -> &'static str {
        match self {
            Self::Landlock => "landlock",
            Self::Seccomp => "seccomp",
            Self::Egress => "egress",
            Self::Limits => "limits",
        }
    }
}

/// One thing the run was refused (all the times it was, counted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Denial {
    /// The layer that refused.
    pub layer: DenialLayer,
    /// What was refused: `connect`, `read`, `write`, `exec`, a system call's name, a
    /// limit's name.
    pub operation: String,
    /// What it was refused on: `host:port`, a path, a limit's value.
    pub target: String,
    /// How many times.
    pub count: u64,
    /// When it first happened, in milliseconds after the run started, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_ms: Option<u64>,
    /// The smallest policy change that would allow it (`egress.allow += "pypi.org:443"`),
    /// or why no policy can (`not allowed by any policy: …`).
    pub hint: String,
}

impl Denial {
    /// A connection to `host:port` that no allowlist entry matched, `count` times.
    pub fn egress_not_allowlisted(host: &str, port: u16, count: u64) -> Self {
        let target = tierbox_policy::hosts::host_with_port(host, Some(port));
        Self {
            layer: DenialLayer::Egress,
            operation: "connect".to_owned(),
            hint: format!("egress.allow += \"{target}\""),
            target,
            count,
            first_ms: None,
        }
    }
}

/// The denials of an ended run that this build reads: the egress proxy's refusals
/// (deduplicated by host, port and reason) and the limit the run hit. `limit_value` is
/// the limit's value as the plan set it.
pub fn of_run(
    egress: Option<&EgressLog>,
    limit: Option<(LimitHit, bool, Option<String>)>,
) -> Vec<Denial> {
    let mut by_key: BTreeMap<(String, String), Denial> = BTreeMap::new();
    for d in egress.iter().flat_map(|log| &log.decisions) {
        let target = tierbox_policy::hosts::host_with_port(&d.host, Some(d.port));
        let denial = match d.verdict {
            Verdict::NotAllowlisted => Denial::egress_not_allowlisted(&d.host, d.port, 1),
            Verdict::SpecialAddress => Denial {
                layer: DenialLayer::Egress,
                operation: "connect".to_owned(),
                hint: match d.address {
                    Some(addr) => format!(
                        "egress.allow += \"{}\" (the name resolved to a special address: loopback, private, link-local or metadata; only an address entry allows it)",
                        addr.ip()
                    ),
                    None => "an address entry in egress.allow covering what the name resolves to (a special range: loopback, private, link-local or metadata)".to_owned(),
                },
                target,
                count: 1,
                first_ms: None,
            },
            Verdict::BadRequest | Verdict::UnsupportedCommand => Denial {
                layer: DenialLayer::Egress,
                operation: "proxy request".to_owned(),
                hint: "not allowed by any policy: the egress proxy serves HTTP, CONNECT and SOCKS5 CONNECT only".to_owned(),
                target: if d.host.is_empty() { "(unparsed request)".to_owned() } else { target },
                count: 1,
                first_ms: None,
            },
            Verdict::TooManyTunnels => Denial {
                layer: DenialLayer::Egress,
                operation: "connect".to_owned(),
                hint: "not a policy decision: the proxy was serving its most tunnels at once; retry, or open fewer connections in parallel".to_owned(),
                target,
                count: 1,
                first_ms: None,
            },
            // Failures, not refusals: the destination did not answer.
            Verdict::Allowed | Verdict::ResolveFailed | Verdict::ConnectFailed | Verdict::ConnectTimeout => continue,
        };
        by_key
            .entry((denial.operation.clone(), denial.target.clone()))
            .and_modify(|e| e.count += 1)
            .or_insert(denial);
    }
    let mut out: Vec<Denial> = by_key.into_values().collect();
    if let Some((limit, tier_a, value)) = limit {
        let key = limit.policy_key(tier_a);
        out.push(Denial {
            layer: DenialLayer::Limits,
            operation: limit.name().to_owned(),
            target: value.clone().unwrap_or_default(),
            count: 1,
            first_ms: None,
            hint: match (limit, value) {
                (LimitHit::WallTime, _) => {
                    "a larger timeout_ms in the request, at most limits.max_timeout_ms".to_owned()
                }
                (_, Some(v)) => format!("{key} above {v}"),
                (_, None) => format!("a larger {key}"),
            },
        });
    }
    out.truncate(MAX_DENIALS);
    out
}

/// The value `plan` set for `limit`, with its unit, for [`of_run`].
pub fn limit_value(plan: &Plan, limit: LimitHit) -> Option<String> {
    let l = &plan.limits;
    Some(match limit {
        LimitHit::WallTime => format!("{} ms", l.wall_timeout_ms),
        LimitHit::CpuTime => format!("{} s", l.cpu_time_secs),
        LimitHit::Memory => format!("{} bytes", l.memory_bytes),
        LimitHit::Processes => l.max_processes.to_string(),
        LimitHit::FileSize => format!("{} bytes", l.file_size_bytes),
        LimitHit::Output => format!("{} bytes per stream", plan.output.max_bytes),
        LimitHit::Disk => format!("{} bytes", l.disk_bytes),
        LimitHit::Fuel | LimitHit::Table | LimitHit::Instances => return None,
    })
}

/// How each layer's denials reach the outcome on this run, or why they cannot (the
/// outcome's `enforcement.denial_reports`).
pub fn sources(plan: &Plan, tier: Tier) -> BTreeMap<String, LayerReport> {
    let mut out = BTreeMap::new();
    out.insert(
        DenialLayer::Limits.name().to_owned(),
        LayerReport::applied(
            "the supervisor's own detection: deadline, cgroup OOM and pids counts, rlimit signals, the output quota, a full /tmp or upper layer",
        ),
    );
    let egress = match plan.network.mode {
        EgressMode::Strict if plan.network.needs_proxy() => {
            LayerReport::applied("every connection the egress proxy refused")
        }
        EgressMode::AllowAll => {
            LayerReport::applied("nothing is refused: egress.mode = \"allow_all\"")
        }
        EgressMode::Preflight => LayerReport::applied(
            "nothing is refused at run time: preflight checks the hosts a request names before it runs (a refusal there is a rejection)",
        ),
        EgressMode::BlockAll | EgressMode::Strict => LayerReport::missing(
            "no proxy runs (no network, or an empty allowlist): a connection fails inside the sandbox (no route, or seccomp refuses the socket) and is not recorded",
        ),
    };
    out.insert(DenialLayer::Egress.name().to_owned(), egress);
    if tier != Tier::A {
        out.insert(
            DenialLayer::Landlock.name().to_owned(),
            LayerReport::missing(
                "not recorded: landlock refuses with EACCES and logs only to the kernel's audit subsystem, which this build does not read; the program sees the error",
            ),
        );
        out.insert(
            DenialLayer::Seccomp.name().to_owned(),
            LayerReport::missing(
                "not recorded: the filter answers a denied call with an error code and no record; the program sees the error",
            ),
        );
    }
    out
}

/// [`sources`] for a Tier A run: its limits are recorded; a guest's access outside its
/// grants does not exist for it (WASI answers `ENOENT`/`EBADF`), so there is nothing to
/// refuse there.
pub fn tier_a_sources() -> BTreeMap<String, LayerReport> {
    let mut out = BTreeMap::new();
    out.insert(
        DenialLayer::Limits.name().to_owned(),
        LayerReport::applied(
            "the runtime's limits: fuel, memory, tables, instances, deadline, output",
        ),
    );
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tierbox_egress::{Decision, Protocol};

    fn decision(host: &str, port: u16, verdict: Verdict) -> Decision {
        Decision {
            protocol: Protocol::Connect,
            host: host.to_owned(),
            port,
            verdict,
            allowed: verdict.is_allowed(),
            message: String::new(),
            address: None,
            bytes_sent: 0,
            bytes_received: 0,
        }
    }

    #[test]
    fn egress_refusals_are_counted_once_each_with_their_fix_and_failures_are_not_denials() {
        let log = EgressLog {
            decisions: vec![
                decision("pypi.org", 443, Verdict::NotAllowlisted),
                decision("pypi.org", 443, Verdict::NotAllowlisted),
                decision("github.com", 443, Verdict::Allowed),
                decision("down.example", 443, Verdict::ConnectFailed),
                decision("::1", 8080, Verdict::NotAllowlisted),
                decision("internal.example", 80, Verdict::SpecialAddress),
            ],
            dropped: 0,
        };
        let d = of_run(Some(&log), None);
        let got: Vec<(&str, u64, &str)> = d
            .iter()
            .map(|d| (d.target.as_str(), d.count, d.hint.as_str()))
            .collect();
        assert_eq!(got[0], ("[::1]:8080", 1, r#"egress.allow += "[::1]:8080""#));
        assert_eq!(
            got[2],
            ("pypi.org:443", 2, r#"egress.allow += "pypi.org:443""#)
        );
        assert_eq!(got[1].0, "internal.example:80");
        assert!(got[1].2.contains("address entry"), "{}", got[1].2);
        assert_eq!(d.len(), 3);
        assert!(d.iter().all(|d| d.layer == DenialLayer::Egress));
    }

    #[test]
    fn a_limit_names_its_key_and_value() {
        let d = of_run(
            None,
            Some((LimitHit::Memory, false, Some("1024 bytes".to_owned()))),
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].layer, DenialLayer::Limits);
        assert_eq!(d[0].operation, "memory");
        assert_eq!(d[0].hint, "limits.memory_bytes above 1024 bytes");
        let fuel = of_run(None, Some((LimitHit::Fuel, true, None)));
        assert_eq!(fuel[0].hint, "a larger wasm.fuel");
        assert!(of_run(None, None).is_empty());
    }

    #[test]
    fn at_most_max_denials_are_listed() {
        let log = EgressLog {
            decisions: (0..200)
                .map(|i| decision(&format!("h{i}.example"), 443, Verdict::NotAllowlisted))
                .collect(),
            dropped: 0,
        };
        assert_eq!(of_run(Some(&log), None).len(), MAX_DENIALS);
    }
}
