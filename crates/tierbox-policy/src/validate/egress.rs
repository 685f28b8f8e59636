//! Egress preflight. (Being completed.)

use crate::hosts::HostPattern;
use crate::plan::NetworkPlan;
use crate::policy::EgressPolicy;
use crate::rejection::Rejection;
use crate::request::ProcessRunRequest;

pub(crate) fn check(policy: &EgressPolicy, _req: &ProcessRunRequest) -> Result<NetworkPlan, Rejection> {
    let allow = policy.allow.iter().filter_map(|a| HostPattern::parse(a).ok()).collect();
    Ok(NetworkPlan { mode: policy.mode, allow, preflight_hosts: Vec::new() })
}
