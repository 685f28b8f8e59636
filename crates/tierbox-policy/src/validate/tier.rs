//! Tier: a request may ask for a stronger tier than the policy's minimum, never a weaker one;
//! one that leaves the choice open gets the policy's `tier.preferred`.
//! Whether the host can enforce it is decided later by the sandbox's tier selection.

use crate::plan::TierPlan;
use crate::policy::{Tier, TierPolicy};
use crate::rejection::Rejection;
use crate::request::{ProcessRunRequest, TierRequest};

pub(crate) fn check(policy: &TierPolicy, req: &ProcessRunRequest) -> Result<TierPlan, Rejection> {
    // A request that leaves the choice open gets the policy's preference (checked to be
    // at least the minimum when the policy was loaded).
    let asked = match req.tier {
        TierRequest::Auto => policy.preferred,
        named => named,
    };
    let requested = match asked {
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
        requested: asked,
        optional_layers: policy.optional_layers.clone(),
        backend: policy.backend,
        container: match (&policy.container.image, policy.backend.is_container()) {
            (Some(image), true) => Some(crate::plan::ContainerPlan {
                image: image.clone(),
                user: policy.container.effective_user().to_owned(),
            }),
            _ => None,
        },
        identity: crate::plan::SandboxIdentityPlan {
            uid: policy.sandbox_uid,
            gid: policy.sandbox_gid,
            as_supervisor: policy.danger_sandbox_as_supervisor,
        },
    })
}
