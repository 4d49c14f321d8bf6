//! Who the client is (ATTACKS A27). The socket peer, unless the peer is a configured trusted
//! proxy: then the client is named by the proxy's PROXY protocol v2 header (when
//! `proxy_protocol` is on) or by the one forwarding header the operator configured.
//!
//! ```text
//!  peer (socket, or the PROXY v2 source)  in trusted_proxies?
//!    ├─ no  ─▶ the client is the peer; every forwarding header it sent is ignored (and dropped
//!    │         before forwarding)
//!    └─ yes ─▶ walk the configured header's addresses right to left, skipping trusted ones;
//!              the first untrusted address is the client (what the last trusted hop saw).
//!              Missing or unreadable header: the peer.
//! ```
//!
//! Reading from the right matters: a client may put anything in the leftmost entries; only the
//! entries appended by trusted hops are believed.
//!
//! With `proxy_protocol` on, no forwarding header is read at all: the connection layer
//! (`conn::AddProxiedPeer`) removes them from every request, so the client is the PROXY
//! header's source, or the socket peer after a `LOCAL` header (a balancer's health check),
//! never an address the client wrote.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use crate::config::ClientIpHeader;
use crate::error::EdgeError;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The peers whose forwarding information is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses CIDRs (`10.0.0.0/8`) and plain addresses (`192.0.2.7`, a /32 or /128).
    pub fn parse(entries: &[String]) -> Result<Self, EdgeError> {
        entries
            .iter()
            .map(|e| {
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        EdgeError::Config(format!(
                            "trusted_proxies: {e:?} is not a CIDR or an IP address"
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    /// Whether `ip` is a trusted proxy. An IPv4-mapped IPv6 address counts as its IPv4 form.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|n| n.contains(&ip))
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client address of a request whose connection comes from `peer` (see the module doc).
pub(crate) fn resolve(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &TrustedProxies,
    which: ClientIpHeader,
) -> IpAddr {
    if !trusted.contains(peer) {
        return canonical(peer);
    }
    let (name, hop): (_, fn(&str) -> Option<IpAddr>) = match which {
        ClientIpHeader::XForwardedFor => (X_FORWARDED_FOR, |s| parse_hop(s.trim())),
        ClientIpHeader::Forwarded => (http::header::FORWARDED, forwarded_for),
    };
    // Right to left, in place: the last header's last element first.
    let hops = headers
        .get_all(name)
        .iter()
        .rev()
        .flat_map(|v| v.to_str().unwrap_or("\u{0}").rsplit(','))
        .map(hop);
    for hop in hops {
        match hop {
            Some(ip) if trusted.contains(ip) => continue,
            Some(ip) => return canonical(ip),
            // A trusted hop wrote something unreadable: believe nothing further left.
            None => break,
        }
    }
    canonical(peer)
}

/// One address of a forwarding list: `192.0.2.1`, `192.0.2.1:443`, `2001:db8::1`,
/// `[2001:db8::1]:443`. Anything else (`unknown`, obfuscated identifiers) is `None`.
fn parse_hop(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let (host, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The `for=` address of one `Forwarded` element (`for=192.0.2.60;proto=https`,
/// `for="[2001:db8::17]:4711"`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        parse_hop(v.trim().trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn h(name: &'static str, v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.append(name, v.parse().unwrap());
        m
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let none = TrustedProxies::default();
        for headers in [
            h("x-forwarded-for", "6.6.6.6"),
            h("forwarded", "for=6.6.6.6"),
            h("x-real-ip", "6.6.6.6"),
        ] {
            for which in [ClientIpHeader::XForwardedFor, ClientIpHeader::Forwarded] {
                assert_eq!(
                    resolve(ip("198.51.100.9"), &headers, &none, which),
                    ip("198.51.100.9")
                );
            }
        }
    }

    #[test]
    fn a_trusted_proxy_names_the_client_read_from_the_right() {
        let t = TrustedProxies::parse(&["10.0.0.0/8".into(), "192.0.2.7".into()]).unwrap();
        let xff = ClientIpHeader::XForwardedFor;
        // The client prepended a lie; the proxies appended the truth.
        let headers = h("x-forwarded-for", "6.6.6.6, 203.0.113.5, 10.1.2.3");
        assert_eq!(
            resolve(ip("192.0.2.7"), &headers, &t, xff),
            ip("203.0.113.5")
        );
        // Ports and brackets.
        let headers = h("x-forwarded-for", "203.0.113.5:5555");
        assert_eq!(
            resolve(ip("10.0.0.1"), &headers, &t, xff),
            ip("203.0.113.5")
        );
        // Only the configured header counts.
        let headers = h("forwarded", "for=203.0.113.5");
        assert_eq!(resolve(ip("10.0.0.1"), &headers, &t, xff), ip("10.0.0.1"));
        let fwd = ClientIpHeader::Forwarded;
        let headers = h(
            "forwarded",
            r#"for=6.6.6.6, for="[2001:db8::17]:4711";proto=https"#,
        );
        assert_eq!(
            resolve(ip("10.0.0.1"), &headers, &t, fwd),
            ip("2001:db8::17")
        );
        // Garbage appended by a trusted hop: believe nothing further left.
        let headers = h("x-forwarded-for", "203.0.113.5, unknown");
        assert_eq!(resolve(ip("10.0.0.1"), &headers, &t, xff), ip("10.0.0.1"));
        // IPv4-mapped peers are their IPv4 selves.
        assert!(t.contains(ip("::ffff:10.9.9.9")));
    }

    #[test]
    fn a_bad_trusted_proxy_entry_is_a_config_error() {
        let e = TrustedProxies::parse(&["10.0.0.0/33".into()]).unwrap_err();
        assert!(e.to_string().contains("trusted_proxies"), "{e}");
    }
}
