//! Tier: a request may ask for a stronger tier than the policy's minimum, never a weaker one;
//! one that leaves the choice open gets the policy's `tier.preferred`.
//! Whether the host can enforce it is decided later by the sandbox's tier selection.

use crate::plan::TierPlan;
use crate::policy::{Policy, Tier, WorkspaceMode};
use crate::rejection::Rejection;
use crate::request::{ProcessRunRequest, TierRequest};

pub(crate) fn check(whole: &Policy, req: &ProcessRunRequest) -> Result<TierPlan, Rejection> {
    let policy = &whole.tier;
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
        file_refusals: whole.audit.file_refusals,
    })
}

/// The run's workspace mode: the policy's, or `overlay` when the request narrows a
/// `direct` policy to it; a request may not widen `overlay` to `direct`. Overlay mode
/// needs a mount namespace: a run that asked for Tier B (by name or through
/// `tier.preferred`) is refused here, before anything runs, never run direct.
pub(crate) fn workspace_mode(
    policy: &Policy,
    req: &ProcessRunRequest,
    tier: &TierPlan,
) -> Result<WorkspaceMode, Rejection> {
    let mode = asked_mode(policy, req.workspace_mode)?;
    if mode == WorkspaceMode::Overlay && tier.requested == TierRequest::B {
        return Err(Rejection::TierUnsupported {
            tier: Tier::B,
            feature: "workspace mode \"overlay\"".to_owned(),
            reason: "tier b has no mount namespace to show the workspace through an overlay; overlay mode needs tier c (native backend). It never falls back to writing the workspace directly".to_owned(),
        });
    }
    Ok(mode)
}

/// The workspace mode a request asks for (`asked`, its `workspace_mode`) under `policy`:
/// the policy's when it asks for none, `overlay` when it narrows a `direct` policy; a
/// request may not widen `overlay` to `direct` (`workspace.mode_widened`).
pub(crate) fn asked_mode(
    policy: &Policy,
    asked: Option<WorkspaceMode>,
) -> Result<WorkspaceMode, Rejection> {
    match (policy.workspace.mode, asked) {
        (WorkspaceMode::Overlay, Some(WorkspaceMode::Direct)) => {
            Err(Rejection::WorkspaceModeWidened {
                requested: WorkspaceMode::Direct,
                policy: WorkspaceMode::Overlay,
            })
        }
        (policy_mode, asked) => Ok(asked.unwrap_or(policy_mode)),
    }
}
