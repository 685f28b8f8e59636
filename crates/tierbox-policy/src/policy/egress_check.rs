//! The checks of `egress.hosts`, `egress.credentials` and `egress.upstream_roots` when a
//! policy loads: every host canonical and reachable through `egress.allow`, every rule
//! parsed, every credential well formed, the caps kept, and the mode `strict` (the only
//! one whose proxy carries rules out).

use std::collections::BTreeSet;

use super::PolicyError;
use super::egress::{CredentialPolicy, EgressMode, EgressPolicy};
use super::load::{invalid, is_header_name};
use crate::egress_rules::{
    MAX_CREDENTIALS, MAX_REQUEST_RULES, MAX_TERMINATED_HOSTS, MAX_UPSTREAM_ROOTS, RequestRule,
};
use crate::hosts::{CanonicalHost, HostPattern};

impl super::Policy {
    /// The variables of a run whose proxy terminates TLS that the runner owns: no
    /// credential's placeholder variable is copied or set by `env`, no bundle variable is
    /// set by `env.set`, and no credential's secret variable is copied into the sandbox
    /// by `env.pass` (which would hand the program the secret itself).
    pub(super) fn check_credential_env(&self) -> Result<(), PolicyError> {
        let terminated = !self.egress.hosts.is_empty() || !self.egress.credentials.is_empty();
        if !terminated {
            return Ok(());
        }
        let passed = |name: &str| self.env.pass.iter().any(|p| p == name);
        for (i, c) in self.egress.credentials.iter().enumerate() {
            let field = format!("egress.credentials[{i}]");
            if passed(&c.env) || self.env.set.contains_key(&c.env) {
                return invalid(
                    &field,
                    format!(
                        "env {:?} is also in env.pass or env.set: the runner sets it to the credential's placeholder",
                        c.env
                    ),
                );
            }
            if let Some(var) = &c.secret.env
                && passed(var)
            {
                return invalid(
                    &field,
                    format!(
                        "secret.env {var:?} is in env.pass, which would copy the secret into the sandbox: remove it from env.pass"
                    ),
                );
            }
        }
        if let Some(var) = crate::egress_rules::CA_BUNDLE_VARS
            .iter()
            .find(|v| self.env.set.contains_key(**v))
        {
            return invalid(
                "env.set",
                format!(
                    "{var:?}: a run whose proxy terminates TLS (egress.hosts, egress.credentials) has it pointed at its trust bundle (the host's roots plus the run's CA)"
                ),
            );
        }
        Ok(())
    }
}

impl EgressPolicy {
    /// The terminated hosts' rules, the credentials and the upstream anchors.
    pub(super) fn check_rules(&self) -> Result<(), PolicyError> {
        if (!self.hosts.is_empty() || !self.credentials.is_empty())
            && self.mode != EgressMode::Strict
        {
            let field = match self.hosts.is_empty() {
                true => "egress.credentials",
                false => "egress.hosts",
            };
            return invalid(
                field,
                format!(
                    "rules and credentials are carried out by the egress proxy, which runs in mode = \"strict\" only (this policy has {:?})",
                    self.mode.as_str()
                ),
            );
        }
        for (host, rules) in &self.hosts {
            self.check_host("egress.hosts", host)?;
            if rules.allow.len() > MAX_REQUEST_RULES {
                return invalid(
                    "egress.hosts",
                    format!(
                        "{host:?} has {} request rules, the most is {MAX_REQUEST_RULES}",
                        rules.allow.len()
                    ),
                );
            }
            for rule in &rules.allow {
                if let Err(err) = RequestRule::parse(rule) {
                    return invalid(&format!("egress.hosts.\"{host}\".allow"), err.to_string());
                }
            }
        }
        self.check_credentials()?;
        let terminated: BTreeSet<&str> = self
            .hosts
            .keys()
            .map(String::as_str)
            .chain(self.credentials.iter().map(|c| c.host.as_str()))
            .collect();
        if terminated.len() > MAX_TERMINATED_HOSTS {
            return invalid(
                "egress.hosts",
                format!(
                    "{} hosts with rules or credentials, the most is {MAX_TERMINATED_HOSTS}",
                    terminated.len()
                ),
            );
        }
        if self.upstream_roots.len() > MAX_UPSTREAM_ROOTS {
            return invalid(
                "egress.upstream_roots",
                format!(
                    "{} files, the most is {MAX_UPSTREAM_ROOTS}",
                    self.upstream_roots.len()
                ),
            );
        }
        if let Some(p) = self.upstream_roots.iter().find(|p| !p.is_absolute()) {
            return invalid(
                "egress.upstream_roots",
                format!("{} is relative; give an absolute path", p.display()),
            );
        }
        Ok(())
    }

    /// `host` is a canonical host name that `egress.allow` lets through (on some port: a
    /// registry on `:8443` is terminated as one on `:443`).
    fn check_host(&self, field: &str, host: &str) -> Result<(), PolicyError> {
        match CanonicalHost::parse(host) {
            Ok(CanonicalHost::Name(canonical)) if canonical == host => {}
            Ok(CanonicalHost::Name(canonical)) => {
                return invalid(
                    field,
                    format!("{host:?} must be written in canonical form: {canonical:?}"),
                );
            }
            Ok(CanonicalHost::Ip(_)) => {
                return invalid(
                    field,
                    format!("{host:?} is an address: TLS is terminated for host names only"),
                );
            }
            Err(err) => return invalid(field, format!("{host:?}: {err}")),
        }
        let allowed = CanonicalHost::parse(host).is_ok_and(|h| {
            self.allow
                .iter()
                .filter_map(|a| HostPattern::parse(a).ok())
                .any(|p| p.matches_host(&h, p.port()))
        });
        match allowed {
            true => Ok(()),
            false => invalid(
                field,
                format!(
                    "{host:?} is not reachable: add it to egress.allow (rules and credentials only narrow what the allowlist lets through)"
                ),
            ),
        }
    }

    fn check_credentials(&self) -> Result<(), PolicyError> {
        if self.credentials.len() > MAX_CREDENTIALS {
            return invalid(
                "egress.credentials",
                format!(
                    "{} credentials, the most is {MAX_CREDENTIALS}",
                    self.credentials.len()
                ),
            );
        }
        let mut names = BTreeSet::new();
        let mut vars = BTreeSet::new();
        for (i, c) in self.credentials.iter().enumerate() {
            let field = format!("egress.credentials[{i}]");
            check_credential(&field, c)?;
            if !names.insert(c.name.as_str()) {
                return invalid(&field, format!("name {:?} is used twice", c.name));
            }
            if !vars.insert(c.env.as_str()) {
                return invalid(
                    &field,
                    format!("env {:?} is used by two credentials", c.env),
                );
            }
            self.check_host(&format!("{field}.host"), &c.host)?;
        }
        Ok(())
    }
}

/// One credential's own fields.
fn check_credential(field: &str, c: &CredentialPolicy) -> Result<(), PolicyError> {
    let name_ok = !c.name.is_empty()
        && c.name.len() <= 64
        && c.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !name_ok {
        return invalid(
            field,
            format!("name {:?}: use 1 to 64 of A-Z a-z 0-9 - _", c.name),
        );
    }
    match (&c.header, &c.query) {
        (Some(h), None) if is_header_name(h) => {}
        (Some(h), None) => {
            return invalid(field, format!("header {h:?} is not an HTTP header name"));
        }
        (None, Some(q))
            if !q.is_empty()
                && q.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) => {}
        (None, Some(q)) => {
            return invalid(field, format!("query {q:?}: use letters, digits, - _ ."));
        }
        _ => return invalid(field, "give exactly one of header and query".to_owned()),
    }
    let var_ok = c
        .env
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && c.env
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !var_ok {
        return invalid(
            field,
            format!("env {:?}: a variable name of A-Z 0-9 _", c.env),
        );
    }
    match (&c.secret.env, &c.secret.file) {
        (Some(v), None) if !v.is_empty() => Ok(()),
        (None, Some(f)) if f.is_absolute() => Ok(()),
        (None, Some(f)) => invalid(
            field,
            format!(
                "secret.file {} is relative; give an absolute path",
                f.display()
            ),
        ),
        _ => invalid(field, "secret: give exactly one of env and file".to_owned()),
    }
}
