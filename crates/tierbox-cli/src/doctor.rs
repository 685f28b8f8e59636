//! `tierbox doctor`: what this host can enforce, and how to fix what it cannot.

use std::process::ExitCode;

use anyhow::Result;
use tierbox_policy::{Policy, Tier, TierCBackend};
use tierbox_runner::host::{Engine, host_facts, probe_engine_cached, tier_available};

/// `tierbox doctor` for the built-in policy.
pub fn run(json: bool) -> Result<ExitCode> {
    run_with_policy(
        json,
        &Policy::builtin_default(),
        "the built-in strict policy",
    )
}

/// The container engines' status: `(engine, Ok(detail) | Err(reason))`.
fn engines() -> Vec<(Engine, Result<String, String>)> {
    [Engine::Docker, Engine::Podman]
        .into_iter()
        .map(|e| {
            let status = probe_engine_cached(e)
                .map(|info| format!("{} at {}", info.detail, info.path.display()))
                .map_err(|err| err.to_string());
            (e, status)
        })
        .collect()
}

/// Longest a canary run may take, in milliseconds: a backend that cannot start `true`
/// in this time is reported unavailable (a healthy one takes a few milliseconds).
pub const CANARY_TIMEOUT_MS: u64 = 10_000;

/// The result of a Tier C backend's canary run: `Ok(milliseconds)` when `true` ran in it
/// and exited 0, `Err(what went wrong)` otherwise.
type Canary = Result<u64, String>;

/// Runs `true` through the Tier C `backend` as a real run would (through the runner, in a
/// throwaway workspace and state directory), under `policy` with only `true` allowed;
/// bwrap and the container engines apply no landlock layer, so it is accepted as missing
/// for them. A backend is called available only when this exits 0: the namespaces, mounts,
/// seccomp filter and the sandbox's pid 1 all worked on this host.
fn canary(policy: &Policy, backend: TierCBackend) -> Canary {
    canary_in(policy, backend, tierbox_policy::WorkspaceMode::Direct)
}

/// [`canary`] with the workspace seen in `mode`.
fn canary_in(
    policy: &Policy,
    backend: TierCBackend,
    mode: tierbox_policy::WorkspaceMode,
) -> Canary {
    let mut policy = policy.clone();
    policy.workspace.mode = mode;
    policy.tier.backend = backend;
    policy.exec.allowed_executables = vec!["true".to_owned()];
    policy.limits.timeout_ms = CANARY_TIMEOUT_MS.min(policy.limits.max_timeout_ms);
    if backend != TierCBackend::Native {
        policy
            .tier
            .optional_layers
            .push(tierbox_policy::Layer::Landlock);
    }
    let ws = tempfile::Builder::new()
        .prefix("tierbox-canary-")
        .tempdir()
        .map_err(|e| format!("a workspace for the canary: {e}"))?;
    let state = tempfile::Builder::new()
        .prefix("tierbox-canary-state-")
        .tempdir()
        .map_err(|e| format!("a state directory for the canary: {e}"))?;
    let runner = crate::new_runner(policy)
        .with_workspace(ws.path())
        .with_options(tierbox_runner::RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    let mut request = tierbox_policy::ProcessRunRequest::new("true");
    request.tier = tierbox_policy::TierRequest::C;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("the async runtime: {e}"))?;
    let started = std::time::Instant::now();
    let outcome = rt
        .block_on(runner.run(&request))
        .map_err(|e| format!("canary `true` failed: {e}"))?;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Some(failure) = &outcome.sandbox_failure {
        return Err(format!("canary `true` failed: {failure}"));
    }
    if outcome.exit_code != Some(0) {
        let status = match (outcome.exit_code, &outcome.signal_name) {
            (Some(code), _) => format!("exited {code}"),
            (None, Some(sig)) => format!("was killed by {sig}"),
            (None, None) => "ended without a status".to_owned(),
        };
        return Err(format!(
            "canary `true` {status} instead of exiting 0{}",
            match outcome.stderr.text.trim() {
                "" => String::new(),
                err => format!(": {err}"),
            }
        ));
    }
    Ok(ms)
}

/// The canaries of the Tier C backends this host has, for `policy`: native and bwrap when
/// their probes pass, a container engine when it is reachable and the policy names an
/// image.
fn canaries(
    policy: &Policy,
    engines: &[(Engine, Result<String, String>)],
) -> Vec<(TierCBackend, Canary)> {
    let mut out = Vec::new();
    if tierbox_runner::host::probe_userns_cached()
        .reason()
        .is_none()
    {
        out.push((TierCBackend::Native, canary(policy, TierCBackend::Native)));
    }
    if tierbox_runner::host::probe_bwrap_cached().is_ok() {
        out.push((TierCBackend::Bwrap, canary(policy, TierCBackend::Bwrap)));
    }
    if policy.tier.container.image.is_some() {
        for (engine, status) in engines {
            if status.is_ok() {
                let backend = engine.backend();
                out.push((backend, canary(policy, backend)));
            }
        }
    }
    out
}

/// `tierbox doctor`, also saying which Tier C backend `policy` (described by `source`)
/// selects and whether this host can run it.
pub fn run_with_policy(json: bool, policy: &Policy, source: &str) -> Result<ExitCode> {
    let report = Report::gather(policy, source);
    if json {
        report.print_json()?;
    } else {
        report.print_text();
    }
    Ok(ExitCode::SUCCESS)
}

/// What a run of `policy` gets on this host: the tier (and Tier C backend) `run` would
/// select for its grants in its workspace (the policy's `workspace_root`, else the current
/// directory), or the rejection it would give.
fn runs_in(policy: &Policy) -> Result<String, String> {
    let runner = crate::new_runner(policy.clone());
    let plan = runner.check_grants().map_err(|rej| {
        format!(
            "not checked in {}: [{}] {rej}",
            runner.workspace().display(),
            rej.code()
        )
    })?;
    match tierbox_runner::host::select_tier_passing_over(&plan) {
        Ok((tierbox_policy::Tier::C, _)) => Ok(format!("tier c, backend {}", policy.tier.backend)),
        Ok((tier, None)) => Ok(format!("tier {tier}")),
        Ok((tier, Some(why))) => Ok(format!("tier {tier}; passed over: {why}")),
        Err(rej) => Err(format!("[{}] {rej}", rej.code())),
    }
}

/// Review mode on this host: whether the native backend mounts an overlay workspace
/// (its canary), whether the installed bwrap has overlay options (unused: Tierbox refuses
/// overlay mode there, see docs/review-mode.md), and the change sets kept against the
/// policy's caps.
struct ReviewReport {
    native: Canary,
    bwrap_overlay: Option<bool>,
    usage: tierbox_runner::review::StoreUsage,
    caps: tierbox_policy::KeepCaps,
    dir: std::path::PathBuf,
}

impl ReviewReport {
    fn gather(policy: &Policy, state_dir: &std::path::Path) -> Self {
        let native = match tierbox_runner::host::probe_userns_cached().reason() {
            None => canary_in(
                policy,
                TierCBackend::Native,
                tierbox_policy::WorkspaceMode::Overlay,
            ),
            Some(reason) => Err(format!("user namespaces: {reason}")),
        };
        let bwrap_overlay = tierbox_runner::host::probe_bwrap_cached().ok().map(|_| {
            std::process::Command::new("bwrap")
                .arg("--help")
                .output()
                .is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout).contains("--overlay-src")
                        || String::from_utf8_lossy(&o.stderr).contains("--overlay-src")
                })
        });
        let store = tierbox_runner::review::ChangeStore::new(state_dir);
        store.sweep();
        Self {
            native,
            bwrap_overlay,
            usage: store.usage(),
            caps: policy.workspace.keep_caps(),
            dir: state_dir.join(tierbox_runner::review::CHANGES_DIR),
        }
    }

    /// The owner whose kept sets take the most bytes, with what they take.
    fn largest_owner(&self) -> Option<(&str, tierbox_runner::review::Usage)> {
        self.usage
            .by_owner
            .iter()
            .max_by_key(|(_, u)| u.bytes)
            .map(|(o, u)| (o.as_str(), *u))
    }

    fn text(&self) -> String {
        let native = match &self.native {
            Ok(ms) => format!("tier c native yes (canary {ms} ms)"),
            Err(why) => format!("tier c native no ({why})"),
        };
        let bwrap = match self.bwrap_overlay {
            Some(true) => "; bwrap has --overlay-src, unused (no size limit on its upper layer)",
            Some(false) => "; bwrap has no --overlay-src (0.10+)",
            None => "",
        };
        let (u, c) = (self.usage.total, self.caps);
        let owner = match self.largest_owner() {
            Some((o, ou)) => format!(
                "; most by one owner ({}): {} of {} bytes, {} of {} entries",
                crate::render::neutralize(o),
                ou.bytes,
                c.per_owner_bytes,
                ou.entries,
                c.per_owner_entries
            ),
            None => format!(
                "; per owner at most {} bytes, {} entries",
                c.per_owner_bytes, c.per_owner_entries
            ),
        };
        format!(
            "overlay mode: {native}{bwrap}; {} kept change set(s): {} of {} bytes, {} of {} entries (workspace.keep_changes_total_*){owner}, in {}",
            self.usage.sets,
            u.bytes,
            c.total_bytes,
            u.entries,
            c.total_entries,
            self.dir.display()
        )
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "overlay_tier_c_native": self.native.is_ok(),
            "overlay_reason": self.native.as_ref().err(),
            "bwrap_overlay_options": self.bwrap_overlay,
            "kept_change_sets": self.usage.sets,
            "kept_bytes": self.usage.total.bytes,
            "kept_entries": self.usage.total.entries,
            "kept_by_owner": self.usage.by_owner,
            "kept_caps": self.caps,
            "dir": self.dir,
        })
    }
}

/// The spill files of the state directory ([`tierbox_runner::spill`]): what they hold
/// once the expired ones are removed, against the policy's cap and lifetime.
struct SpillReport {
    /// What is left, or why the directory cannot be used.
    usage: Result<tierbox_runner::spill::SpillUsage, String>,
    /// Expired files this report removed.
    removed: usize,
    keep_secs: u64,
    total_bytes: u64,
    dir: std::path::PathBuf,
}

impl SpillReport {
    fn gather(policy: &Policy, state_dir: &std::path::Path) -> Self {
        let (keep_secs, total_bytes) = (
            policy.output.spill_keep_secs,
            policy.output.spill_total_bytes,
        );
        let (usage, removed) = match tierbox_runner::spill::SpillDir::open_existing(state_dir) {
            Ok(Some(dir)) => {
                let removed = dir.sweep(std::time::Duration::from_secs(keep_secs));
                (Ok(dir.usage()), removed)
            }
            Ok(None) => (Ok(tierbox_runner::spill::SpillUsage::default()), 0),
            Err(e) => (Err(e.to_string()), 0),
        };
        Self {
            usage,
            removed,
            keep_secs,
            total_bytes,
            dir: state_dir.join(tierbox_runner::spill::SPILL_DIR),
        }
    }

    /// Seconds since `unix_secs`.
    fn age(unix_secs: u64) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .saturating_sub(unix_secs)
    }

    fn text(&self) -> String {
        let usage = match &self.usage {
            Ok(u) => u,
            Err(why) => return format!("unusable: {why}"),
        };
        let oldest = usage
            .oldest_unix_secs
            .map(|t| format!(", the oldest written {} s ago", Self::age(t)))
            .unwrap_or_default();
        let removed = match self.removed {
            0 => String::new(),
            n => format!("; {n} expired file(s) removed now"),
        };
        format!(
            "{} file(s), {} of {} bytes (output.spill_total_bytes){oldest}; each kept {} s after its last write (output.spill_keep_secs){removed}, in {}",
            usage.files,
            usage.bytes,
            self.total_bytes,
            self.keep_secs,
            self.dir.display()
        )
    }

    fn json(&self) -> serde_json::Value {
        let usage = self.usage.as_ref().ok();
        serde_json::json!({
            "files": usage.map(|u| u.files),
            "bytes": usage.map(|u| u.bytes),
            "oldest_unix_secs": usage.and_then(|u| u.oldest_unix_secs),
            "oldest_age_secs": usage.and_then(|u| u.oldest_unix_secs).map(Self::age),
            "removed_expired": self.removed,
            "spill_total_bytes": self.total_bytes,
            "spill_keep_secs": self.keep_secs,
            "dir": self.dir,
            "error": self.usage.as_ref().err(),
        })
    }
}

/// Where `egress.mode = "strict"` with an allowlist can be enforced.
struct StrictEgress {
    tier_b: bool,
    tier_c: bool,
    /// bwrap starts in a namespace the supervisor makes, which takes root.
    tier_c_bwrap: bool,
    /// The host's trust store that terminated hosts' upstreams are verified against (and
    /// that the sandbox's bundle starts with), or why there is none.
    trust_store: Result<std::path::PathBuf, tierbox_egress::tls::TrustError>,
}

impl StrictEgress {
    /// What `doctor` says of terminated hosts (`egress.hosts`, `egress.credentials`):
    /// text, and JSON.
    fn termination(&self) -> (String, serde_json::Value) {
        let store = self.trust_store.as_ref();
        let ok = store.is_ok();
        let json = serde_json::json!({
            "trust_store": store.ok(),
            "trust_store_missing": store.err().map(ToString::to_string),
            "rules": {
                "tier_b": ok && self.tier_b,
                "tier_c_native": ok && self.tier_c,
                "tier_c_bwrap": ok && self.tier_c_bwrap,
            },
            "credentials": {
                "tier_c_native": ok && self.tier_c,
                "tier_c_bwrap": ok && self.tier_c_bwrap,
            },
        });
        let text = match store {
            Ok(path) => format!(
                "terminated hosts (egress.hosts, egress.credentials): upstreams verified against {}; request rules where strict egress runs, credentials in tier c only (tier b's proxy is on the host's loopback)",
                path.display()
            ),
            Err(why) => {
                format!("terminated hosts (egress.hosts, egress.credentials): refused here, {why}")
            }
        };
        (text, json)
    }
}

impl StrictEgress {
    /// What `doctor` says of published ports and host ports (`egress.publish`,
    /// `egress.host_ports`): text, and JSON. Native publishing joins the sandbox's
    /// network namespace (`CAP_SYS_ADMIN`), or has a helper that joined the sandbox's
    /// user namespace make the sockets; bwrap starts in the supervisor's (root).
    fn reach(&self) -> (String, serde_json::Value) {
        let join = tierbox_runner::host::supervisor_can_join_namespaces();
        let json = serde_json::json!({
            "host_ports": { "tier_c_native": self.tier_c, "tier_c_bwrap": self.tier_c_bwrap },
            "publish": {
                "tier_c_native": self.tier_c,
                "tier_c_bwrap": self.tier_c_bwrap,
                "native_sockets_by": if join { "a thread that joins the namespace" } else { "a helper in the sandbox's user namespace" },
            },
            "unix_sockets": {
                "tier_c_native": self.tier_c,
                "tier_c_bwrap": self.tier_c_bwrap,
                "tier_b": false,
            },
            // Tier A needs nothing from the kernel for its network grant: the host checks
            // every lookup and connect of the component.
            "tier_a_network": true,
        });
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let text = format!(
            "host ports (egress.host_ports): tier c native {}, tier c bwrap {}; published ports (egress.publish, on 127.0.0.1 only): tier c native {}{}, tier c bwrap {}; host unix sockets (egress.unix_sockets, bound into the sandbox): tier c native {}, tier c bwrap {}; tier b never (landlock before ABI 9 cannot limit which sockets a program connects to); tier a components: tcp to grants.network hosts (held to egress.allow, resolved once)",
            yes_no(self.tier_c),
            yes_no(self.tier_c_bwrap),
            yes_no(self.tier_c),
            if join || !self.tier_c {
                ""
            } else {
                " (through a helper in the sandbox's user namespace)"
            },
            yes_no(self.tier_c_bwrap),
            yes_no(self.tier_c),
            yes_no(self.tier_c_bwrap),
        );
        (text, json)
    }
}

/// Everything `doctor` found, before it is printed.
struct Report<'a> {
    source: &'a str,
    summary: tierbox_runner::host::HostSummary,
    userns_reason: Option<String>,
    engines: Vec<(Engine, Result<String, String>)>,
    tiers: Vec<serde_json::Value>,
    identity_text: String,
    identity_json: serde_json::Value,
    backend: TierCBackend,
    /// Whether this host can run the policy's Tier C backend (its canary included).
    backend_status: Result<(), String>,
    /// What a run of this policy gets here, as `run` selects it (`auto`'s fallback
    /// included): the tier and backend, or the rejection.
    runs_in: Result<String, String>,
    strict: StrictEgress,
    review: ReviewReport,
    spill: SpillReport,
    /// Whether landlock and seccomp denials can be read from the kernel's audit records
    /// here, or why not.
    denials: Result<(), tierbox_runner::host::NotRecorded>,
    /// Whether the seccomp argument rules' refusals are recorded with their arguments.
    seccomp_arguments: bool,
    hints: Vec<String>,
}

impl<'a> Report<'a> {
    fn gather(policy: &Policy, source: &'a str) -> Self {
        let facts = host_facts();
        let summary = facts.summary();
        let userns = tierbox_runner::host::probe_userns_cached();
        let engines = engines();
        let canaries = canaries(policy, &engines);
        let (identity_text, identity_json) = sandbox_identity(policy);
        let tiers = tier_reports(&summary, &engines, &canaries);
        let backend = policy.tier.backend;
        let backend_status = backend_status(backend, &engines, &canaries);
        let strict_tier_b = summary.seccomp && summary.landlock_abi.is_some_and(|a| a >= 4);
        let strict_tier_c = userns.reason().is_none();
        let strict = StrictEgress {
            tier_b: strict_tier_b,
            tier_c: strict_tier_c,
            tier_c_bwrap: strict_tier_c
                && tierbox_runner::host::host_facts().euid == 0
                && tierbox_runner::host::probe_bwrap_cached().is_ok(),
            trust_store: tierbox_egress::tls::system_store().map(std::path::Path::to_path_buf),
        };
        let runs_in = runs_in(policy);
        let state_dir = tierbox_runner::RunOptions::default().state_dir;
        let review = ReviewReport::gather(policy, &state_dir);
        let spill = SpillReport::gather(policy, &state_dir);
        let mut report = Self {
            source,
            summary,
            userns_reason: userns.reason().map(str::to_owned),
            engines,
            tiers,
            identity_text,
            identity_json,
            backend,
            backend_status,
            runs_in,
            strict,
            review,
            spill,
            denials: tierbox_runner::host::denial_audit(),
            seccomp_arguments: tierbox_runner::host::seccomp_arguments_recorded(),
            hints: Vec::new(),
        };
        report.hints = report.hints();
        report
    }

    /// What to do about each thing this host lacks.
    fn hints(&self) -> Vec<String> {
        let (summary, identity_json) = (&self.summary, &self.identity_json);
        let (source, backend) = (self.source, self.backend);
        let mut hints = Vec::new();
        if let Err(reason) = &self.backend_status {
            hints.push(format!(
                "tier c: {source} selects tier.backend = \"{backend}\", which this host cannot run ({reason}); tier c runs are rejected with tier.unavailable"
            ));
        }
        let runtimes = crate::wasm::runtimes_dir();
        let missing: Vec<&str> = crate::wasm::RUNTIMES
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| !runtimes.join(name).is_file())
            .collect();
        if !missing.is_empty() {
            hints.push(format!(
            "tier a: {} not in {}; run `tierbox wasm fetch-runtimes` to run python3 and qjs in tier a",
            missing.join(" and "),
            runtimes.display()
        ));
        }
        match summary.landlock_abi {
        None => hints.push("landlock: enable it (CONFIG_SECURITY_LANDLOCK=y and `landlock` in the lsm= boot parameter); without it tier b rejects runs".to_owned()),
        Some(abi) if abi < 6 => hints.push(format!("landlock ABI {abi}: signal and abstract-socket scoping need ABI 6 (Linux 6.12); add \"landlock_scopes\" to tier.optional_layers to accept this host")),
        Some(_) => {}
    }
        if identity_json["idmapped_mounts"]["work"] == false {
            hints.push(format!(
            "idmapped mounts: {}; a root supervisor runs tier c as an unprivileged host uid and needs them for a workspace that uid does not own (Linux 5.12+ for ext4 and xfs, 5.15+ for btrfs, 6.3+ for tmpfs); otherwise give the workspace an unprivileged owner, whose uid the sandbox then runs as",
            identity_json["idmapped_mounts"]["reason"].as_str().unwrap_or("unavailable")
        ));
        }
        if !summary.seccomp {
            hints.push("seccomp: the kernel refuses seccomp filters (CONFIG_SECCOMP_FILTER, or a container profile blocks seccomp(2))".to_owned());
        }
        if summary.cgroup_version.is_none() {
            hints.push(format!(
            "cgroups: {} — run the supervisor in a delegated cgroup v2 subtree (e.g. `systemd-run --user -p Delegate=yes --scope tierbox …`) or as root with cgroup v1; without it memory and process limits fall back to rlimits",
            summary.cgroup_detail
        ));
        }
        if let Some(reason) = &self.userns_reason {
            hints.push(format!(
                "user namespaces: {reason}; tier c needs them (tier b does not)"
            ));
        }
        if !self.strict.tier_b && !self.strict.tier_c {
            hints.push("egress: strict mode with an allowlist needs user namespaces (tier c) or landlock ABI 4 with seccomp (tier b); this host has neither, so such runs are rejected".to_owned());
        }
        hints
    }

    fn print_json(&self) -> Result<()> {
        let (summary, tiers, identity_json, hints) =
            (&self.summary, &self.tiers, &self.identity_json, &self.hints);
        let (source, backend, backend_status) = (self.source, self.backend, &self.backend_status);
        let (strict_tier_b, strict_tier_c, strict_tier_c_bwrap) = (
            self.strict.tier_b,
            self.strict.tier_c,
            self.strict.tier_c_bwrap,
        );
        let engines = &self.engines;
        let egress = serde_json::json!({
            "strict_allowlist": {
                "tier_c_native": strict_tier_c,
                "tier_c_bwrap": strict_tier_c_bwrap,
                "tier_b": strict_tier_b
            },
            "termination": self.strict.termination().1,
            "reach": self.strict.reach().1,
        });
        let containers: serde_json::Map<String, serde_json::Value> = engines
            .iter()
            .map(|(e, status)| {
                let v = match status {
                    Ok(detail) => serde_json::json!({ "reachable": true, "detail": detail }),
                    Err(reason) => serde_json::json!({ "reachable": false, "reason": reason }),
                };
                (e.to_string(), v)
            })
            .collect();
        let selected = serde_json::json!({
            "policy": source,
            "tier_c_backend": backend.to_string(),
            "available": backend_status.is_ok(),
            "reason": backend_status.as_ref().err(),
            "runs_in": self.runs_in.as_ref().ok(),
            "runs_in_refused": self.runs_in.as_ref().err(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "host": summary, "tiers": tiers, "egress": egress,
                "sandbox_identity": identity_json,
                "containers": containers, "selected_backend": selected,
                "review": self.review.json(),
                "spill": self.spill.json(),
                "denial_report": match &self.denials {
                    Ok(()) => serde_json::json!({
                        "landlock_and_seccomp": true,
                        "seccomp_arguments": self.seccomp_arguments,
                    }),
                    Err(why) => serde_json::json!({
                        "landlock_and_seccomp": false,
                        "reason": why.to_string(),
                        "seccomp_arguments": self.seccomp_arguments,
                    }),
                },
                "hints": hints
            }))?
        );
        Ok(())
    }

    fn print_text(&self) {
        let (summary, tiers, identity_text, hints) =
            (&self.summary, &self.tiers, &self.identity_text, &self.hints);
        let (source, backend, backend_status) = (self.source, self.backend, &self.backend_status);
        let (strict_tier_b, strict_tier_c, strict_tier_c_bwrap) = (
            self.strict.tier_b,
            self.strict.tier_c,
            self.strict.tier_c_bwrap,
        );
        let engines = &self.engines;
        let userns_reason = &self.userns_reason;
        println!("kernel      {}", summary.kernel);
        println!(
            "supervisor  {}",
            if summary.root {
                "root (children drop every capability)"
            } else {
                "unprivileged"
            }
        );
        println!(
            "landlock    {}",
            summary
                .landlock_abi
                .map_or("unavailable".to_owned(), |a| format!("ABI {a}"))
        );
        println!(
            "seccomp     {}",
            if summary.seccomp {
                "available"
            } else {
                "unavailable"
            }
        );
        println!("cgroup      {}", summary.cgroup_detail);
        println!("identity    tier c: {identity_text}");
        println!(
            "userns      {}",
            userns_reason
                .as_deref()
                .map_or("available".to_owned(), |r| format!("unavailable: {r}"))
        );
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        println!(
            "egress      strict with an allowlist (through the proxy): tier c native {}, tier c bwrap {}, tier b {}",
            yes_no(strict_tier_c),
            yes_no(strict_tier_c_bwrap),
            yes_no(strict_tier_b)
        );
        println!("tls         {}", self.strict.termination().0);
        println!("reach       {}", self.strict.reach().0);
        println!("review      {}", self.review.text());
        println!("spill       {}", self.spill.text());
        println!(
            "denials     egress and limits: recorded; seccomp's argument rules (socket family, ioctl request, namespace flags): {}; landlock and seccomp: {}",
            if self.seccomp_arguments {
                "recorded with their arguments in tier b and tier c (handed to the supervisor)"
            } else {
                "not handed off (no seccomp user notification)"
            },
            match &self.denials {
                Ok(()) => "recorded (kernel audit records, one audit session per run; the bwrap backend records seccomp only: it applies no landlock); tier c's hidden and read-only paths: recorded with audit.file_refusals = true (a kernel audit rule per run)".to_owned(),
                Err(why) => why.to_string(),
            }
        );
        for (e, status) in engines {
            match status {
                Ok(detail) => println!("{:<11} reachable: {detail}", e.to_string()),
                Err(reason) => println!("{:<11} {reason}", e.to_string()),
            }
        }
        println!(
            "backend     {source}: tier c backend \"{backend}\" — {}",
            match &backend_status {
                Ok(()) => "available".to_owned(),
                Err(reason) => format!("unavailable: {reason}"),
            }
        );
        match &self.runs_in {
            Ok(runs) => {
                println!("runs in     {runs} (a run of this policy here, as `run` selects it)")
            }
            Err(why) => println!("runs in     nothing: {why}"),
        }
        println!();
        for t in tiers {
            let tier = t["tier"].as_str().unwrap_or("?");
            if t["available"].as_bool().unwrap_or(false) {
                println!("tier {tier}      available");
            } else {
                println!(
                    "tier {tier}      unavailable: {}",
                    t["reason"].as_str().unwrap_or("")
                );
            }
            for b in t["backends"].as_array().into_iter().flatten() {
                let name = b["backend"].as_str().unwrap_or("?");
                match b["reason"].as_str() {
                    Some(reason) => println!("  {name:<22} unavailable: {reason}"),
                    None => println!(
                        "  {name:<22} {}",
                        b["layers"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|l| l.as_str())
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                }
            }
        }
        if !hints.is_empty() {
            println!();
            for h in hints {
                println!("hint: {h}");
            }
        }
    }
}

/// Each tier's availability on this host, with its backends (and their canary runs).
fn tier_reports(
    summary: &tierbox_runner::host::HostSummary,
    engines: &[(Engine, Result<String, String>)],
    canaries: &[(TierCBackend, Canary)],
) -> Vec<serde_json::Value> {
    let facts = host_facts();
    [Tier::C, Tier::B, Tier::A]
        .into_iter()
        .map(|t| {
            let mut v = match tier_available(t, facts) {
                // Tier A needs nothing from the kernel: it runs WASM, not host programs.
                _ if t == Tier::A => serde_json::json!({
                    "tier": "a", "available": true,
                    "note": "runs WASM modules and the interpreters the policy maps to WASI builds; native programs are refused"
                }),
                Ok(()) => serde_json::json!({ "tier": t.to_string(), "available": true }),
                Err(reason) => serde_json::json!({
                    "tier": t.to_string(), "available": false, "reason": reason.to_string()
                }),
            };
            v["backends"] = serde_json::Value::Array(backends(t, summary, engines, canaries));
            if t == Tier::C
                && v["available"] == true
                && !canaries.iter().any(|(_, c)| c.is_ok())
            {
                v["available"] = serde_json::Value::Bool(false);
                v["reason"] = serde_json::Value::String(
                    "no tier c backend passed its canary run (see backends)".to_owned(),
                );
            }
            v
        })
        .collect()
}

/// Whether this host can run `backend`: its probe, then its canary run (a backend that
/// probes well but cannot run `true` is not available either).
fn backend_status(
    backend: TierCBackend,
    engines: &[(Engine, Result<String, String>)],
    canaries: &[(TierCBackend, Canary)],
) -> Result<(), String> {
    let probed = match Engine::for_backend(backend) {
        Some(engine) => engines
            .iter()
            .find(|(e, _)| *e == engine)
            .map_or(Ok(()), |(_, s)| s.clone().map(|_| ())),
        None => match backend {
            TierCBackend::Bwrap => tierbox_runner::host::probe_bwrap_cached()
                .map(|_| ())
                .map_err(|e| e.to_string()),
            _ => tier_available(Tier::C, host_facts()).map_err(|e| e.to_string()),
        },
    };
    probed.and_then(|()| match canaries.iter().find(|(x, _)| *x == backend) {
        Some((_, Err(reason))) => Err(reason.clone()),
        _ => Ok(()),
    })
}

/// Who a Tier C sandbox of `policy` is on this host, and whether idmapped mounts work
/// here: one line of text and its JSON form.
fn sandbox_identity(policy: &Policy) -> (String, serde_json::Value) {
    use tierbox_runner::host::{SANDBOX_UID, probe_idmapped_mounts};
    let facts = host_facts();
    let tier = &policy.tier;
    if facts.euid != 0 {
        let text = format!(
            "uid {SANDBOX_UID} inside is the supervisor's own host uid {} (an unprivileged supervisor can map no other)",
            facts.euid
        );
        let v = serde_json::json!({
            "host_uid": facts.euid, "host_gid": facts.egid, "source": "supervisor",
            "idmapped_mounts": serde_json::Value::Null,
        });
        return (text, v);
    }
    if tier.danger_sandbox_as_supervisor {
        let text = format!(
            "uid {SANDBOX_UID} inside is HOST ROOT (tier.danger_sandbox_as_supervisor = true): every check on the host uid alone (global sysctls, root-owned files, SysV IPC, signals) treats the sandbox as root"
        );
        let v = serde_json::json!({
            "host_uid": 0, "host_gid": 0, "source": "tier.danger_sandbox_as_supervisor",
            "idmapped_mounts": serde_json::Value::Null,
        });
        return (text, v);
    }
    let ((default, default_gid), default_source) = tierbox_runner::host::root_workspace_ids();
    let (uid, uid_source) = match tier.sandbox_uid {
        Some(u) => (u.to_string(), "tier.sandbox_uid".to_owned()),
        None => (
            format!(
                "the workspace owner's, or {default} ({default_source}) when root owns the workspace"
            ),
            "workspace owner".to_owned(),
        ),
    };
    let idmap = probe_idmapped_mounts();
    let text = format!(
        "uid {SANDBOX_UID} inside runs as an unprivileged host uid: {uid}{}; writable grants owned by another uid are reached through idmapped mounts, which {}",
        tier.sandbox_gid
            .map_or(String::new(), |g| format!(" (gid {g})")),
        match &idmap {
            Ok(()) => format!("work here (tried in {})", std::env::temp_dir().display()),
            Err(reason) => format!(
                "do NOT work here ({reason}): tier c refuses a workspace or writable grant the sandbox's uid does not own, unless the policy sets tier.danger_sandbox_as_supervisor"
            ),
        }
    );
    let v = serde_json::json!({
        "host_uid": tier.sandbox_uid,
        "host_gid": tier.sandbox_gid,
        "default_host_id": default,
        "default_host_gid": default_gid,
        "default_source": default_source,
        "source": uid_source,
        "idmapped_mounts": match &idmap {
            Ok(()) => serde_json::json!({ "work": true }),
            Err(reason) => serde_json::json!({ "work": false, "reason": reason.to_string() }),
        },
    });
    (text, v)
}

/// The backends of `tier` on this host and the layers each applies.
fn backends(
    tier: Tier,
    summary: &tierbox_runner::host::HostSummary,
    engines: &[(Engine, Result<String, String>)],
    canaries: &[(TierCBackend, Canary)],
) -> Vec<serde_json::Value> {
    // The canary's verdict on a backend whose probe passed: its layers with the canary's
    // time, or unavailable with what went wrong.
    let checked = |backend: TierCBackend, mut v: serde_json::Value| -> serde_json::Value {
        match canaries.iter().find(|(b, _)| *b == backend).map(|(_, c)| c) {
            Some(Ok(ms)) => {
                if let Some(layers) = v["layers"].as_array_mut() {
                    layers.push(format!("canary: `true` exited 0 in {ms} ms").into());
                }
                v["canary_ms"] = (*ms).into();
                v
            }
            Some(Err(reason)) => serde_json::json!({
                "backend": backend.to_string(), "available": false, "reason": reason
            }),
            None if backend.is_container() && v["available"] == true => {
                if let Some(layers) = v["layers"].as_array_mut() {
                    layers.push("no canary run: the policy names no tier.container.image".into());
                }
                v
            }
            None => v,
        }
    };
    let landlock = summary
        .landlock_abi
        .map_or("landlock unavailable".to_owned(), |a| {
            format!("landlock ABI {a}")
        });
    let seccomp = if summary.seccomp {
        "seccomp deny-list filter"
    } else {
        "no seccomp"
    };
    let cgroup = summary
        .cgroup_version
        .as_deref()
        .map_or("no cgroup (rlimits only)".to_owned(), |v| {
            format!("cgroup {v} (memory, pids)")
        });
    let ids = if summary.root {
        "uid 1000 inside on an unprivileged host uid (see identity), no capabilities"
    } else {
        "uid 1000 inside mapped to the supervisor's uid"
    };
    let namespaces = "namespaces user, pid, mount, net (lo only), ipc, uts, cgroup";
    match tier {
        Tier::C => {
            let userns = tierbox_runner::host::probe_userns_cached();
            let native = match userns.reason() {
                Some(r) => {
                    serde_json::json!({ "backend": "native", "available": false, "reason": r })
                }
                None => serde_json::json!({
                    "backend": "native",
                    "available": true,
                    "layers": [
                        namespaces.to_owned(),
                        "pivot_root into a tmpfs root".to_owned(),
                        landlock.clone(),
                        seccomp.to_owned(),
                        cgroup.clone(),
                        ids.to_owned(),
                        format!("pid 1 after setup: {}", tierbox_runner::host::reaper_description()),
                    ],
                }),
            };
            let bwrap = match tierbox_runner::host::probe_bwrap_cached() {
                Err(e) => {
                    serde_json::json!({ "backend": "bwrap", "available": false, "reason": e.to_string() })
                }
                Ok(info) => serde_json::json!({
                    "backend": "bwrap",
                    "available": true,
                    "layers": [
                        format!("bwrap {} at {}", info.version, info.path.display()),
                        namespaces.to_owned(),
                        "no landlock".to_owned(),
                        seccomp.to_owned(),
                        cgroup.clone(),
                        ids.to_owned(),
                    ],
                }),
            };
            let mut all = vec![
                checked(TierCBackend::Native, native),
                checked(TierCBackend::Bwrap, bwrap),
            ];
            for (engine, status) in engines {
                let v = match status {
                    Ok(detail) => serde_json::json!({
                        "backend": engine.to_string(),
                        "available": true,
                        "layers": [
                            format!("{engine} {detail}"),
                            "--network none, --read-only root, --cap-drop ALL, no-new-privileges, non-root user".to_owned(),
                            "engine cgroup (memory, pids, cpus); engine default seccomp".to_owned(),
                            "no landlock".to_owned(),
                        ],
                    }),
                    Err(reason) => serde_json::json!({
                        "backend": engine.to_string(), "available": false, "reason": reason
                    }),
                };
                all.push(checked(engine.backend(), v));
            }
            all
        }
        Tier::B => vec![serde_json::json!({
            "backend": "linux",
            "available": true,
            "layers": [
                landlock,
                seccomp.to_owned(),
                cgroup,
                if summary.root {
                    "runs as the workspace owner when not root; capabilities dropped"
                } else {
                    "runs as the supervisor's uid"
                }.to_owned(),
            ],
        })],
        Tier::A => {
            let dir = crate::wasm::runtimes_dir();
            let runtimes: serde_json::Map<String, serde_json::Value> = crate::wasm::RUNTIMES
                .iter()
                .map(|(name, _)| ((*name).to_owned(), dir.join(name).is_file().into()))
                .collect();
            vec![serde_json::json!({
                "backend": "wasmtime",
                "available": true,
                "runtimes_dir": dir,
                "runtimes_installed": runtimes,
                "layers": ["wasi preopens only", "no sockets", "fuel", "epoch deadline", "memory/table/instance limits"],
            })]
        }
    }
}
