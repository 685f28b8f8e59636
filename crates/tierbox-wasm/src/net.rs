//! Tier A's network: a component's `wasi:sockets` reach exactly the plan's network grants.
//!
//! - **Name lookups** (`wasi:sockets/ip-name-lookup`) are answered by the host from the
//!   plan: a granted name resolves to the first address validation resolved it to (once,
//!   for the whole run), an address literal to itself, and any other name is refused
//!   (`access-denied`) without a DNS query — so a guest cannot leak data through the
//!   names it looks up.
//! - **Connects** are allowed only to a granted address at the granted port
//!   (`socket_addr_check`); implicit binds to the wildcard address with port 0 (what a
//!   connect makes) pass; listening, accepting, explicit binds and UDP are refused.
//! - Every connect and every refusal is counted in [`NetReport`], which the run's report
//!   carries (the runner turns the refusals into denials).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tierbox_policy::wasm::NetGrant;
use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::SocketError;
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{
    Host, HostResolveAddressStream, ResolveAddressStream,
};
use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, IpAddress, Network};
use wasmtime_wasi::sockets::{SocketAddrUse, WasiSocketsCtxView};

/// Most distinct targets [`NetReport`] lists per kind (allowed, refused); further ones
/// are only counted in `more`.
pub const MAX_NET_TARGETS: usize = 64;

/// What a run's guest did with its network grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetReport {
    /// Connects made, by `address:port`, with how many.
    pub connects: BTreeMap<String, u64>,
    /// What was refused, by `operation target` (`lookup other.example`, `connect
    /// 10.0.0.1:80`, `listen 0.0.0.0:8080`), with how many.
    pub refused: BTreeMap<String, u64>,
    /// Targets past [`MAX_NET_TARGETS`] in either list, counted but not named.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl NetReport {
    fn count(&mut self, refused: bool, key: String) {
        let map = if refused {
            &mut self.refused
        } else {
            &mut self.connects
        };
        let room = map.len() < MAX_NET_TARGETS;
        match map.get_mut(&key) {
            Some(n) => *n += 1,
            None if room => {
                map.insert(key, 1);
            }
            None => self.more += 1,
        }
    }
}

/// A run's network grants and what the guest did with them.
#[derive(Debug, Default)]
pub(crate) struct NetGuard {
    grants: Vec<NetGrant>,
    report: Mutex<NetReport>,
}

impl NetGuard {
    pub(crate) fn new(grants: &[NetGrant]) -> Arc<Self> {
        Arc::new(Self {
            grants: grants.to_vec(),
            report: Mutex::new(NetReport::default()),
        })
    }

    /// The report, or `None` when the run had no grant and nothing was refused.
    pub(crate) fn report(&self) -> Option<NetReport> {
        let r = self.report.lock().map(|r| r.clone()).unwrap_or_default();
        (!self.grants.is_empty() || !r.refused.is_empty()).then_some(r)
    }

    fn record(&self, refused: bool, key: String) {
        if let Ok(mut r) = self.report.lock() {
            r.count(refused, key);
        }
    }

    /// The address a lookup of `name` answers with: itself for an address literal, the
    /// first resolved address of a granted name, `None` (refused) for anything else.
    fn answer(&self, name: &str) -> Option<String> {
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<IpAddr>().is_ok() {
            return Some(bare.to_owned());
        }
        let canonical = name.trim_end_matches('.').to_ascii_lowercase();
        let answer = self
            .grants
            .iter()
            .find(|g| g.host == canonical)
            .and_then(|g| g.addrs.first())
            .map(ToString::to_string);
        if answer.is_none() {
            self.record(true, format!("lookup {canonical}"));
        }
        answer
    }

    /// Whether `addr` may be used for `use_`.
    fn allows(&self, addr: SocketAddr, use_: SocketAddrUse) -> bool {
        let (ok, what) = match use_ {
            SocketAddrUse::TcpConnect => (
                self.grants
                    .iter()
                    .any(|g| g.port == addr.port() && g.addrs.contains(&addr.ip())),
                "connect",
            ),
            // The bind a connect makes: any local address and port.
            SocketAddrUse::TcpBind => (addr.ip().is_unspecified() && addr.port() == 0, "bind"),
            SocketAddrUse::TcpListen => (false, "listen"),
            SocketAddrUse::TcpAccept => (false, "accept"),
            _ => (false, "udp"),
        };
        match (ok, what) {
            (true, "connect") => self.record(false, addr.to_string()),
            (true, _) => {}
            (false, _) => self.record(true, format!("{what} {addr}")),
        }
        ok
    }
}

/// Configures `b` for the run's grants: TCP and name lookups (answered by the host, see
/// [`LookupView`]) only when there is one, every use of an address checked by `guard`.
pub(crate) fn configure(b: &mut wasmtime_wasi::WasiCtxBuilder, guard: &Arc<NetGuard>) {
    let granted = !guard.grants.is_empty();
    let check = guard.clone();
    b.allow_tcp(granted)
        .allow_udp(false)
        .allow_ip_name_lookup(granted)
        .socket_addr_check(move |addr, use_| {
            let ok = check.allows(addr, use_);
            Box::pin(async move { ok })
        });
}

/// The store data that answers name lookups: `wasmtime_wasi`'s own sockets view and the
/// run's guard.
pub(crate) struct LookupView<'a> {
    pub(crate) inner: WasiSocketsCtxView<'a>,
    pub(crate) guard: Arc<NetGuard>,
}

/// [`LookupView`] as the linker's host data for `wasi:sockets/ip-name-lookup`.
pub(crate) struct GuardedLookup;

impl HasData for GuardedLookup {
    type Data<'a> = LookupView<'a>;
}

impl wasmtime_wasi::p2::bindings::sockets::network::Host for LookupView<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        wasmtime_wasi::p2::bindings::sockets::network::Host::convert_error_code(
            &mut self.inner,
            error,
        )
    }

    fn network_error_code(
        &mut self,
        err: Resource<wasmtime_wasi::p2::bindings::sockets::network::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        wasmtime_wasi::p2::bindings::sockets::network::Host::network_error_code(
            &mut self.inner,
            err,
        )
    }
}

impl wasmtime_wasi::p2::bindings::sockets::network::HostNetwork for LookupView<'_> {
    fn drop(&mut self, this: Resource<Network>) -> wasmtime::Result<()> {
        wasmtime_wasi::p2::bindings::sockets::network::HostNetwork::drop(&mut self.inner, this)
    }
}

impl Host for LookupView<'_> {
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
    ) -> Result<Resource<ResolveAddressStream>, SocketError> {
        match self.guard.answer(&name) {
            // An address literal: wasmtime answers it without a query.
            Some(address) => self.inner.resolve_addresses(network, address),
            None => Err(ErrorCode::AccessDenied.into()),
        }
    }
}

impl HostResolveAddressStream for LookupView<'_> {
    fn resolve_next_address(
        &mut self,
        resource: Resource<ResolveAddressStream>,
    ) -> Result<Option<IpAddress>, SocketError> {
        self.inner.resolve_next_address(resource)
    }

    fn subscribe(
        &mut self,
        resource: Resource<ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        HostResolveAddressStream::subscribe(&mut self.inner, resource)
    }

    fn drop(&mut self, resource: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        HostResolveAddressStream::drop(&mut self.inner, resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Arc<NetGuard> {
        NetGuard::new(&[NetGrant {
            host: "api.test".to_owned(),
            port: 443,
            addrs: vec![
                "93.184.215.14".parse().unwrap(),
                "2606:2800::1".parse().unwrap(),
            ],
        }])
    }

    #[test]
    fn lookups_answer_granted_names_and_literals_only() {
        let g = guard();
        assert_eq!(g.answer("api.test").as_deref(), Some("93.184.215.14"));
        assert_eq!(g.answer("API.test.").as_deref(), Some("93.184.215.14"));
        assert_eq!(g.answer("10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(g.answer("[::1]").as_deref(), Some("::1"));
        assert_eq!(g.answer("other.test"), None);
        assert_eq!(g.report().unwrap().refused["lookup other.test"], 1);
    }

    #[test]
    fn connects_reach_granted_addresses_at_the_granted_port_only() {
        let g = guard();
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(g.allows(at("93.184.215.14:443"), SocketAddrUse::TcpConnect));
        assert!(g.allows(at("[2606:2800::1]:443"), SocketAddrUse::TcpConnect));
        assert!(!g.allows(at("93.184.215.14:80"), SocketAddrUse::TcpConnect));
        assert!(!g.allows(at("127.0.0.1:443"), SocketAddrUse::TcpConnect));
        assert!(g.allows(at("0.0.0.0:0"), SocketAddrUse::TcpBind));
        assert!(!g.allows(at("0.0.0.0:8080"), SocketAddrUse::TcpBind));
        assert!(!g.allows(at("0.0.0.0:0"), SocketAddrUse::TcpListen));
        assert!(!g.allows(at("93.184.215.14:443"), SocketAddrUse::UdpSend));
        let r = g.report().unwrap();
        assert_eq!(r.connects["93.184.215.14:443"], 1);
        assert_eq!(r.refused["connect 127.0.0.1:443"], 1);
        assert_eq!(r.refused["listen 0.0.0.0:0"], 1);
        assert!(NetGuard::new(&[]).report().is_none());
    }

    #[test]
    fn the_report_is_bounded() {
        let mut r = NetReport::default();
        for i in 0..(MAX_NET_TARGETS + 5) {
            r.count(true, format!("lookup h{i}"));
        }
        assert_eq!((r.refused.len(), r.more), (MAX_NET_TARGETS, 5));
    }
}
