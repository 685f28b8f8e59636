//! Which layers a Linux backend applies, checked against this host: the one answer tier
//! selection and every Linux launch use ([`layers_for`]).

use tierbox_policy::plan::Plan;
use tierbox_policy::{Layer, Rejection, Tier, TierCBackend};

use crate::launch::require;
use crate::probe::HostFacts;
use crate::tier_b::namespace::unbounded_tmp_why;

/// The layers the backend that runs `plan` in `tier` applies, checked against this host:
/// the layers missing and accepted by `tier.optional_layers`, or the rejection for the
/// first missing one the policy requires. The one answer tier selection (so `check`, and
/// `auto`'s fallback) and every Linux launch use, so what `check` reports is what `run`
/// does. (A cgroup that cannot be made at launch is found there.)
pub fn layers_for(tier: Tier, plan: &Plan, facts: &HostFacts) -> Result<Vec<Layer>, Rejection> {
    let backend = plan.tier.backend;
    let abi = facts.landlock_abi.unwrap_or(0);
    // Tier B's own mount namespace (`tier_b::namespace`): its private /tmp and
    // /dev/shm and its protected paths. Without one, an argument naming a path in the
    // run's /tmp would meet the host's: refused, with its fix.
    let tier_b_ns = if tier == Tier::B {
        crate::tier_b::namespace::available(facts)
    } else {
        Ok(())
    };
    if let Err(why) = &tier_b_ns {
        crate::tier_b::namespace::refuse_scratch_args(plan, &why.to_string())?;
    }
    let deny_in_workspace = plan
        .filesystem
        .deny_read
        .iter()
        .find(|d| d.starts_with(&plan.workspace));
    // Whether each layer the backend applies is available here. The reasons are written
    // only for a missing layer: this runs on every launch (and at selection).
    let checks: &[(Layer, bool)] = match (tier, backend) {
        (Tier::C, TierCBackend::Native) => &[
            (Layer::Seccomp, facts.seccomp),
            (Layer::Landlock, facts.landlock_abi.is_some()),
            (Layer::Cgroup, facts.cgroup.is_usable()),
        ],
        // bwrap has no landlock layer: the mount namespace is its only filesystem boundary.
        (Tier::C, TierCBackend::Bwrap) => &[
            (Layer::Seccomp, facts.seccomp),
            (Layer::Cgroup, facts.cgroup.is_usable()),
            (Layer::Landlock, false),
        ],
        (Tier::C, TierCBackend::Docker | TierCBackend::Podman) => &[(Layer::Landlock, false)],
        _ => &[
            (Layer::Landlock, facts.landlock_abi.is_some()),
            (Layer::LandlockScopes, abi >= 6),
            (Layer::Seccomp, facts.seccomp),
            (Layer::Cgroup, facts.cgroup.is_usable()),
            // A root supervisor mounts the bounded TMPDIR (the launch finds out if it
            // cannot); an unprivileged one cannot.
            (Layer::Disk, facts.euid == 0),
            // Bound read-only in the run's mount namespace, where one can be made (a
            // root supervisor, or user namespaces; the launch finds out if it cannot);
            // a denied path inside the workspace is not covered in Tier B.
            (
                Layer::ProtectedPaths,
                (plan.filesystem.protected.is_empty() || tier_b_ns.is_ok())
                    && deny_in_workspace.is_none(),
            ),
        ],
    };
    let why = |layer: Layer| -> String {
        match (layer, backend) {
            (Layer::Landlock, TierCBackend::Bwrap) if tier == Tier::C => {
                "the bwrap backend applies no landlock layer (tier.backend = \"native\" does)"
                    .to_owned()
            }
            (Layer::Landlock, TierCBackend::Docker | TierCBackend::Podman) if tier == Tier::C => {
                "the container backends apply no landlock layer (tier.backend = \"native\" does)"
                    .to_owned()
            }
            (Layer::Landlock, _) => {
                "landlock is not available (kernel < 5.13 or not in the lsm= list)".to_owned()
            }
            (Layer::LandlockScopes, _) => {
                format!("landlock ABI {abi} < 6 has no signal or abstract-socket scoping")
            }
            (Layer::Seccomp, _) => "seccomp filters are not available".to_owned(),
            (Layer::Cgroup, _) => facts.cgroup.describe(),
            (Layer::ProtectedPaths, _) => match (deny_in_workspace, &tier_b_ns) {
                (Some(denied), _) => format!(
                    "tier b keeps protected paths read-only in the run's mount namespace, but cannot hide a filesystem.deny_read path inside the writable workspace ({}; tier c can)",
                    denied.display()
                ),
                (None, Err(why)) => why.to_string(),
                (None, Ok(())) => {
                    "the run has no mount namespace to keep them read-only in".to_owned()
                }
            },
            (Layer::Disk, _) => unbounded_tmp_why(facts),
            (other, _) => format!("{other} is not available"),
        }
    };
    // The filter is what keeps setuid/setgid files and device nodes out of everything the
    // run writes (`seccomp::LEAVE_BEHIND`): without it no policy may run, so listing
    // `seccomp` as optional does not help.
    if !facts.seccomp && checks.iter().any(|&(layer, _)| layer == Layer::Seccomp) {
        return Err(Rejection::TierUnavailable {
            tier,
            reason: "seccomp cannot be enforced: seccomp filters are not available, and without them a run could leave setuid files and device nodes in its workspace for the host's users; no policy accepts that (a kernel built with CONFIG_SECCOMP_FILTER has them)".to_owned(),
        });
    }
    let mut missing = Vec::new();
    for &(layer, available) in checks {
        let reason = if available { String::new() } else { why(layer) };
        require(plan, tier, layer, available, &reason, &mut missing)?;
    }
    Ok(missing)
}

#[cfg(test)]
mod layer_tests {
    #![allow(clippy::unwrap_used)]

    use tierbox_policy::{Layer, Rejection, Tier, TierCBackend};

    use super::layers_for;
    use crate::probe::host_facts;

    /// The layers both tests let a policy run without (not `seccomp`, not `disk`).
    const OPTIONAL: [Layer; 4] = [
        Layer::Landlock,
        Layer::LandlockScopes,
        Layer::Cgroup,
        Layer::ProtectedPaths,
    ];

    /// Without seccomp nothing keeps setuid files and device nodes out of what a run
    /// writes: every Linux backend that applies the filter refuses, even when the policy
    /// lists `seccomp` as optional, and the message offers no policy fix.
    #[test]
    fn no_seccomp_refuses_even_when_the_policy_makes_it_optional() {
        let mut plan = crate::test_fixtures::golden_plan("strict.toml");
        plan.tier.optional_layers = [&[Layer::Seccomp][..], &OPTIONAL].concat();
        let mut facts = host_facts().clone();
        facts.seccomp = false;
        for (tier, backend) in [
            (Tier::B, TierCBackend::Native),
            (Tier::C, TierCBackend::Native),
            (Tier::C, TierCBackend::Bwrap),
        ] {
            plan.tier.backend = backend;
            match layers_for(tier, &plan, &facts) {
                Err(Rejection::TierUnavailable { reason, .. }) => {
                    assert!(reason.contains("setuid"), "{reason}");
                    assert!(!reason.contains("optional_layers"), "{reason}");
                }
                other => panic!("{tier} {backend:?}: {other:?}"),
            }
        }
        facts.seccomp = true;
        plan.tier.backend = TierCBackend::Native;
        assert!(layers_for(Tier::B, &plan, &facts).is_ok());
    }

    /// An unprivileged supervisor cannot bound Tier B's `TMPDIR`: the layer is missing,
    /// recorded when the policy accepts it and refused otherwise — with a fix that works.
    #[test]
    fn an_unprivileged_tier_b_run_lacks_the_disk_layer() {
        let mut plan = crate::test_fixtures::golden_plan("strict.toml");
        plan.tier.optional_layers = OPTIONAL.to_vec();
        let mut facts = host_facts().clone();
        facts.euid = 1000;
        facts.seccomp = true;
        let reason = match layers_for(Tier::B, &plan, &facts) {
            Err(Rejection::TierUnavailable { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason.contains("disk cannot be enforced"), "{reason}");
        assert!(
            reason.contains("\"disk\" in tier.optional_layers"),
            "{reason}"
        );
        plan.tier.optional_layers.push(Layer::Disk);
        let missing = layers_for(Tier::B, &plan, &facts).unwrap();
        assert!(missing.contains(&Layer::Disk), "{missing:?}");
        // Tier C bounds its /tmp itself.
        assert!(
            !layers_for(Tier::C, &plan, &facts)
                .unwrap_or_default()
                .contains(&Layer::Disk)
        );
    }
}
