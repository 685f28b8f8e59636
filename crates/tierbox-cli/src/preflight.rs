//! What `check` and `policy check` add to a valid plan: the tier and backend this host
//! would pick, and what each Linux backend would refuse or narrow of the filesystem
//! grants (`tierbox_runner::host::grant_findings`) — so neither approves what `run`
//! refuses.

use tierbox_policy::{Plan, Rejection, Tier};
use tierbox_runner::host::{GrantFinding, grant_findings};

/// The preflight of one plan.
pub struct Preflight {
    /// The tier a run of the plan gets on this host, or why none.
    pub tier: Result<Tier, Rejection>,
    /// The backend that tier uses: `tier_b`, or the policy's Tier C backend.
    pub backend: String,
    /// What each backend refuses or narrows.
    pub findings: Vec<GrantFinding>,
}

impl Preflight {
    /// Selects the tier as a run would and asks every backend's planner about the grants.
    pub fn of(plan: &Plan) -> Self {
        let tier = tierbox_runner::host::select_tier(plan);
        let backend = match tier {
            Ok(Tier::C) => plan.tier.backend.to_string(),
            _ => "tier_b".to_owned(),
        };
        Self {
            tier,
            backend,
            findings: grant_findings(plan),
        }
    }

    /// The finding that would stop a run of this plan: a refusal by the backend the
    /// selected tier uses.
    pub fn refusal(&self) -> Option<&GrantFinding> {
        self.tier.as_ref().ok()?;
        self.findings
            .iter()
            .find(|f| f.refuses && f.backend == self.backend)
    }

    /// `{"tier", "backend", "refused_at_launch", "grant_findings"}`; `tier` is null and
    /// `tier_rejected` holds the rejection when no tier can run the plan here.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "tier": self.tier.as_ref().ok().map(ToString::to_string),
            "tier_rejected": self.tier.as_ref().err().map(Rejection::to_json),
            "backend": self.backend,
            "refused_at_launch": self.refusal().is_some(),
            "grant_findings": self.findings,
        })
    }

    /// Text lines: the tier and backend, then one line per finding, the selected
    /// backend's first.
    pub fn print(&self) {
        match &self.tier {
            Ok(tier) => println!("runs in   tier {tier}, backend {}", self.backend),
            Err(r) => println!("runs in   nothing on this host: [{}] {r}", r.code()),
        }
        let mut findings: Vec<&GrantFinding> = self.findings.iter().collect();
        findings.sort_by_key(|f| (f.backend != self.backend, !f.refuses));
        for f in findings {
            print_finding(f);
        }
    }
}

/// One finding as a line: backend, `refuses` or `narrows`, the key and the rule.
pub fn print_finding(f: &GrantFinding) {
    let what = if f.refuses { "refuses" } else { "narrows" };
    let key = f.key.map(|k| format!("{k}: ")).unwrap_or_default();
    println!("{:<9} {what}: {key}{}", f.backend, f.rule);
}
