//! A layer a Linux launch needs and the host lacks: recorded when the policy accepts it
//! missing, refused otherwise ([`require`]; which layers each backend applies is
//! `crate::layers`).

use tierbox_policy::plan::Plan;
use tierbox_policy::{Layer, Rejection, Tier};

/// Layers this run needs that the host lacks: each is recorded when the policy allows it
/// to be missing, and rejects the run otherwise.
pub(crate) fn require(
    plan: &Plan,
    tier: Tier,
    layer: Layer,
    available: bool,
    reason: &str,
    missing: &mut Vec<Layer>,
) -> Result<(), Rejection> {
    if available {
        return Ok(());
    }
    if plan.tier.optional_layers.contains(&layer) {
        missing.push(layer);
        return Ok(());
    }
    Err(Rejection::TierUnavailable {
        tier,
        reason: format!(
            "{layer} cannot be enforced: {reason} (a policy that accepts running without it lists \"{layer}\" in tier.optional_layers)"
        ),
    })
}
