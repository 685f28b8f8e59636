//! Reading a policy document, and the rules a well-formed document must also satisfy.

use crate::hosts::{CanonicalHost, HostPattern};

use super::tier::container_problem;
use super::*;

/// A field's value refused by [`Policy::check`].
/// Whether `name` is an HTTP header name (an RFC 9110 token).
pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(super) fn invalid(field: &str, reason: String) -> Result<(), PolicyError> {
    Err(PolicyError::Invalid {
        field: field.to_owned(),
        reason,
    })
}

impl Policy {
    /// The strict default policy (`policies/strict.toml`).
    pub fn builtin_default() -> Self {
        // The built-in document is checked by a unit test (the JSON form is the TOML's,
        // converted at build time); fall back to the in-code defaults (which are at least
        // as strict) if it were ever broken.
        Self::from_json(BUILTIN_DEFAULT_POLICY_JSON).unwrap_or_default()
    }

    /// Parses and checks a TOML policy.
    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                bytes: text.len(),
                max: MAX_POLICY_BYTES,
            });
        }
        let policy: Policy = toml::from_str(text).map_err(|e| PolicyError::Parse {
            detail: e.to_string(),
        })?;
        policy.check()?;
        Ok(policy)
    }

    /// Parses and checks a JSON policy (same structure as TOML).
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                bytes: text.len(),
                max: MAX_POLICY_BYTES,
            });
        }
        let policy: Policy =
            crate::json::from_slice(text.as_bytes()).map_err(|e| PolicyError::Parse {
                detail: e.to_string(),
            })?;
        policy.check()?;
        Ok(policy)
    }

    /// Checks the rules a well-formed document must also satisfy.
    pub fn check(&self) -> Result<(), PolicyError> {
        if self.version != POLICY_VERSION {
            return Err(PolicyError::Version {
                found: self.version,
            });
        }
        if let Err((field, reason)) = self.wasm.check() {
            return invalid(&field, reason);
        }
        self.check_dev_shm()?;
        self.check_exec()?;
        self.check_limits()?;
        self.check_tier()?;
        self.check_cpu_time_and_output()?;
        self.check_env()?;
        self.check_filesystem()?;
        self.check_egress()?;
        self.check_reach()?;
        self.egress.check_rules()?;
        self.check_credential_env()?;
        self.check_audit()?;
        self.check_background()
    }

    /// `filesystem.dev_shm = "none"` is not contradicted by a writable `/dev/shm`.
    fn check_dev_shm(&self) -> Result<(), PolicyError> {
        if self.filesystem.dev_shm == DevShm::None
            && self
                .filesystem
                .writable
                .iter()
                .any(|w| w.trim_end_matches('/') == "/dev/shm")
        {
            return invalid(
                "filesystem.dev_shm",
                "\"none\" while filesystem.writable lists /dev/shm: choose one".to_owned(),
            );
        }
        Ok(())
    }

    /// The allowlist: bounded, bare names, `*` only with its danger switch.
    fn check_exec(&self) -> Result<(), PolicyError> {
        let exec = &self.exec;
        if exec.allowed_executables.len() > MAX_ALLOWED_EXECUTABLES {
            return invalid(
                "exec.allowed_executables",
                format!(
                    "{} entries, more than {MAX_ALLOWED_EXECUTABLES}",
                    exec.allowed_executables.len()
                ),
            );
        }
        for name in &exec.allowed_executables {
            if name == "*" {
                if !exec.danger_allow_any_executable {
                    return invalid(
                        "exec.allowed_executables",
                        "\"*\" requires exec.danger_allow_any_executable = true".to_owned(),
                    );
                }
            } else if name.is_empty()
                || name.contains('/')
                || name.contains('\0')
                || name.len() > 255
            {
                return invalid(
                    "exec.allowed_executables",
                    format!("{name:?} is not a bare executable name"),
                );
            }
        }
        Ok(())
    }

    /// Limits: none zero, the timeouts ordered and under the hard cap.
    fn check_limits(&self) -> Result<(), PolicyError> {
        let l = &self.limits;
        for (field, value) in [
            ("limits.timeout_ms", l.timeout_ms),
            ("limits.max_timeout_ms", l.max_timeout_ms),
            ("limits.memory_bytes", l.memory_bytes),
            ("limits.max_processes", l.max_processes),
            ("limits.open_files", l.open_files),
            ("limits.file_size_bytes", l.file_size_bytes),
            ("limits.disk_bytes", l.disk_bytes),
            ("output.max_bytes", self.output.max_bytes),
            ("output.spill_keep_secs", self.output.spill_keep_secs),
            ("output.spill_total_bytes", self.output.spill_total_bytes),
        ] {
            if value == 0 {
                return invalid(field, "must be at least 1".to_owned());
            }
        }
        if l.max_timeout_ms > HARD_MAX_TIMEOUT_MS {
            return invalid(
                "limits.max_timeout_ms",
                format!("above the hard cap {HARD_MAX_TIMEOUT_MS}"),
            );
        }
        if l.timeout_ms > l.max_timeout_ms {
            return invalid(
                "limits.timeout_ms",
                format!(
                    "{} is above limits.max_timeout_ms {}",
                    l.timeout_ms, l.max_timeout_ms
                ),
            );
        }
        if l.cpus == Some(0) {
            return invalid("limits.cpus", "must be at least 1".to_owned());
        }
        if l.stdin_bytes > HARD_MAX_STDIN_BYTES {
            return invalid(
                "limits.stdin_bytes",
                format!(
                    "{} is above the hard cap {HARD_MAX_STDIN_BYTES}",
                    l.stdin_bytes
                ),
            );
        }
        if l.disk_bytes < MIN_DISK_BYTES {
            return invalid(
                "limits.disk_bytes",
                format!("{} is below the minimum {MIN_DISK_BYTES}", l.disk_bytes),
            );
        }
        let keep = self.workspace.keep_changes_for_secs;
        if keep == 0 || keep > MAX_KEEP_CHANGES_SECS {
            return invalid(
                "workspace.keep_changes_for_secs",
                format!("{keep} is not between 1 and {MAX_KEEP_CHANGES_SECS} seconds"),
            );
        }
        self.check_keep_caps()?;
        if self.workspace.mode == WorkspaceMode::Overlay
            && self.tier.preferred == crate::request::TierRequest::B
        {
            return invalid(
                "workspace.mode",
                "\"overlay\" needs tier c, and tier.preferred is \"b\": choose one".to_owned(),
            );
        }
        Ok(())
    }

    /// The caps on kept change sets: each within its bounds, a per-owner cap at most its
    /// total.
    fn check_keep_caps(&self) -> Result<(), PolicyError> {
        let w = &self.workspace;
        for (field, value, min, max, unit) in [
            (
                "workspace.keep_changes_total_bytes",
                w.keep_changes_total_bytes,
                MIN_KEEP_CHANGES_BYTES,
                MAX_KEEP_CHANGES_BYTES,
                "bytes",
            ),
            (
                "workspace.keep_changes_per_owner_bytes",
                w.keep_changes_per_owner_bytes,
                MIN_KEEP_CHANGES_BYTES,
                MAX_KEEP_CHANGES_BYTES,
                "bytes",
            ),
            (
                "workspace.keep_changes_total_entries",
                w.keep_changes_total_entries,
                MIN_KEEP_CHANGES_ENTRIES,
                MAX_KEEP_CHANGES_ENTRIES,
                "entries",
            ),
            (
                "workspace.keep_changes_per_owner_entries",
                w.keep_changes_per_owner_entries,
                MIN_KEEP_CHANGES_ENTRIES,
                MAX_KEEP_CHANGES_ENTRIES,
                "entries",
            ),
        ] {
            if !(min..=max).contains(&value) {
                return invalid(
                    field,
                    format!("{value} is not between {min} and {max} {unit}"),
                );
            }
        }
        for (field, owner, total, total_field) in [
            (
                "workspace.keep_changes_per_owner_bytes",
                w.keep_changes_per_owner_bytes,
                w.keep_changes_total_bytes,
                "keep_changes_total_bytes",
            ),
            (
                "workspace.keep_changes_per_owner_entries",
                w.keep_changes_per_owner_entries,
                w.keep_changes_total_entries,
                "keep_changes_total_entries",
            ),
        ] {
            if owner > total {
                return invalid(
                    field,
                    format!("{owner} is above workspace.{total_field} {total}"),
                );
            }
        }
        Ok(())
    }

    /// The tier section: preference, container settings, the sandbox's ids.
    fn check_tier(&self) -> Result<(), PolicyError> {
        if let Some(reason) = self.tier.preferred_problem() {
            return invalid("tier.preferred", reason);
        }
        if let Some((field, reason)) = container_problem(&self.tier) {
            return invalid(field, reason);
        }
        for (field, id) in [
            ("tier.sandbox_uid", self.tier.sandbox_uid),
            ("tier.sandbox_gid", self.tier.sandbox_gid),
        ] {
            match id {
                Some(0) => {
                    return invalid(
                        field,
                        "0 is host root: a sandbox never runs as it (danger_sandbox_as_supervisor maps the sandbox to the supervisor's own uid, if that is really meant)".to_owned(),
                    );
                }
                Some(u32::MAX) => return invalid(field, "4294967295 is not an id".to_owned()),
                _ => {}
            }
        }
        Ok(())
    }

    /// The CPU-time limit and the output cap.
    fn check_cpu_time_and_output(&self) -> Result<(), PolicyError> {
        let l = &self.limits;
        if l.cpu_time_ms == Some(0) {
            return invalid("limits.cpu_time_ms", "must be at least 1".to_owned());
        }
        if self.output.max_bytes > HARD_MAX_OUTPUT_BYTES {
            return invalid(
                "output.max_bytes",
                format!("above the hard cap {HARD_MAX_OUTPUT_BYTES}"),
            );
        }
        if self.output.spill_keep_secs > MAX_SPILL_KEEP_SECS {
            return invalid(
                "output.spill_keep_secs",
                format!(
                    "{} is above the hard cap {MAX_SPILL_KEEP_SECS} (30 days)",
                    self.output.spill_keep_secs
                ),
            );
        }
        Ok(())
    }

    /// `env.path` is absolute directories or directories under the supervisor's home
    /// (`~/…` or `$HOME/…`, expanded when a request is validated, as the filesystem grants'
    /// `~/` is); variable names are names.
    fn check_env(&self) -> Result<(), PolicyError> {
        let portable = |d: &str| d.starts_with('/') || crate::validate::home_relative(d).is_some();
        if self.env.path.is_empty() || !self.env.path.split(':').all(portable) {
            return invalid(
                "env.path",
                format!(
                    "{:?} must be a list of absolute directories or directories under ~/ ($HOME/)",
                    self.env.path
                ),
            );
        }
        for name in self.env.pass.iter().chain(self.env.set.keys()) {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return invalid("env", format!("{name:?} is not a variable name"));
            }
        }
        if let Some(home) = &self.env.workspace_home {
            let parts: Vec<&str> = home.split('/').collect();
            let plain = |c: &&str| !c.is_empty() && *c != "." && *c != ".." && !c.contains('\0');
            if home.len() > MAX_WORKSPACE_HOME_BYTES
                || !parts.iter().all(plain)
                || parts.contains(&".git")
            {
                return invalid(
                    "env.workspace_home",
                    format!(
                        "{home:?} must be a directory inside the workspace, relative to it (at most {MAX_WORKSPACE_HOME_BYTES} bytes, no `.`, `..` or empty components), outside every `.git`"
                    ),
                );
            }
        }
        Ok(())
    }

    /// Filesystem paths: absolute or `~/`; protected paths stay inside the workspace.
    fn check_filesystem(&self) -> Result<(), PolicyError> {
        for (field, list) in [
            ("filesystem.read_only", &self.filesystem.read_only),
            ("filesystem.writable", &self.filesystem.writable),
            ("filesystem.deny_read", &self.filesystem.deny_read),
        ] {
            for p in list {
                if !(p.starts_with('/') || p.starts_with("~/")) {
                    return invalid(field, format!("{p:?} must be absolute or start with ~/"));
                }
            }
        }
        for p in &self.filesystem.protected {
            if p.starts_with('/') || p.split('/').any(|c| c == "..") || p.is_empty() {
                return invalid(
                    "filesystem.protected",
                    format!("{p:?} must be relative to the workspace and stay inside it"),
                );
            }
        }
        for (field, value, max) in [
            (
                "filesystem.repo_scan_max_entries",
                self.filesystem.repo_scan_max_entries,
                crate::validate::MAX_REPO_SCAN_MAX_ENTRIES,
            ),
            (
                "filesystem.max_protected_repos",
                self.filesystem.max_protected_repos,
                crate::validate::MAX_MAX_PROTECTED_REPOS,
            ),
        ] {
            if value == 0 || value > max {
                return invalid(field, format!("{value} is not between 1 and {max}"));
            }
        }
        Ok(())
    }

    /// The allowlist's patterns and the pinned resolutions.
    fn check_egress(&self) -> Result<(), PolicyError> {
        for entry in &self.egress.allow {
            if let Err(reason) = HostPattern::parse(entry) {
                return invalid("egress.allow", format!("{entry:?}: {reason}"));
            }
        }
        if self.egress.resolve.len() > MAX_EGRESS_RESOLVE {
            return invalid(
                "egress.resolve",
                format!(
                    "{} entries, the limit is {MAX_EGRESS_RESOLVE}",
                    self.egress.resolve.len()
                ),
            );
        }
        for (name, addrs) in &self.egress.resolve {
            match CanonicalHost::parse(name) {
                Ok(CanonicalHost::Name(canonical)) if canonical == *name => {}
                Ok(CanonicalHost::Name(canonical)) => {
                    return invalid(
                        "egress.resolve",
                        format!("{name:?} must be written in canonical form: {canonical:?}"),
                    );
                }
                Ok(CanonicalHost::Ip(_)) => {
                    return invalid(
                        "egress.resolve",
                        format!("{name:?} is an address; keys are host names"),
                    );
                }
                Err(e) => return invalid("egress.resolve", format!("{name:?}: {e}")),
            }
            if addrs.is_empty() || addrs.len() > MAX_EGRESS_RESOLVE_ADDRS {
                return invalid(
                    "egress.resolve",
                    format!(
                        "{name:?} has {} addresses; give 1 to {MAX_EGRESS_RESOLVE_ADDRS}",
                        addrs.len()
                    ),
                );
            }
        }
        Ok(())
    }

    /// `egress.publish` and `egress.host_ports`: well formed, bounded, each port once.
    fn check_reach(&self) -> Result<(), PolicyError> {
        if let Err((entry, reason)) = crate::reach::parse_published(&self.egress.publish) {
            return invalid("egress.publish", format!("{entry:?}: {reason}"));
        }
        if let Err(e) = crate::reach::check_host_ports(&self.egress.host_ports) {
            return invalid("egress.host_ports", e.to_string());
        }
        if let Err((entry, reason)) = crate::unix_sockets::check_entries(&self.egress.unix_sockets)
        {
            return invalid("egress.unix_sockets", format!("{entry:?}: {reason}"));
        }
        Ok(())
    }

    /// Audit paths are absolute.
    fn check_audit(&self) -> Result<(), PolicyError> {
        for (field, path) in [
            ("audit.log", &self.audit.log),
            ("audit.signing_key", &self.audit.signing_key),
        ] {
            if let Some(p) = path
                && !p.is_absolute()
            {
                return invalid(
                    field,
                    format!("{} is relative; give an absolute path", p.display()),
                );
            }
        }
        Ok(())
    }

    /// Background lifetimes and spill under their hard maxima.
    fn check_background(&self) -> Result<(), PolicyError> {
        let b = &self.background;
        if b.default_lifetime_ms > b.max_lifetime_ms {
            return invalid(
                "background.default_lifetime_ms",
                "above background.max_lifetime_ms".to_owned(),
            );
        }
        if b.max_lifetime_ms > MAX_BACKGROUND_LIFETIME_MS {
            return invalid(
                "background.max_lifetime_ms",
                format!(
                    "{} is above the hard maximum of {MAX_BACKGROUND_LIFETIME_MS} ms (30 min)",
                    b.max_lifetime_ms
                ),
            );
        }
        if b.spill_bytes > MAX_BACKGROUND_SPILL_BYTES {
            return invalid(
                "background.spill_bytes",
                format!(
                    "{} is above the hard maximum of {MAX_BACKGROUND_SPILL_BYTES} bytes",
                    b.spill_bytes
                ),
            );
        }
        Ok(())
    }
}
