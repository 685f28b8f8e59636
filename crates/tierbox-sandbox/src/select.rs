//! Tier selection: the policy's minimum, the request's tier, and what this host can
//! enforce. `auto` picks the strongest tier available; a minimum that cannot be enforced
//! is a [`Rejection::TierUnavailable`] with the concrete reason — never a silent downgrade.

use tierbox_policy::plan::Plan;
use tierbox_policy::{EgressMode, Rejection, Tier, TierRequest};

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
        Tier::C => match crate::linux::userns::probe_userns_cached().reason() {
            None => Ok(()),
            Some(reason) => Err(reason.to_owned()),
        },
        Tier::A => Err(
            "tier a runs WASM modules; native programs need a WASI build mapped by the policy"
                .to_owned(),
        ),
    }
}

/// Whether `tier` can carry out what `plan` asks for (beyond the host's kernel features),
/// and why not: `(feature, reason)`.
///
/// Tier C gives every run its own network namespace with only loopback, so it cannot
/// provide the host network that `allow_all` and `preflight` (advisory: nothing is
/// enforced at runtime) promise, nor an allowlist, which needs the egress proxy. It can
/// provide `block_all` and `strict` with an empty allowlist (no network at all).
pub fn tier_supports(tier: Tier, plan: &Plan) -> Result<(), (String, String)> {
    if tier != Tier::C {
        return Ok(());
    }
    let unsupported = |feature: &str, reason: &str| Err((feature.to_owned(), reason.to_owned()));
    match plan.network.mode {
        EgressMode::BlockAll => Ok(()),
        EgressMode::Strict if plan.network.allow.is_empty() => Ok(()),
        EgressMode::Strict => unsupported(
            "egress.mode = \"strict\" with a non-empty allowlist",
            "runtime enforcement of an allowlist needs the egress proxy, which this build does not provide; use block_all",
        ),
        EgressMode::AllowAll => unsupported(
            "egress.mode = \"allow_all\"",
            "tier c runs in its own network namespace with only loopback; use tier b for host network access",
        ),
        EgressMode::Preflight => unsupported(
            "egress.mode = \"preflight\"",
            "preflight leaves the host network reachable at runtime, and tier c runs in its own network namespace with only loopback; use tier b",
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
                let usable = tier_available(tier, facts)
                    .and_then(|()| tier_supports(tier, plan).map_err(|(_, reason)| reason));
                match usable {
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
            tier_supports(tier, plan).map_err(|(feature, reason)| Rejection::TierUnsupported {
                tier: tier.to_string(),
                feature,
                reason,
            })?;
            Ok(tier)
        }
    }
}
