//! What `tapflow collect --listen` takes: `SCHEME://ADDR[:PORT]` URLs, one per listener, and
//! which protocol a datagram speaks.

use std::net::{SocketAddr, ToSocketAddrs};

use tapflow_wire::flowdecode::Protocol;

/// How a listener's messages travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenTransport {
    /// Datagrams, each one message.
    Udp,
    /// IPFIX messages back to back on TCP sessions (RFC 7011 §10.4).
    Tcp,
}

/// One listener: a scheme's transport on an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Listen {
    /// The scheme's protocol (the default port's; a UDP listener takes every protocol).
    pub protocol: Protocol,
    /// UDP or TCP.
    pub transport: ListenTransport,
    /// The address to bind.
    pub addr: SocketAddr,
}

/// The schemes: name, protocol, transport, default port.
const SCHEMES: &[(&str, Protocol, ListenTransport, u16)] = &[
    ("ipfix", Protocol::Ipfix, ListenTransport::Udp, 4739),
    ("ipfix+udp", Protocol::Ipfix, ListenTransport::Udp, 4739),
    ("ipfix+tcp", Protocol::Ipfix, ListenTransport::Tcp, 4739),
    ("nfv9", Protocol::NetflowV9, ListenTransport::Udp, 2055),
    ("nfv5", Protocol::NetflowV5, ListenTransport::Udp, 2055),
    ("sflow", Protocol::Sflow5, ListenTransport::Udp, 6343),
];

impl Listen {
    /// Parses `SCHEME://ADDR[:PORT]` (`ipfix://0.0.0.0:4739`, `ipfix+tcp://[::]`,
    /// `nfv9://127.0.0.1`, `sflow://0.0.0.0`); the port defaults to the scheme's (IPFIX 4739,
    /// NetFlow 2055, sFlow 6343).
    pub fn parse(url: &str) -> Result<Listen, String> {
        let names = || SCHEMES.iter().map(|s| s.0).collect::<Vec<_>>().join(", ");
        let (scheme, host) = url
            .split_once("://")
            .ok_or_else(|| format!("'{url}': expected SCHEME://ADDR[:PORT] ({})", names()))?;
        let &(_, protocol, transport, port) = SCHEMES
            .iter()
            .find(|s| s.0 == scheme)
            .ok_or_else(|| format!("'{url}': unknown scheme '{scheme}' ({})", names()))?;
        let host = host.trim_end_matches('/');
        let with_port = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port).to_string(),
            Err(_) if host.ends_with(']') || !host.contains(':') => {
                format!("{host}:{port}")
            }
            Err(_) => host.to_string(),
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("'{url}': cannot resolve {with_port}: {e}"))?
            .next()
            .ok_or_else(|| format!("'{url}': {with_port} has no address"))?;
        Ok(Listen {
            protocol,
            transport,
            addr,
        })
    }
}

/// The protocol of a datagram, from its version field: IPFIX 10, NetFlow 9 and 5 (16 bits),
/// sFlow 5 (32 bits). A UDP listener takes all four, as nfcapd does, so `nfv9://` and
/// `nfv5://` on one port are one listener.
pub fn detect(msg: &[u8]) -> Option<Protocol> {
    match msg {
        [0, 10, ..] => Some(Protocol::Ipfix),
        [0, 9, ..] => Some(Protocol::NetflowV9),
        [0, 5, ..] => Some(Protocol::NetflowV5),
        [0, 0, 0, 5, ..] => Some(Protocol::Sflow5),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_default_ports() {
        let l = Listen::parse("ipfix://127.0.0.1").unwrap();
        assert_eq!(l.addr, "127.0.0.1:4739".parse().unwrap());
        assert_eq!(l.transport, ListenTransport::Udp);
        let l = Listen::parse("ipfix+tcp://[::1]:9995").unwrap();
        assert_eq!(l.addr, "[::1]:9995".parse().unwrap());
        assert_eq!(l.transport, ListenTransport::Tcp);
        assert_eq!(Listen::parse("sflow://0.0.0.0").unwrap().addr.port(), 6343);
        assert_eq!(Listen::parse("nfv5://[::]").unwrap().addr.port(), 2055);
        assert_eq!(Listen::parse("nfv9://::1").unwrap().addr.port(), 2055);
        assert!(
            Listen::parse("netflow://1.2.3.4")
                .unwrap_err()
                .contains("unknown scheme")
        );
        assert!(
            Listen::parse("127.0.0.1:4739")
                .unwrap_err()
                .contains("expected")
        );
    }

    #[test]
    fn protocols_by_version() {
        assert_eq!(detect(&[0, 10, 0, 16]), Some(Protocol::Ipfix));
        assert_eq!(detect(&[0, 9, 0, 1]), Some(Protocol::NetflowV9));
        assert_eq!(detect(&[0, 5, 0, 1]), Some(Protocol::NetflowV5));
        assert_eq!(detect(&[0, 0, 0, 5, 0, 0, 0, 1]), Some(Protocol::Sflow5));
        assert_eq!(detect(&[0, 0, 0, 4]), None);
        assert_eq!(detect(&[]), None);
    }
}
