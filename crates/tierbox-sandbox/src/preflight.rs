//! Launch preflight: what each Linux backend would refuse, or carry out narrower than the
//! grant model ([`tierbox_policy::access`]) says, for a plan's filesystem — found without
//! launching anything, so `tierbox check` and `tierbox policy check` tell the truth about
//! the host they run on.
//!
//! Rules every tier shares are validation's ([`tierbox_policy::Rejection::GrantRefused`]);
//! this module asks each backend's own planner, which also knows the host's paths.

use std::path::PathBuf;

use tierbox_policy::access::AccessModel;
use tierbox_policy::plan::Plan;

/// One thing a backend does differently from the plan's grants.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GrantFinding {
    /// `"tier_b"`, `"native"` or `"bwrap"`.
    pub backend: &'static str,
    /// `true`: the backend refuses to launch the run. `false`: it runs, with the access
    /// [`GrantFinding::rule`] describes.
    pub refuses: bool,
    /// The policy key of the grant concerned, when one grant is the cause.
    pub key: Option<&'static str>,
    /// The path concerned, when there is one.
    pub path: Option<PathBuf>,
    /// What the backend does, naming its rule.
    pub rule: String,
}

/// What Tier B, the native Tier C backend and the bwrap backend would each refuse or
/// narrow for `plan`'s filesystem on this host, checked by their own planners (the
/// native mount plan, bwrap's mount steps, Tier B's landlock grants). Empty: every
/// backend carries the grants out as the model says.
///
/// ```
/// use tierbox_policy::{Policy, ValidateContext, validate::grants_plan};
///
/// let ws = tempfile::tempdir().unwrap();
/// let cache = tempfile::tempdir().unwrap();
/// std::fs::create_dir(cache.path().join("credentials")).unwrap();
/// let mut policy = Policy::builtin_default();
/// policy.filesystem.writable = vec![cache.path().display().to_string()];
/// policy.filesystem.deny_read = vec![cache.path().join("credentials").display().to_string()];
/// let plan = grants_plan(&policy, &ValidateContext::new(ws.path())).unwrap();
/// let findings = tierbox_sandbox::preflight::grant_findings(&plan);
/// // Tier B cannot create files at the top of the cache; Tier C can.
/// assert!(findings.iter().any(|f| f.backend == "tier_b" && !f.refuses));
/// assert!(findings.iter().all(|f| f.backend == "tier_b"));
/// ```
pub fn grant_findings(plan: &Plan) -> Vec<GrantFinding> {
    let mut out = tier_b_findings(plan);
    if let Err(e) = crate::linux::ns::child::prepared_mounts(plan, &[]) {
        out.push(GrantFinding {
            backend: "native",
            refuses: true,
            key: None,
            path: None,
            rule: e.to_string(),
        });
    }
    let host = crate::bwrap::HostLayout::probe(plan);
    if let Err(e) = crate::bwrap::check_filesystem(plan, &host) {
        out.push(GrantFinding {
            backend: "bwrap",
            refuses: true,
            key: None,
            path: None,
            rule: e.to_string(),
        });
    }
    out
}

/// Tier B's landlock grants the entries of a grant one by one around a narrower path
/// inside it ([`AccessModel::tier_b_sealed`]).
fn tier_b_findings(plan: &Plan) -> Vec<GrantFinding> {
    let model = AccessModel::of(plan);
    model
        .tier_b_sealed()
        .into_iter()
        .map(|dir| GrantFinding {
            backend: "tier_b",
            refuses: false,
            key: model.rule(&dir).and_then(|(_, rule)| rule.policy_key()),
            rule: format!(
                "landlock grants the entries of {} one by one around a narrower path inside: \
                 in Tier B it cannot be listed and takes no new entries, deletions or renames \
                 (its entries keep their access; Tier C binds it whole)",
                dir.display()
            ),
            path: Some(dir),
        })
        .collect()
}
