//! Tier: a request may ask for a stronger tier than the policy's minimum, never a weaker one.
//! Whether the host can enforce it is decided later by the sandbox's tier selection.

use crate::plan::TierPlan;
use crate::policy::{Tier, TierPolicy};
use crate::rejection::Rejection;
use crate::request::{ProcessRunRequest, TierRequest};

pub(crate) fn check(policy: &TierPolicy, req: &ProcessRunRequest) -> Result<TierPlan, Rejection> {
    let requested = match req.tier {
        TierRequest::Auto => None,
        TierRequest::A => Some(Tier::A),
        TierRequest::B => Some(Tier::B),
        TierRequest::C => Some(Tier::C),
    };
    if let Some(t) = requested
        && t < policy.minimum
    {
        return Err(Rejection::TierBelowMinimum {
            requested: t.to_string(),
            minimum: policy.minimum.to_string(),
        });
    }
    Ok(TierPlan {
        minimum: policy.minimum,
        requested: req.tier,
        optional_layers: policy.optional_layers.clone(),
        backend: policy.backend,
        container: match (&policy.container.image, policy.backend.is_container()) {
            (Some(image), true) => Some(crate::plan::ContainerPlan {
                image: image.clone(),
                user: policy.container.effective_user().to_owned(),
            }),
            _ => None,
        },
    })
}
