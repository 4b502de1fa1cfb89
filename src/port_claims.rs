//! Claims on the TCP addresses a broker listens on, held for the life of its process.
//!
//! Every shard binds the Kafka bootstrap port with SO_REUSEPORT (as do the shard and
//! replication ports, so a restart can bind while a killed broker's sockets linger), and
//! Linux lets any process of the same user join such a port: a second broker started on
//! the same port would silently take a share of the connections. `broker::check_addrs_free`
//! refuses to start when something already answers on a port, but two brokers starting
//! at the same moment both find the port free and then both bind it (seen as a test's
//! connection landing on another test's broker).
//!
//! So before that check a broker claims each address it will listen on: it binds a Unix
//! socket in Linux's abstract namespace named after the address (`shardlog/listen/
//! 127.0.0.1:9092`). The namespace is per network namespace, like TCP ports; a name is
//! held by one socket at a time, atomically; and it is released when the process ends,
//! however it ends (kill -9 included), with nothing left on disk. The claim is keyed by
//! the address as configured, so it catches two brokers on the same address, not a
//! broker on 0.0.0.0:9092 beside one on 127.0.0.1:9092 (the connect probe still does,
//! unless they start together). Other software on the port is not a shardlog and does
//! not claim: it is caught by the probe, or by the bind itself unless it too uses
//! SO_REUSEPORT under the same user.

use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener};

/// The claims of one broker; dropping them (or the process ending) releases them.
pub struct PortClaims {
    _sockets: Vec<UnixListener>,
}

/// The abstract socket name that claims `addr`.
pub fn claim_name(addr: SocketAddr) -> String {
    format!("shardlog/listen/{addr}")
}

/// Claims every address in `addrs` (duplicates once), or says which one another shardlog
/// process holds.
pub fn claim(addrs: &[SocketAddr]) -> Result<PortClaims, String> {
    let mut claimed: Vec<SocketAddr> = Vec::with_capacity(addrs.len());
    let mut sockets = Vec::with_capacity(addrs.len());
    for &addr in addrs {
        if claimed.contains(&addr) {
            continue;
        }
        let name = claim_name(addr);
        let unix = UnixAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| format!("cannot claim {addr}: {e}"))?;
        match UnixListener::bind_addr(&unix) {
            Ok(socket) => sockets.push(socket),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(format!(
                    "cannot listen on {addr}: another shardlog process on this host listens \
                     there (it holds the abstract socket @{name})"
                ));
            }
            Err(e) => return Err(format!("cannot claim {addr} (abstract socket @{name}): {e}")),
        }
        claimed.push(addr);
    }
    Ok(PortClaims { _sockets: sockets })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn an_address_is_claimed_once_until_its_claim_is_dropped() {
        // Port 1 on loopback: no test or broker listens there.
        let first = claim(&[addr(1), addr(1)]).expect("a duplicate in one claim is one claim");
        let refused = claim(&[addr(2), addr(1)]).err().expect("a second claim is refused");
        assert!(refused.contains("127.0.0.1:1") && refused.contains("another shardlog"));
        // The refused claim released what it had taken before the conflict.
        drop(claim(&[addr(2)]).expect("port 2 was not kept by the refused claim"));
        drop(first);
        drop(claim(&[addr(1)]).expect("a dropped claim is released"));
    }
}
