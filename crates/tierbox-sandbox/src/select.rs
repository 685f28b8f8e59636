//! Tier selection: the policy's minimum, the request's tier, and what this host can
//! enforce. `auto` picks the strongest tier available; a minimum that cannot be enforced
//! is a [`Rejection::TierUnavailable`] with the concrete reason — never a silent downgrade.

use tierbox_policy::plan::Plan;
use tierbox_policy::{Rejection, Tier, TierRequest};

use crate::probe::HostFacts;

/// Whether `tier` can run native programs on this host, and why not.
pub fn tier_available(tier: Tier, facts: &HostFacts) -> Result<(), String> {
    match tier {
        Tier::B => {
            if facts.seccomp || facts.landlock_abi.is_some() {
                Ok(())
            } else {
                Err("neither landlock nor seccomp is available on this kernel".to_owned())
            }
        }
        Tier::C => Err("no tier c backend is available in this build".to_owned()),
        Tier::A => Err(
            "tier a runs WASM modules; native programs need a WASI build mapped by the policy"
                .to_owned(),
        ),
    }
}

/// Picks the tier for `plan` on this host.
///
/// ```no_run
/// # fn demo(plan: &tierbox_policy::Plan) {
/// let facts = tierbox_sandbox::probe::host_facts();
/// let tier = tierbox_sandbox::select::select_tier(plan, facts);
/// # }
/// ```
pub fn select_tier(plan: &Plan, facts: &HostFacts) -> Result<Tier, Rejection> {
    let unavailable = |tier: Tier, reason: String| Rejection::TierUnavailable {
        tier: tier.to_string(),
        reason,
    };
    match plan.tier.requested {
        TierRequest::Auto => {
            // Strongest first among native-program tiers, never below the minimum.
            let mut last_reason = String::new();
            for tier in [Tier::C, Tier::B] {
                if tier < plan.tier.minimum {
                    continue;
                }
                match tier_available(tier, facts) {
                    Ok(()) => return Ok(tier),
                    Err(reason) => last_reason = reason,
                }
            }
            Err(unavailable(plan.tier.minimum, last_reason))
        }
        requested => {
            let tier = match requested {
                TierRequest::A => Tier::A,
                TierRequest::B => Tier::B,
                _ => Tier::C,
            };
            tier_available(tier, facts).map_err(|reason| unavailable(tier, reason))?;
            Ok(tier)
        }
    }
}
