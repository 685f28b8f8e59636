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
use tierbox_policy::{EgressMode, LayerReport, Plan, Rejection, Tier};
use tierbox_sandbox::contract::denials::NotRecorded;

use crate::LimitHit;

/// Most denials listed; the rest are counted in the last one's `count` of their kind or
/// dropped (a run that is refused in a loop stays small).
pub const MAX_DENIALS: usize = 64;

pub use tierbox_policy::enforcement::DenialLayer;

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
    /// The denial in a few words, for a one-line summary: the operation and its target
    /// (`read /root/.ssh/id_ed25519`, `socket AF_NETLINK, SOCK_RAW`), or the system call
    /// alone for a seccomp refusal read from the audit records, whose target is the
    /// rule's reason.
    ///
    /// ```
    /// use tierbox_runner::denials::Denial;
    ///
    /// let d = Denial::egress_not_allowlisted("pypi.org", 443, 1);
    /// assert_eq!(d.short(), "connect pypi.org:443");
    /// ```
    pub fn short(&self) -> String {
        let rule = tierbox_sandbox::contract::denials::refusal_rule(&self.operation);
        match self.layer {
            DenialLayer::Seccomp if rule.is_none_or(|r| r == self.target) => self.operation.clone(),
            _ => format!("{} {}", self.operation, self.target),
        }
    }

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
            Verdict::RequestRefused => Denial {
                layer: DenialLayer::Egress,
                operation: "request".to_owned(),
                hint: d
                    .message
                    .split_once("to allow: ")
                    .map_or_else(|| d.message.clone(), |(_, fix)| fix.to_owned()),
                target: match &d.request {
                    Some(request) => format!("{request} on {target}"),
                    None => target,
                },
                count: 1,
                first_ms: None,
            },
            Verdict::TlsFailed => Denial {
                layer: DenialLayer::Egress,
                operation: "tls".to_owned(),
                hint: d.message.clone(),
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

/// The landlock and seccomp refusals of a run that started at `started` (read from the
/// kernel's audit records, or handed to the supervisor by the filter), as denials with
/// their hints.
pub fn of_refusals<'a>(
    plan: &Plan,
    refusals: impl IntoIterator<Item = &'a tierbox_sandbox::contract::denials::Refusal>,
    started: std::time::Instant,
) -> Vec<Denial> {
    of_refusals_with(plan, refusals, started, &|| tier_c_runs(plan))
}

/// Whether a Tier C run of `plan` (the request's `tier = "c"`) would run on this host,
/// and why not: the selection a run makes.
fn tier_c_runs(plan: &Plan) -> Result<(), Rejection> {
    let mut asked = plan.clone();
    asked.tier.requested = tierbox_policy::TierRequest::C;
    tierbox_sandbox::contract::select_tier(&asked, tierbox_sandbox::contract::host_facts())
        .map(drop)
}

/// [`of_refusals`], asking `tier_c` (at most once, and only for a refused unix socket)
/// whether a Tier C run of the plan would run here.
fn of_refusals_with<'a>(
    plan: &Plan,
    refusals: impl IntoIterator<Item = &'a tierbox_sandbox::contract::denials::Refusal>,
    started: std::time::Instant,
    tier_c: &dyn Fn() -> Result<(), Rejection>,
) -> Vec<Denial> {
    use tierbox_sandbox::contract::denials::RefusalLayer;
    let tier_c_answer = std::cell::OnceCell::new();
    let tier_c = || tier_c_answer.get_or_init(tier_c).clone();
    refusals
        .into_iter()
        .map(|r| {
            let first_ms = u64::try_from(r.first.saturating_duration_since(started).as_millis())
                .unwrap_or(u64::MAX);
            let (layer, operation, hint) = match r.layer {
                RefusalLayer::Landlock => {
                    let (operation, hint) = landlock_denial(plan, &r.operation, &r.target);
                    (DenialLayer::Landlock, operation, hint)
                }
                RefusalLayer::Mount => {
                    let write = !matches!(r.operation.as_str(), "read" | "execute" | "open");
                    (
                        DenialLayer::Mounts,
                        r.operation.clone(),
                        path_hint(plan, &r.target, write, &r.operation, "the sandbox"),
                    )
                }
                RefusalLayer::Seccomp => (
                    DenialLayer::Seccomp,
                    r.operation.clone(),
                    seccomp_hint(
                        plan.network.mode,
                        &r.operation,
                        // An audited refusal's target is its rule; a handed-off one's is
                        // its arguments.
                        tierbox_sandbox::contract::denials::refusal_rule(&r.operation)
                            .unwrap_or(&r.target),
                        &r.target,
                        &tier_c,
                    ),
                ),
            };
            Denial {
                layer,
                operation,
                target: r.target.clone(),
                count: r.count,
                first_ms: Some(first_ms),
                hint,
            }
        })
        .collect()
}

/// The operation (landlock's access rights in words: `read`, `write`, `execute`,
/// `make-dir`, `truncate`, `ioctl-dev`, `connect-tcp`, …) and the hint for a landlock
/// denial of `rights` (the kernel's names, `,`-separated) on `target`.
fn landlock_denial(plan: &Plan, rights: &str, target: &str) -> (String, String) {
    let words: Vec<String> = rights
        .split(',')
        .map(|r| match r {
            "read_file" => "read".to_owned(),
            "write_file" => "write".to_owned(),
            other => other.replace('_', "-"),
        })
        .collect();
    let operation = words.join(",");
    let is = |w: &str| words.iter().any(|x| x == w);
    let hint = if is("connect-tcp") {
        format!(
            "egress.mode = \"strict\" and egress.allow += the host behind {target}: a run reaches the network only through the egress proxy (HTTP_PROXY/HTTPS_PROXY)"
        )
    } else if is("bind-tcp") {
        "not allowed by any policy: a run cannot listen on TCP ports".to_owned()
    } else if is("signal") || is("abstract-unix-socket") {
        "not allowed by any policy: processes and abstract sockets outside the run's own".to_owned()
    } else {
        let write = !words
            .iter()
            .all(|w| matches!(w.as_str(), "read" | "read-dir" | "execute"));
        path_hint(plan, target, write, &operation, "landlock")
    };
    (operation, hint)
}

/// The hint for a path `target` that `refuser` (landlock, the sandbox's mounts) refused
/// `operation` on: the grant that would allow it, or why none can.
fn path_hint(plan: &Plan, target: &str, write: bool, operation: &str, refuser: &str) -> String {
    let verdict = path_verdict(plan, std::path::Path::new(target), write);
    match (verdict.allowed, verdict.fix) {
        (false, Some(fix)) => fix,
        (false, None) => format!("not allowed by any policy: {}", verdict.why),
        (true, _) => format!(
            "not a missing grant ({}): {refuser} refuses {operation} here for another reason (a rename or link across grants, a device ioctl)",
            verdict.why
        ),
    }
}

/// The hint for a system call the seccomp filter refused under `rule` in a run whose
/// egress mode is `mode`; `target` is the refused argument when the filter handed the
/// call off (`AF_NETLINK, SOCK_RAW`), else the rule itself. Socket calls are refused in
/// Tier B only (Tier C's filter allows inet and unix sockets: its network namespace has
/// only loopback), so the hints are the narrowest change that lets a Tier B refusal
/// through: the egress proxy for TCP, `preflight` for the rest of the inet family, Tier C
/// (when `tier_c` says it runs here) for a unix socket — never `allow_all` where one of
/// those would do.
fn seccomp_hint(
    mode: EgressMode,
    syscall: &str,
    rule: &str,
    target: &str,
    tier_c: &dyn Fn() -> Result<(), Rejection>,
) -> String {
    const THROUGH_PROXY: &str = "egress.mode = \"strict\" with egress.allow += \"HOST:PORT\": outbound TCP to the hosts listed, through the egress proxy";
    // The inet sockets and calls strict egress refuses; `preflight` has them, with unix
    // sockets still refused.
    const PREFLIGHT: &str = "egress.mode = \"preflight\": inet sockets of every kind (UDP included), the hosts a request names checked before it runs; strict egress allows only TCP to the egress proxy, which resolves names itself, so a program that looks a name up only to connect to it over TCP needs egress.mode = \"strict\" with egress.allow += \"HOST:PORT\" instead";
    match syscall {
        "socket" if target != rule => {
            let mut parts = target.split(", ");
            let family = parts.next().unwrap_or(target);
            let kind = parts.next().unwrap_or("");
            let protocol = parts.next();
            let tcp = kind == "SOCK_STREAM" && protocol.is_none_or(|p| p == "protocol 6 (TCP)");
            match family {
                "AF_UNIX" => unix_socket_hint(mode, tier_c),
                // A TCP socket is refused only where no proxy runs (no network, or an
                // empty allowlist): strict egress with an allowlist has them.
                "AF_INET" | "AF_INET6" if tcp => THROUGH_PROXY.to_owned(),
                "AF_INET" | "AF_INET6" => PREFLIGHT.to_owned(),
                _ => format!("not allowed by any policy: {rule}"),
            }
        }
        // `MSG_FASTOPEN` and `listen` are refused only under strict egress with an
        // allowlist (its TCP goes through landlock's connect check to the proxy).
        "sendto" | "sendmsg" | "sendmmsg" | "listen" => PREFLIGHT.to_owned(),
        // Refused in the kernel, its arguments unknown.
        "socket" => format!("{THROUGH_PROXY}; nothing else is allowed by any policy ({rule})"),
        _ => format!("not allowed by any policy: {rule}"),
    }
}

/// What libc's name service does with a refused unix socket, said with every hint for
/// one: it is why a Tier B run that looks a user or a host up is refused one.
pub const NAME_SERVICE_NOTE: &str = "libc's name service (nscd, systemd's and sssd's modules) tries one at every user, group or host lookup and goes on without it: a lookup needs nothing";

/// The hint for a refused `socket(AF_UNIX, …)` (Tier B): the request's `tier = "c"` when
/// a Tier C run of the plan runs here, where a run may open unix sockets that reach only
/// its own namespaces; `allow_all` only when nothing narrower lets it through.
fn unix_socket_hint(mode: EgressMode, tier_c: &dyn Fn() -> Result<(), Rejection>) -> String {
    let only =
        "egress.mode = \"allow_all\": the only mode in which a Tier B run may open unix sockets";
    match mode {
        // Tier C has no host network, so nothing narrower carries preflight.
        EgressMode::Preflight | EgressMode::AllowAll => format!(
            "{only} (Tier C, where a run may, has no host network for preflight); {NAME_SERVICE_NOTE}"
        ),
        EgressMode::BlockAll | EgressMode::Strict => match tier_c() {
            Ok(()) => format!(
                "tier = \"c\" in the request (--tier c): a Tier C run may open unix sockets, which reach only what its own namespaces hold and the host sockets egress.unix_sockets names; {NAME_SERVICE_NOTE}"
            ),
            Err(why) => format!(
                "{only}, and Tier C, where a run may, does not run here ({why}); {NAME_SERVICE_NOTE}"
            ),
        },
    }
}

/// The denials worth naming to a person after a run (the CLI's line, the MCP summary):
/// those that may explain how it ended. The outcome's `denials` keeps them all.
///
/// - A limit is left out: the run's end says it (`limit hit: …`).
/// - A refused socket is named only when the program did not succeed (`succeeded`):
///   programs try sockets and go on without them — libc's name service a unix socket at
///   every user, group or host lookup ([`NAME_SERVICE_NOTE`]), its address sorting a UDP
///   socket — so `id` or `ls -l` in Tier B is refused one and is not the worse for it.
/// - A refused unix socket is named only when nothing else is: that it was a lookup is
///   then the likelier story.
///
/// ```
/// use tierbox_runner::denials::{Denial, DenialLayer, worth_naming};
///
/// let unix = Denial {
///     layer: DenialLayer::Seccomp,
///     operation: "socket".to_owned(),
///     target: "AF_UNIX, SOCK_STREAM".to_owned(),
///     count: 4,
///     first_ms: None,
///     hint: String::new(),
/// };
/// let pypi = Denial::egress_not_allowlisted("pypi.org", 443, 1);
/// assert!(worth_naming(std::slice::from_ref(&unix), true).is_empty());
/// assert_eq!(worth_naming(std::slice::from_ref(&unix), false), [&unix]);
/// assert_eq!(worth_naming(&[unix, pypi.clone()], false), [&pypi]);
/// ```
pub fn worth_naming(denials: &[Denial], succeeded: bool) -> Vec<&Denial> {
    let socket = |d: &Denial| d.layer == DenialLayer::Seccomp && d.operation == "socket";
    let unix = |d: &Denial| socket(d) && d.target.starts_with("AF_UNIX");
    let named: Vec<&Denial> = denials
        .iter()
        .filter(|d| d.layer != DenialLayer::Limits && !(succeeded && socket(d)))
        .collect();
    if named.iter().all(|d| unix(d)) {
        return named;
    }
    named.into_iter().filter(|d| !unix(d)).collect()
}

/// What a policy's grants say of a path: allowed or not, which rule decides, and the
/// smallest change that would allow it (`None`: no policy can).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathVerdict {
    /// The access asked for is granted.
    pub allowed: bool,
    /// Which rule decides, in words.
    pub why: String,
    /// The policy change that would allow it, when one can.
    pub fix: Option<String>,
}

/// What `plan`'s grants say of opening `path` to read (or execute), or to write when
/// `write`.
///
/// ```
/// use std::path::Path;
///
/// use tierbox_policy::{Policy, ValidateContext, validate::grants_plan};
///
/// let ws = std::env::current_dir().unwrap();
/// let plan = grants_plan(&Policy::builtin_default(), &ValidateContext::new(&ws)).unwrap();
/// let v = tierbox_runner::denials::path_verdict(&plan, Path::new("/srv/data/x"), false);
/// assert!(!v.allowed);
/// assert_eq!(v.fix.as_deref(), Some(r#"filesystem.read_only += "/srv/data/x""#));
/// ```
pub fn path_verdict(plan: &Plan, path: &std::path::Path, write: bool) -> PathVerdict {
    use tierbox_policy::access::{Access, AccessModel, Rule};
    let model = AccessModel::of(plan);
    let shown = path.display();
    let needed = if write { Access::Write } else { Access::Read };
    // The sandbox's own mounts, which the model leaves out: the answer the argument check
    // gives too.
    if let Some(access) = tierbox_policy::validate::sandbox_access(&model, &plan.filesystem, path) {
        let allowed = access >= needed;
        let shm_none = path.starts_with(tierbox_policy::plan::DEV_SHM)
            && plan.filesystem.dev_shm == tierbox_policy::DevShm::None;
        return PathVerdict {
            allowed,
            why: format!(
                "the sandbox provides it itself ({}), not a grant",
                match access {
                    Access::Write => "read-write",
                    Access::Read => "read-only",
                    Access::None => "absent: no tier passes a host device through",
                }
            ),
            fix: (!allowed && shm_none).then(|| "filesystem.dev_shm = \"private\"".to_owned()),
        };
    }
    match model.rule(path) {
        None => PathVerdict {
            allowed: false,
            why: "no grant covers it: it is absent for the run".to_owned(),
            fix: Some(format!(
                "filesystem.{} += \"{shown}\"",
                if write { "writable" } else { "read_only" }
            )),
        },
        Some((at, Rule::Deny)) if plan.filesystem.system_covers().iter().any(|c| c == at) => {
            PathVerdict {
                allowed: false,
                why: format!(
                    "{} is a host secret under a system path, hidden in every tier",
                    at.display()
                ),
                fix: None,
            }
        }
        Some((at, Rule::Deny)) => PathVerdict {
            allowed: false,
            why: format!(
                "{} hides it (a denial wins over every grant)",
                rule_text(Rule::Deny, at)
            ),
            fix: Some(format!(
                "remove \"{}\" from filesystem.deny_read",
                at.display()
            )),
        },
        Some((at, rule)) => {
            let allowed = model.access(path) >= needed;
            let fix = match (allowed, rule) {
                (true, _) | (false, Rule::System) => None,
                (false, Rule::Protected) => Some(format!(
                    "remove \"{}\" from filesystem.protected",
                    at.display()
                )),
                (false, _) => Some(format!("filesystem.writable += \"{shown}\"")),
            };
            PathVerdict {
                allowed,
                why: format!("decided by {}", rule_text(rule, at)),
                fix,
            }
        }
    }
}

/// The rule `rule`, attached to `at`, in words.
fn rule_text(rule: tierbox_policy::access::Rule, at: &std::path::Path) -> String {
    use tierbox_policy::access::Rule;
    let at = at.display();
    match rule {
        Rule::System => format!("the system path {at} (read-only)"),
        Rule::Workspace => format!("the workspace {at} (read-write)"),
        Rule::Writable => format!("filesystem.writable \"{at}\""),
        Rule::ReadOnly => format!("filesystem.read_only \"{at}\""),
        Rule::Protected => format!("filesystem.protected \"{at}\" (read-only in the workspace)"),
        Rule::Deny => format!("filesystem.deny_read \"{at}\""),
    }
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
        LimitHit::Stdin => format!("{} bytes", l.stdin_bytes),
        LimitHit::Fuel | LimitHit::Table | LimitHit::Instances => return None,
    })
}

/// How each layer's denials reach the outcome on this run, or why they cannot (the
/// outcome's `enforcement.denial_reports`). `audit`: how the run's landlock and seccomp
/// denials were read (Tier B and C). `handed_off`: the run's filter handed its argument
/// rules' refusals to the supervisor, with how many were past the bound.
pub fn sources(
    plan: &Plan,
    tier: Tier,
    audit: Option<&tierbox_sandbox::contract::denials::RunAuditReport>,
    handed_off: Option<u64>,
) -> BTreeMap<DenialLayer, LayerReport> {
    let mut out = BTreeMap::new();
    out.insert(
        DenialLayer::Limits,
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
    out.insert(DenialLayer::Egress, egress);
    if tier != Tier::A {
        let layer = |read: Option<&Result<(), NotRecorded>>| match (read, audit) {
            (Some(Ok(())), Some(a)) => {
                let mut detail = format!(
                    "the kernel's audit records of the run's own audit session{}",
                    a.session.map(|s| format!(" ({s})")).unwrap_or_default()
                );
                if !a.report.complete {
                    detail.push_str(&format!(
                        "; incomplete: the kernel dropped records, or they did not arrive within {} ms of the run's end",
                        tierbox_sandbox::contract::denials::BARRIER_TIMEOUT.as_millis()
                    ));
                }
                if a.report.dropped > 0 {
                    detail.push_str(&format!(
                        "; {} more refusals past the first {} were not listed",
                        a.report.dropped,
                        tierbox_sandbox::contract::denials::MAX_REFUSALS_PER_RUN
                    ));
                }
                LayerReport::applied(detail)
            }
            (Some(Err(why)), _) => LayerReport::missing(why.to_string()),
            _ => LayerReport::missing("not recorded"),
        };
        out.insert(DenialLayer::Landlock, layer(audit.map(|a| &a.landlock)));
        let mut seccomp = layer(audit.map(|a| &a.seccomp));
        if let Some(dropped) = handed_off {
            let mut argued = format!(
                "the argument rules' refusals (socket families and types, ioctl requests, clone and unshare namespace flags, personality, MSG_FASTOPEN) with their arguments, handed to the supervisor by the filter{}",
                if dropped > 0 {
                    format!(
                        " ({dropped} past the first {} not listed)",
                        tierbox_sandbox::contract::denials::MAX_REFUSALS_PER_RUN
                    )
                } else {
                    String::new()
                }
            );
            argued.push_str(&match audit.map(|a| &a.seccomp) {
                _ if seccomp.applied => format!("; every other refusal from {}", seccomp.detail),
                Some(Err(why)) => format!("; other refusals not recorded: {}", why.reason()),
                _ => "; other refusals not recorded".to_owned(),
            });
            seccomp = LayerReport::applied(argued);
        }
        out.insert(DenialLayer::Seccomp, seccomp);
    }
    if tier == Tier::C {
        let mounts = match audit.map(|a| (&a.files, a)) {
            Some((Ok(()), a)) => {
                let mut detail = format!(
                    "the kernel's audit records of the run's file calls that failed with ENOENT or EROFS (rules for its audit session{}, audit.file_refusals), kept where the path (or the directory it was created in) exists on the host and no grant gives the access",
                    a.session.map(|s| format!(" {s}")).unwrap_or_default()
                );
                if !a.report.complete {
                    detail.push_str(
                        "; incomplete: the kernel dropped records, or they did not arrive in time",
                    );
                }
                if a.report.files_dropped > 0 {
                    detail.push_str(&format!(
                        "; {} more failed paths past the first {} were not checked",
                        a.report.files_dropped,
                        tierbox_sandbox::contract::denials::MAX_FILE_FAILURES_PER_RUN
                    ));
                }
                LayerReport::applied(detail)
            }
            Some((Err(why), _)) => LayerReport::missing(why.to_string()),
            None => LayerReport::missing("not recorded"),
        };
        out.insert(DenialLayer::Mounts, mounts);
    }
    out
}

/// [`sources`] for a Tier A run: its limits are recorded; a guest's access outside its
/// grants does not exist for it (WASI answers `ENOENT`/`EBADF`), so there is nothing to
/// refuse there.
pub fn tier_a_sources(network: bool) -> BTreeMap<DenialLayer, LayerReport> {
    let mut out = BTreeMap::new();
    out.insert(
        DenialLayer::Limits,
        LayerReport::applied(
            "the runtime's limits: fuel, memory, tables, instances, deadline, output",
        ),
    );
    if network {
        out.insert(
            DenialLayer::Egress,
            LayerReport::applied(
                "the host's checks of the guest's name lookups and socket addresses (grants.network)",
            ),
        );
    }
    out
}

/// The denials of a Tier A run's network ([`tierbox_wasm::NetReport::refused`]): each
/// refused lookup and connect, with the grant that would allow it; listening, accepting
/// and UDP, which no grant allows.
///
/// ```
/// use tierbox_runner::denials::of_tier_a_network;
///
/// let mut report = tierbox_wasm::NetReport::default();
/// report.refused.insert("connect 10.0.0.1:80".to_owned(), 2);
/// let d = &of_tier_a_network(&report)[0];
/// assert_eq!((d.operation.as_str(), d.target.as_str(), d.count), ("connect", "10.0.0.1:80", 2));
/// assert!(d.hint.contains("grants.network += \"10.0.0.1:80\""));
/// ```
pub fn of_tier_a_network(report: &tierbox_wasm::NetReport) -> Vec<Denial> {
    report
        .refused
        .iter()
        .map(|(key, count)| {
            let (operation, target) = key.split_once(' ').unwrap_or((key.as_str(), ""));
            let hint = match operation {
                "lookup" => format!(
                    "grants.network += \"{target}:PORT\" in the request, for a host the policy's egress.allow allows: a component resolves only granted names"
                ),
                "connect" => format!(
                    "grants.network += \"{target}\" in the request, for a host the policy's egress.allow allows (an address in a special range needs an egress.allow address entry)"
                ),
                _ => "not allowed by any policy: a tier a component may only open tcp connections to granted hosts (no listening, accepting or udp)".to_owned(),
            };
            Denial {
                layer: DenialLayer::Egress,
                operation: operation.to_owned(),
                target: target.to_owned(),
                count: *count,
                first_ms: None,
                hint,
            }
        })
        .collect()
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
            request: None,
            bytes_sent: 0,
            bytes_received: 0,
        }
    }

    /// A request a terminated host's rules refused is a denial per request, whose hint
    /// is the rule to add (the proxy's own sentence after `to allow:`).
    #[test]
    fn a_refused_request_names_itself_and_the_rule_that_allows_it() {
        let mut refused = decision("api.test", 443, Verdict::RequestRefused);
        refused.message = "egress denied: DELETE /repos/o/r to api.test is not allowed by its request rules; to allow: add \"DELETE /repos/o/r\" to egress.hosts.\"api.test\".allow".to_owned();
        refused.request = Some("DELETE /repos/o/r".to_owned());
        let mut other = refused.clone();
        other.request = Some("PUT /x".to_owned());
        let log = EgressLog {
            credentials_used: BTreeMap::new(),
            decisions: vec![refused.clone(), refused, other],
            dropped: 0,
        };
        let denials = of_run(Some(&log), None);
        assert_eq!(denials.len(), 2, "{denials:?}");
        let d = denials
            .iter()
            .find(|d| d.target == "DELETE /repos/o/r on api.test:443")
            .unwrap();
        assert_eq!(d.count, 2);
        assert_eq!(
            d.hint,
            "add \"DELETE /repos/o/r\" to egress.hosts.\"api.test\".allow"
        );
    }

    #[test]
    fn egress_refusals_are_counted_once_each_with_their_fix_and_failures_are_not_denials() {
        let log = EgressLog {
            credentials_used: BTreeMap::new(),
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

    fn grants_plan(ws: &std::path::Path) -> Plan {
        tierbox_policy::validate::grants_plan(
            &tierbox_policy::Policy::builtin_default(),
            &tierbox_policy::ValidateContext::new(ws),
        )
        .unwrap()
    }

    #[test]
    fn audit_refusals_become_denials_with_the_smallest_fix() {
        use tierbox_sandbox::contract::denials::{AuditReport, Refusal, RefusalLayer};
        let rule = |name| tierbox_sandbox::contract::denials::refusal_rule(name).unwrap();
        let ws = tempfile::tempdir().unwrap();
        let plan = grants_plan(ws.path());
        let started = std::time::Instant::now();
        let refusal = |layer, operation: &str, target: &str| Refusal {
            layer,
            operation: operation.to_owned(),
            target: target.to_owned(),
            count: 2,
            first: started + std::time::Duration::from_millis(7),
        };
        let report = AuditReport {
            refusals: vec![
                refusal(RefusalLayer::Landlock, "read_file", "/srv/data/x"),
                refusal(RefusalLayer::Landlock, "write_file,truncate", "/srv/out"),
                refusal(RefusalLayer::Landlock, "make_reg", "/etc"),
                refusal(RefusalLayer::Landlock, "connect_tcp", "10.0.0.1:443"),
                refusal(RefusalLayer::Landlock, "signal", "pid 1 (init)"),
                // As the audit records give them: the rule is the target.
                refusal(RefusalLayer::Seccomp, "ptrace", rule("ptrace")),
                refusal(RefusalLayer::Seccomp, "socket", rule("socket")),
                // As the filter hands them off: the arguments are.
                refusal(RefusalLayer::Seccomp, "socket", "AF_UNIX, SOCK_STREAM"),
                refusal(RefusalLayer::Seccomp, "socket", "AF_INET, SOCK_STREAM"),
                refusal(RefusalLayer::Seccomp, "socket", "AF_INET6, SOCK_DGRAM"),
                refusal(RefusalLayer::Seccomp, "socket", "AF_NETLINK, SOCK_RAW"),
                refusal(RefusalLayer::Seccomp, "unshare", "CLONE_NEWUSER"),
                refusal(RefusalLayer::Seccomp, "sendto", "MSG_FASTOPEN"),
                // Tier C's file refusals: a hidden path, a read-only mount.
                refusal(RefusalLayer::Mount, "read", "/srv/data/y"),
                refusal(RefusalLayer::Mount, "write", "/srv/out2"),
                refusal(RefusalLayer::Mount, "create", "/etc"),
            ],
            dropped: 0,
            complete: true,
            files_dropped: 0,
        };
        let d = of_refusals_with(&plan, &report.refusals, started, &|| Ok(()));
        let got: Vec<(&str, &str)> = d
            .iter()
            .map(|d| (d.operation.as_str(), d.hint.as_str()))
            .collect();
        assert_eq!(got[0], ("read", r#"filesystem.read_only += "/srv/data/x""#));
        assert_eq!(
            got[1],
            ("write,truncate", r#"filesystem.writable += "/srv/out""#)
        );
        assert_eq!(got[2].0, "make-reg");
        assert!(
            got[2]
                .1
                .starts_with("not allowed by any policy: decided by the system path /etc"),
            "{}",
            got[2].1
        );
        assert!(got[3].1.contains("egress.allow"), "{}", got[3].1);
        assert!(
            got[4].1.starts_with("not allowed by any policy"),
            "{}",
            got[4].1
        );
        assert_eq!(
            got[5],
            (
                "ptrace",
                format!("not allowed by any policy: {}", rule("ptrace")).as_str()
            )
        );
        let proxy = "egress.mode = \"strict\" with egress.allow += \"HOST:PORT\": outbound TCP to the hosts listed, through the egress proxy";
        assert!(got[6].1.starts_with(proxy), "{}", got[6].1);
        // A unix socket: the request's Tier C, which runs here (the closure says), not
        // allow_all.
        assert!(
            got[7]
                .1
                .starts_with("tier = \"c\" in the request (--tier c)"),
            "{}",
            got[7].1
        );
        assert!(!got[7].1.contains("allow_all"), "{}", got[7].1);
        assert!(got[7].1.ends_with(NAME_SERVICE_NOTE), "{}", got[7].1);
        assert_eq!(got[8].1, proxy);
        let preflight = "egress.mode = \"preflight\": inet sockets of every kind";
        assert!(got[9].1.starts_with(preflight), "{}", got[9].1);
        assert!(!got[9].1.contains("allow_all"), "{}", got[9].1);
        assert_eq!(
            got[10].1,
            format!("not allowed by any policy: {}", rule("socket"))
        );
        assert_eq!(
            got[11].1,
            format!("not allowed by any policy: {}", rule("unshare"))
        );
        assert!(got[12].1.starts_with(preflight), "{}", got[12].1);
        assert_eq!(
            got[13],
            ("read", r#"filesystem.read_only += "/srv/data/y""#)
        );
        assert_eq!(got[14], ("write", r#"filesystem.writable += "/srv/out2""#));
        assert!(
            got[15]
                .1
                .starts_with("not allowed by any policy: decided by the system path /etc"),
            "{}",
            got[15].1
        );
        assert!(d[13..].iter().all(|d| d.layer == DenialLayer::Mounts));
        assert!(d.iter().all(|d| d.count == 2 && d.first_ms == Some(7)));
        assert_eq!(d[0].layer, DenialLayer::Landlock);
        assert_eq!(d[5].layer, DenialLayer::Seccomp);
    }

    /// Regression: every Tier B program that looked a user or a host up (`id`, `ls -l`,
    /// `curl`) was told `to allow: egress.mode = "allow_all"` for the unix socket libc's
    /// name service tries, and a TCP socket with its protocol named (`curl` to an address)
    /// got the same: the widest mode where a narrower key lets it through.
    #[test]
    fn socket_hints_name_the_narrowest_key_and_allow_all_only_when_nothing_narrower_does() {
        let hint = |mode, target: &str, tier_c: &dyn Fn() -> Result<(), Rejection>| {
            seccomp_hint(
                mode,
                "socket",
                tierbox_sandbox::contract::denials::refusal_rule("socket").unwrap(),
                target,
                tier_c,
            )
        };
        let runs = || Ok(());
        let absent = || {
            Err(Rejection::TierUnavailable {
                tier: tierbox_policy::Tier::C,
                reason: "user namespaces are disabled".to_owned(),
            })
        };
        for mode in [EgressMode::BlockAll, EgressMode::Strict] {
            let h = hint(mode, "AF_UNIX, SOCK_STREAM", &runs);
            assert!(h.starts_with("tier = \"c\" in the request"), "{h}");
            assert!(!h.contains("allow_all"), "{h}");
            let h = hint(mode, "AF_UNIX, SOCK_DGRAM", &absent);
            assert!(h.starts_with("egress.mode = \"allow_all\""), "{h}");
            assert!(h.contains("user namespaces are disabled"), "{h}");
        }
        // Tier C carries no preflight: allow_all is the only key, said so.
        let h = hint(EgressMode::Preflight, "AF_UNIX, SOCK_STREAM", &runs);
        assert!(h.starts_with("egress.mode = \"allow_all\""), "{h}");
        assert!(h.contains("no host network for preflight"), "{h}");
        // TCP, its protocol named or not, goes through the proxy; the rest of inet is
        // preflight's.
        let proxy = "egress.mode = \"strict\" with egress.allow += \"HOST:PORT\"";
        for target in [
            "AF_INET, SOCK_STREAM",
            "AF_INET, SOCK_STREAM, protocol 6 (TCP)",
            "AF_INET6, SOCK_STREAM",
        ] {
            let h = hint(EgressMode::BlockAll, target, &absent);
            assert!(h.starts_with(proxy), "{target}: {h}");
        }
        for target in [
            "AF_INET, SOCK_DGRAM",
            "AF_INET6, SOCK_RAW",
            "AF_INET, SOCK_STREAM, protocol 262 (MPTCP)",
        ] {
            let h = hint(EgressMode::Strict, target, &absent);
            assert!(
                h.starts_with("egress.mode = \"preflight\""),
                "{target}: {h}"
            );
            assert!(!h.contains("allow_all"), "{target}: {h}");
        }
        // Tier C is asked once, and only for a unix socket.
        let ws = tempfile::tempdir().unwrap();
        let plan = grants_plan(ws.path());
        let asked = std::cell::Cell::new(0);
        let counting = || {
            asked.set(asked.get() + 1);
            Ok(())
        };
        let started = std::time::Instant::now();
        let refusal = |target: &str| tierbox_sandbox::contract::denials::Refusal {
            layer: tierbox_sandbox::contract::denials::RefusalLayer::Seccomp,
            operation: "socket".to_owned(),
            target: target.to_owned(),
            count: 1,
            first: started,
        };
        let inet = [refusal("AF_INET, SOCK_DGRAM")];
        of_refusals_with(&plan, &inet, started, &counting);
        assert_eq!(asked.get(), 0);
        let both = [
            refusal("AF_UNIX, SOCK_STREAM"),
            refusal("AF_UNIX, SOCK_DGRAM"),
        ];
        of_refusals_with(&plan, &both, started, &counting);
        assert_eq!(asked.get(), 1);
    }

    #[test]
    fn only_denials_that_may_explain_the_end_are_worth_naming() {
        let seccomp = |target: &str| Denial {
            layer: DenialLayer::Seccomp,
            operation: "socket".to_owned(),
            target: target.to_owned(),
            count: 1,
            first_ms: None,
            hint: String::new(),
        };
        let unix = seccomp("AF_UNIX, SOCK_STREAM");
        let udp = seccomp("AF_INET, SOCK_DGRAM");
        let ptrace = Denial {
            operation: "ptrace".to_owned(),
            ..seccomp("")
        };
        let limit = of_run(None, Some((LimitHit::Memory, false, None))).remove(0);
        let all = [unix.clone(), udp.clone(), ptrace.clone(), limit];
        // Succeeded: no socket it tried matters; what else it was refused does.
        assert_eq!(worth_naming(&all, true), [&ptrace]);
        // Failed: the sockets may explain it, the unix one only when alone.
        assert_eq!(worth_naming(&all, false), [&udp, &ptrace]);
        assert_eq!(worth_naming(&all[..1], false), [&unix]);
        assert!(worth_naming(&all[3..], false).is_empty());
    }

    #[test]
    fn unread_layers_are_said_to_be_so_with_the_reason() {
        let ws = tempfile::tempdir().unwrap();
        let plan = grants_plan(ws.path());
        let audit = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(
                tierbox_sandbox::contract::denials::RunAudit::not_recorded(
                    "no landlock here",
                    "no filter here",
                )
                .finish(),
            );
        let r = sources(&plan, Tier::B, Some(&audit), None);
        assert!(!r[&DenialLayer::Landlock].applied);
        assert_eq!(
            r[&DenialLayer::Landlock].detail,
            "not recorded: no landlock here"
        );
        assert_eq!(
            r[&DenialLayer::Seccomp].detail,
            "not recorded: no filter here"
        );
        assert!(r[&DenialLayer::Limits].applied);
        assert!(!sources(&plan, Tier::A, None, None).contains_key(&DenialLayer::Landlock));
        // Tier C's file refusals: off unless the policy asks, and said so with the key.
        assert!(!r.contains_key(&DenialLayer::Mounts));
        let c = sources(&plan, Tier::C, Some(&audit), None);
        assert!(!c[&DenialLayer::Mounts].applied);
        assert_eq!(
            c[&DenialLayer::Mounts].detail,
            NotRecorded::FilesNotAsked.to_string()
        );
        assert!(
            c[&DenialLayer::Mounts]
                .detail
                .contains("audit.file_refusals = true")
        );
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
            credentials_used: BTreeMap::new(),
            decisions: (0..200)
                .map(|i| decision(&format!("h{i}.example"), 443, Verdict::NotAllowlisted))
                .collect(),
            dropped: 0,
        };
        assert_eq!(of_run(Some(&log), None).len(), MAX_DENIALS);
    }
}
