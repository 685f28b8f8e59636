//! Tier selection: the policy's minimum, the request's tier, and what this host can
//! enforce. `auto` picks the strongest tier available; a minimum that cannot be enforced
//! is a [`Rejection::TierUnavailable`] with the concrete reason — never a silent downgrade.

use tierbox_policy::plan::Plan;
use tierbox_policy::{Rejection, Tier, TierCBackend, TierRequest};

pub use crate::backend::{Unavailable, Unsupported};
use crate::probe::HostFacts;

/// Whether `tier` can run native programs on this host, and why not.
pub fn tier_available(tier: Tier, facts: &HostFacts) -> Result<(), Unavailable> {
    match tier {
        Tier::B => {
            if facts.seccomp || facts.landlock_abi.is_some() {
                Ok(())
            } else {
                Err(Unavailable::NoKernelLayers)
            }
        }
        Tier::C => match crate::linux::userns::probe_userns_cached().reason() {
            None => Ok(()),
            Some(reason) => Err(Unavailable::UserNamespaces(reason.to_owned())),
        },
        Tier::A => Err(Unavailable::WasmOnly),
    }
}

/// Whether `tier` can run `plan` on this host, and why not: [`tier_available`], except
/// that Tier C on a container backend needs a reachable engine instead of user
/// namespaces.
pub fn tier_available_for(tier: Tier, plan: &Plan, facts: &HostFacts) -> Result<(), Unavailable> {
    match crate::container::Engine::for_backend(plan.tier.backend) {
        Some(engine) if tier == Tier::C => crate::container::probe::probe_engine_cached(engine)
            .map(|_| ())
            .map_err(|e| Unavailable::Engine {
                backend: plan.tier.backend,
                reason: e.to_string(),
            }),
        _ => tier_available(tier, facts),
    }
}

/// Whether `tier` can carry out what `plan` asks for (beyond the host's kernel features),
/// and why not: the answer of the backend that would run it ([`Backend::supports`]).
///
/// Tier C gives every run its own network namespace with only loopback, so no Tier C
/// backend provides the host network that `allow_all` and `preflight` promise; a `strict`
/// allowlist is carried out by the native backend, by bwrap under a root supervisor, and
/// not by the container backends (`--network none`). Tier B carries out every Plan.
///
/// [`Backend::supports`]: crate::backend::Backend::supports
pub fn tier_supports(tier: Tier, plan: &Plan, facts: &HostFacts) -> Result<(), Unsupported> {
    let backend = crate::backend::for_plan(plan, tier);
    // The per-run CA's bundle and the placeholders: the Linux backends of Tier B and the
    // native and bwrap backends of Tier C; credentials in Tier C only.
    let terminates = cfg!(target_os = "linux")
        && (tier == Tier::B
            || matches!(
                plan.tier.backend,
                TierCBackend::Native | TierCBackend::Bwrap
            ));
    if !terminates {
        crate::backend::no_terminated_hosts_on(plan, backend.name())?;
    }
    if !terminates {
        // The same backends relay published ports and host ports (Tier B refuses both
        // with its own reason).
        crate::backend::no_reach_on(plan, backend.name())?;
    }
    if tier == Tier::B {
        crate::backend::no_credentials_in_tier_b(plan)?;
    }
    backend.supports(plan, facts)
}

/// Picks the tier for `plan` on this host: for `auto` the strongest tier whose backend
/// is available, carries out the plan, and applies every layer the policy requires here
/// (`layers_for`, the check each launch makes too), never below
/// `tier.minimum`; for a named tier that tier, or the rejection its launch would give.
///
/// ```no_run
/// # fn demo(plan: &tierbox_policy::Plan) {
/// let facts = tierbox_sandbox::probe::host_facts();
/// let tier = tierbox_sandbox::select::select_tier(plan, facts);
/// # }
/// ```
pub fn select_tier(plan: &Plan, facts: &HostFacts) -> Result<Tier, Rejection> {
    select(plan, facts).map(|s| s.tier)
}

/// The tier [`select`] picked for a plan, and what `auto` passed over to pick it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The tier the run gets.
    pub tier: Tier,
    /// Under `auto`, when a tier stronger than [`Selection::tier`] (and at least
    /// `tier.minimum`) could not run the plan here: that tier, its backend and why, in
    /// words (`tier c: tier.backend = "docker": docker engine unreachable: …`, `tier c
    /// (native): user namespaces …`). `None` when the strongest
    /// tier the policy allows was picked, or the request named its tier.
    pub passed_over: Option<String>,
}

/// [`select_tier`], saying what `auto` passed over: a weaker tier is allowed by
/// `tier.minimum`, never silent — the outcome and the attestation carry the reason
/// (`enforcement.passed_over`).
pub fn select(plan: &Plan, facts: &HostFacts) -> Result<Selection, Rejection> {
    let unavailable = |tier: Tier, reason: String| Rejection::TierUnavailable { tier, reason };
    match plan.tier.requested {
        TierRequest::Auto => {
            // Strongest first among native-program tiers, never below the minimum.
            let mut last_reason = String::new();
            let mut passed_over = None;
            for tier in [Tier::C, Tier::B] {
                if tier < plan.tier.minimum {
                    continue;
                }
                // `Err(Ok(reason))`: this tier cannot; `Err(Err(rejection))`: the plan
                // cannot run in this tier, and no weaker one is tried.
                let usable = tier_available_for(tier, plan, facts)
                    .map_err(|e| Ok(e.to_string()))
                    .and_then(|()| {
                        tier_supports(tier, plan, facts).map_err(|e| Ok(e.reason().to_owned()))
                    })
                    // A layer the policy requires and this backend cannot apply here
                    // (bwrap's landlock, say): the next tier may.
                    .and_then(|()| match crate::layers::layers_for(tier, plan, facts) {
                        Ok(_) => Ok(()),
                        // Not a layer: an argument no weaker tier can carry out either.
                        Err(e @ Rejection::PathNeedsPrivateTmp { .. }) => Err(Err(e)),
                        Err(e) => Err(Ok(e.to_string())),
                    });
                match usable {
                    Ok(()) => return Ok(Selection { tier, passed_over }),
                    Err(Err(rejection)) => return Err(rejection),
                    Err(Ok(reason)) => {
                        let backend = plan.tier.backend.to_string();
                        passed_over = Some(if tier == Tier::C && !reason.contains(&backend) {
                            format!("tier c ({backend}): {reason}")
                        } else {
                            format!("tier {tier}: {reason}")
                        });
                        last_reason = reason;
                    }
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
            tier_available_for(tier, plan, facts).map_err(|e| unavailable(tier, e.to_string()))?;
            tier_supports(tier, plan, facts).map_err(|e| Rejection::TierUnsupported {
                tier,
                feature: e.feature(),
                reason: e.reason().to_owned(),
            })?;
            if tier != Tier::A {
                crate::layers::layers_for(tier, plan, facts)?;
            }
            Ok(Selection {
                tier,
                passed_over: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use tierbox_policy::{EgressMode, ProcessRunRequest, TierCBackend, ValidateContext, validate};

    use super::*;
    use crate::test_fixtures::{policy, scratch};

    fn plan(mode: EgressMode, allow: &[&str], backend: TierCBackend) -> Plan {
        let s = scratch();
        let mut p = policy("strict.toml");
        p.exec.allowed_executables = vec!["true".to_owned()];
        p.egress.mode = mode;
        p.egress.allow = allow.iter().map(|a| (*a).to_owned()).collect();
        p.tier.backend = backend;
        if backend.is_container() {
            p.tier.container.image = Some("localhost/tools:1".to_owned());
        }
        let ctx = ValidateContext::new(&s.ws).with_env(BTreeMap::new());
        validate(&p, &ProcessRunRequest::new("true"), &ctx).unwrap()
    }

    /// A container backend whose engine does not answer is `tier.unavailable` with the
    /// engine's reason; `auto` then falls back to Tier B (never a silent downgrade of an
    /// explicit `--tier c`).
    #[test]
    fn an_unreachable_engine_makes_tier_c_unavailable() {
        let p = plan(EgressMode::BlockAll, &[], TierCBackend::Docker);
        let facts = crate::probe::host_facts();
        match crate::container::probe::probe_engine(crate::container::Engine::Docker) {
            Ok(_) => {
                tierbox_test_support::skip_optional_here("a docker engine answers on this host");
            }
            Err(e) => {
                let mut asked = p.clone();
                asked.tier.requested = TierRequest::C;
                let err = select_tier(&asked, facts).unwrap_err();
                assert_eq!(err.code(), "tier.unavailable");
                assert!(err.to_string().contains(&e.to_string()), "{err}");
                if tier_available(Tier::B, facts).is_ok() {
                    // Said, with the backend and the engine's reason: never silent.
                    let s = select(&p, facts).unwrap();
                    assert_eq!(s.tier, Tier::B);
                    let why = s.passed_over.unwrap();
                    assert!(why.starts_with("tier c: "), "{why}");
                    assert!(why.contains("docker"), "{why}");
                    assert!(why.contains(&e.to_string()), "{why}");
                }
            }
        }
    }

    /// Hosts whose TLS the proxy terminates run in Tier B and on the native and bwrap
    /// backends; credentials only in Tier C, and Tier B refuses them typed, naming the
    /// key and why (other local users reach its proxy); a container backend refuses
    /// terminated hosts (and every allowlist).
    #[test]
    fn terminated_hosts_run_in_tier_b_and_c_and_credentials_only_in_c() {
        let mut p = plan(EgressMode::Strict, &["api.test:443"], TierCBackend::Native);
        p.network.terminated.insert(
            "api.test".to_owned(),
            tierbox_policy::plan::TerminatedHost {
                allow: vec!["GET /x".to_owned()],
                credentials: Vec::new(),
            },
        );
        let mut root = crate::probe::host_facts().clone();
        root.euid = 0;
        for backend in [TierCBackend::Native, TierCBackend::Bwrap] {
            let mut p = p.clone();
            p.tier.backend = backend;
            assert_eq!(tier_supports(Tier::C, &p, &root), Ok(()), "{backend}");
        }
        assert_eq!(tier_supports(Tier::B, &p, &root), Ok(()));
        let mut with_secret = p.clone();
        with_secret
            .network
            .terminated
            .get_mut("api.test")
            .unwrap()
            .credentials
            .push(tierbox_policy::policy::CredentialPolicy {
                name: "api".to_owned(),
                host: "api.test".to_owned(),
                header: Some("Authorization".to_owned()),
                query: None,
                env: "API_TOKEN".to_owned(),
                secret: tierbox_policy::policy::SecretSource {
                    env: Some("API_TOKEN".to_owned()),
                    file: None,
                },
            });
        assert_eq!(tier_supports(Tier::C, &with_secret, &root), Ok(()));
        let e = tier_supports(Tier::B, &with_secret, &root).unwrap_err();
        assert_eq!(e, Unsupported::CredentialsInTierB);
        assert!(
            e.feature().contains("egress.credentials"),
            "{}",
            e.feature()
        );
        assert!(e.reason().contains("use tier c"), "{}", e.reason());
        let mut asked = with_secret.clone();
        asked.tier.requested = TierRequest::B;
        let err = select_tier(&asked, &root).unwrap_err();
        assert_eq!(err.code(), "tier.unsupported", "{err}");
        assert!(err.to_string().contains("egress.credentials"), "{err}");
        for backend in [TierCBackend::Docker, TierCBackend::Podman] {
            let mut p = p.clone();
            p.tier.backend = backend;
            let e = tier_supports(Tier::C, &p, &root).unwrap_err();
            assert!(
                matches!(e, Unsupported::TerminatedHosts { .. }),
                "{backend}: {e}"
            );
        }
    }

    /// Published ports and host ports: Tier C native and bwrap (bwrap under a root
    /// supervisor); Tier B and the containers refuse them, naming the key and why.
    #[test]
    fn reach_is_tier_c_native_and_bwrap_only() {
        let facts = crate::probe::host_facts();
        let mut root = facts.clone();
        root.euid = 0;
        let mut user = facts.clone();
        user.euid = 1000;
        let mut p = plan(EgressMode::BlockAll, &[], TierCBackend::Native);
        p.network.host_ports = vec![5432];
        assert_eq!(tier_supports(Tier::C, &p, &user), Ok(()));
        let e = tier_supports(Tier::B, &p, &root).unwrap_err();
        assert_eq!(
            e,
            Unsupported::ReachInTierB {
                key: "egress.host_ports"
            }
        );
        assert!(e.reason().contains("use tier c"), "{}", e.reason());
        p.network.publish = vec![tierbox_policy::reach::PublishedPort {
            host_port: 8080,
            sandbox_port: 8000,
        }];
        let e = tier_supports(Tier::B, &p, &root).unwrap_err();
        assert_eq!(e.feature(), "egress.publish in tier b");
        let mut bwrap = p.clone();
        bwrap.tier.backend = TierCBackend::Bwrap;
        assert_eq!(tier_supports(Tier::C, &bwrap, &root), Ok(()));
        let e = tier_supports(Tier::C, &bwrap, &user).unwrap_err();
        assert!(matches!(e, Unsupported::ReachUnprivileged { .. }), "{e:?}");
        for backend in [TierCBackend::Docker, TierCBackend::Podman] {
            let mut c = p.clone();
            c.tier.backend = backend;
            let e = tier_supports(Tier::C, &c, &root).unwrap_err();
            assert!(matches!(e, Unsupported::ReachOnBackend { .. }), "{e:?}");
        }
    }

    #[test]
    fn tier_c_supports_an_allowlist_on_native_and_on_bwrap_under_a_root_supervisor() {
        let facts = crate::probe::host_facts();
        let mut root = facts.clone();
        root.euid = 0;
        let mut user = facts.clone();
        user.euid = 1000;
        let native = plan(EgressMode::Strict, &["crates.io"], TierCBackend::Native);
        assert_eq!(tier_supports(Tier::C, &native, &user), Ok(()));
        let bwrap = plan(EgressMode::Strict, &["crates.io"], TierCBackend::Bwrap);
        assert_eq!(tier_supports(Tier::C, &bwrap, &root), Ok(()));
        let e = tier_supports(Tier::C, &bwrap, &user).unwrap_err();
        let (feature, reason) = (e.feature(), e.reason());
        assert!(feature.contains("bwrap"), "{feature}");
        assert!(reason.contains("root supervisor"), "{reason}");
        for backend in [TierCBackend::Docker, TierCBackend::Podman] {
            let p = plan(EgressMode::Strict, &["crates.io"], backend);
            let e = tier_supports(Tier::C, &p, &root).unwrap_err();
            let (feature, reason) = (e.feature(), e.reason());
            assert!(feature.contains(&backend.to_string()), "{feature}");
            assert!(reason.contains("--network none"), "{reason}");
            let p = plan(EgressMode::BlockAll, &[], backend);
            assert_eq!(tier_supports(Tier::C, &p, &root), Ok(()));
        }
        // No allowlist: no network, which both backends provide.
        let empty = plan(EgressMode::Strict, &[], TierCBackend::Bwrap);
        assert_eq!(tier_supports(Tier::C, &empty, &user), Ok(()));
        for mode in [EgressMode::Preflight, EgressMode::AllowAll] {
            let p = plan(mode, &["crates.io"], TierCBackend::Native);
            assert!(tier_supports(Tier::C, &p, &root).is_err(), "{mode:?}");
            assert_eq!(tier_supports(Tier::B, &p, &root), Ok(()), "{mode:?}");
        }
    }
}
