//! Tier A's network grant (`grants.network`): each `HOST:PORT` must be allowed by the
//! policy's egress as a Tier B or C run's connection would be, and is resolved here, once
//! (`egress.resolve`, else DNS): the guest's name lookups answer with exactly those
//! addresses and it may connect to nothing else (`wasi:sockets` connects by address, so
//! a name checked at lookup and an address dialled later are tied together here). An
//! address in a special range (loopback, private, link-local, cloud metadata, …) is
//! refused unless an `egress.allow` address entry covers it, or the grant names that
//! address itself under `allow_all`.

use std::net::{IpAddr, ToSocketAddrs};

use crate::hosts::{CanonicalHost, HostPattern, article, parse_host_and_port, special_range};
use crate::policy::{EgressMode, EgressPolicy};
use crate::rejection::Rejection;
use crate::wasm::{MAX_GRANT_ADDRS, MAX_NETWORK_GRANTS, NetGrant};

/// The request's network grants, checked against `egress` and resolved.
pub(super) fn grants(
    egress: &EgressPolicy,
    entries: &[String],
) -> Result<Vec<NetGrant>, Rejection> {
    if entries.len() > MAX_NETWORK_GRANTS {
        return Err(denied(format!(
            "{} hosts asked for, more than the cap of {MAX_NETWORK_GRANTS}",
            entries.len()
        )));
    }
    let allow: Vec<HostPattern> = egress.allow.iter().filter_map(|a| a.parse().ok()).collect();
    let mut out: Vec<NetGrant> = Vec::with_capacity(entries.len());
    for entry in entries {
        let grant = one(egress, &allow, entry)?;
        if !out
            .iter()
            .any(|g| g.host == grant.host && g.port == grant.port)
        {
            out.push(grant);
        }
    }
    Ok(out)
}

fn one(egress: &EgressPolicy, allow: &[HostPattern], entry: &str) -> Result<NetGrant, Rejection> {
    let (host, port) = parse_host_and_port(entry)
        .map_err(|e| denied(format!("{entry:?} is not HOST:PORT: {e}")))?;
    let Some(port) = port.filter(|p| *p != 0) else {
        return Err(denied(format!(
            "{entry:?} names no port: a component connects to one port of a host, give HOST:PORT"
        )));
    };
    let target = host.with_port(Some(port));
    let allowed_by = |h: &CanonicalHost| allow.iter().any(|p| p.matches_host(h, Some(port)));
    match egress.mode {
        EgressMode::BlockAll => {
            return Err(denied(format!(
                "{target}: egress.mode = \"block_all\" allows no network in any tier; to allow: egress.mode = \"strict\" and egress.allow += \"{target}\""
            )));
        }
        EgressMode::Strict | EgressMode::Preflight if !allowed_by(&host) => {
            return Err(denied(format!(
                "{target} is not in the policy's egress.allow; to allow: egress.allow += \"{target}\""
            )));
        }
        EgressMode::AllowAll | EgressMode::Strict | EgressMode::Preflight => {}
    }
    let addrs = resolve(egress, &host, port, &target)?;
    let names_itself = matches!(host, CanonicalHost::Ip(_));
    for addr in &addrs {
        let Some(range) = special_range(*addr) else {
            continue;
        };
        let covered = allow
            .iter()
            .any(|p| p.is_address() && p.matches_host(&CanonicalHost::Ip(*addr), Some(port)));
        let named = names_itself && egress.mode == EgressMode::AllowAll;
        if !(covered || named) {
            return Err(denied(format!(
                "{target} resolves to {addr}, {} {range} address, which only an egress.allow address entry lets a run reach; to allow: egress.allow += \"{}\"",
                article(range),
                CanonicalHost::Ip(*addr).with_port(Some(port))
            )));
        }
    }
    Ok(NetGrant {
        host: host.to_string(),
        port,
        addrs,
    })
}

/// The addresses of `host`: itself (an address), the policy's `egress.resolve` entry, or
/// the system resolver's answer — at most [`MAX_GRANT_ADDRS`], duplicates removed.
fn resolve(
    egress: &EgressPolicy,
    host: &CanonicalHost,
    port: u16,
    target: &str,
) -> Result<Vec<IpAddr>, Rejection> {
    let mut addrs: Vec<IpAddr> = match host {
        CanonicalHost::Ip(ip) => vec![*ip],
        CanonicalHost::Name(name) => match egress.resolve.get(name.as_str()) {
            Some(fixed) => fixed.clone(),
            None => (name.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| denied(format!("{target} does not resolve ({e})")))?
                .map(|a| a.ip().to_canonical())
                .collect(),
        },
    };
    let mut seen = Vec::with_capacity(addrs.len());
    addrs.retain(|a| {
        let new = !seen.contains(a);
        seen.push(*a);
        new
    });
    addrs.truncate(MAX_GRANT_ADDRS);
    match addrs.is_empty() {
        true => Err(denied(format!("{target} resolves to no address"))),
        false => Ok(addrs),
    }
}

fn denied(reason: String) -> Rejection {
    Rejection::WasmGrantDenied {
        grant: "network".to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(mode: EgressMode, allow: &[&str]) -> EgressPolicy {
        EgressPolicy {
            mode,
            allow: allow.iter().map(|a| (*a).to_owned()).collect(),
            resolve: [
                (
                    "api.test".to_owned(),
                    vec!["93.184.215.14".parse().unwrap()],
                ),
                ("inside.test".to_owned(), vec!["10.1.2.3".parse().unwrap()]),
            ]
            .into(),
            ..EgressPolicy::default()
        }
    }

    fn reason(r: Result<Vec<NetGrant>, Rejection>) -> String {
        match r {
            Err(Rejection::WasmGrantDenied { grant, reason }) if grant == "network" => reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn grants_are_allowed_by_egress_and_resolved_once() {
        let e = egress(EgressMode::Strict, &["api.test:443"]);
        let g = grants(&e, &["api.test:443".to_owned()]).unwrap();
        assert_eq!(g[0].addrs, ["93.184.215.14".parse::<IpAddr>().unwrap()]);
        assert_eq!((g[0].host.as_str(), g[0].port), ("api.test", 443));
        let r = reason(grants(&e, &["api.test:80".to_owned()]));
        assert!(r.contains("egress.allow += \"api.test:80\""), "{r}");
        let r = reason(grants(&e, &["api.test".to_owned()]));
        assert!(r.contains("names no port"), "{r}");
        let r = reason(grants(
            &egress(EgressMode::BlockAll, &[]),
            &["api.test:443".to_owned()],
        ));
        assert!(r.contains("block_all"), "{r}");
        let many: Vec<String> = (0..=MAX_NETWORK_GRANTS)
            .map(|i| format!("h{i}.test:1"))
            .collect();
        assert!(reason(grants(&egress(EgressMode::AllowAll, &[]), &many)).contains("cap"));
    }

    #[test]
    fn special_addresses_need_an_address_entry() {
        let e = egress(EgressMode::Strict, &["inside.test:8080"]);
        let r = reason(grants(&e, &["inside.test:8080".to_owned()]));
        assert!(
            r.contains("a private address") && r.contains("10.1.2.3:8080"),
            "{r}"
        );
        let e = egress(EgressMode::Strict, &["inside.test:8080", "10.0.0.0/8"]);
        assert!(grants(&e, &["inside.test:8080".to_owned()]).is_ok());
        // allow_all: a name leading to loopback is still refused; the address itself,
        // granted by name, is not.
        let e = egress(EgressMode::AllowAll, &[]);
        assert!(grants(&e, &["127.0.0.1:5432".to_owned()]).is_ok());
        let r = reason(grants(&e, &["inside.test:8080".to_owned()]));
        assert!(r.contains("private"), "{r}");
        let e = egress(EgressMode::Strict, &["127.0.0.1:5432"]);
        assert!(grants(&e, &["127.0.0.1:5432".to_owned()]).is_ok());
        let r = reason(grants(&e, &["169.254.169.254:80".to_owned()]));
        assert!(r.contains("egress.allow"), "{r}");
    }
}
