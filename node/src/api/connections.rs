//! How the HTTP API takes its connections, plain or TLS (issue 51, finding 4): a client that
//! connects and then says nothing, or half of something, holds one connection of its own for
//! a short while and nothing anybody else needs.
//!
//! - **Per connection, bounded in time.** Every accepted connection is served in a task of its
//!   own: its TLS handshake must be done within [`CLIENT_BOUND`], and so must every request's
//!   headers — hyper's `header_read_timeout`, whose clock also runs while a keep-alive
//!   connection waits for its next request, so an idle keep-alive connection is closed after
//!   the same bound. Nothing waits on one client's handshake but that client.
//! - **Per peer, bounded in number.** One peer IP (an IPv6 peer by its /64) holds at most
//!   [`PER_PEER`] connections at once; the next is closed as soon as it is accepted.
//! - **In all, bounded by the files the process may open.** At most half the process's
//!   open-file limit (`ulimit -n`) are held at once; further connections wait in the kernel's
//!   backlog until one ends, so the API never takes the descriptors the node needs for its
//!   store, its peers and its tasks.
//!
//! The bounds are hyper's own (`hyper::server::conn::http1` with a Tokio timer); what is
//! written here is the accept loop that applies the two counts.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

/// The longest the node waits on a client that has a connection open and owes it something:
/// a TLS handshake, a request's headers, or (idle, kept alive) its next request. Then the
/// connection is closed.
pub const CLIENT_BOUND: Duration = Duration::from_secs(5);

/// The most connections one peer IP may hold open at once (a browser opens about six; the
/// CLI one per request).
pub const PER_PEER: usize = 32;

/// Serves `app` on connections accepted from `listener`, over TLS with `tls`. Runs for good.
pub async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, app: Router) {
    let all = Arc::new(Semaphore::new(connection_cap()));
    let peers = Peers::default();
    loop {
        // Owned permits of a semaphore never closed: `Err` cannot happen.
        let Ok(permit) = all.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::debug!(error = %e, "HTTP API: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = peers.enter(peer.ip()) else {
            tracing::debug!(%peer, "HTTP API: connection refused, its peer holds {PER_PEER}");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            let _held = (permit, slot);
            let Some(acceptor) = tls else {
                return connection(stream, peer, app).await;
            };
            match tokio::time::timeout(CLIENT_BOUND, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => connection(stream, peer, app).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTP API: TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "HTTP API: TLS handshake timed out"),
            }
        });
    }
}

/// Serves `app` on API tunnels of the cluster transport (`chorus_io`'s `tunnel.rs`, which
/// admits only this cluster's connected nodes and bounds their tunnels per node), each as a
/// connection of its own.
pub async fn serve_tunnels(
    mut listener: chorus_io::transport::libp2p::TunnelListener,
    app: Router,
) {
    while let Some(tunnel) = listener.next().await {
        let app = app.clone();
        tokio::spawn(async move {
            let _slot = tunnel.slot;
            connection(tunnel.stream, format!("tunnel from {}", tunnel.node), app).await;
        });
    }
}

/// HTTP/1.1 on one connection until either side ends it, or the client keeps the node
/// waiting for headers longer than [`CLIENT_BOUND`].
async fn connection<I>(io: I, peer: impl std::fmt::Display, app: Router)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_BOUND)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(app))
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "HTTP API: connection ended");
    }
}

/// Connections held at once, in all: half the open-file limit, within 64..=8192.
fn connection_cap() -> usize {
    use nix::sys::resource::{getrlimit, Resource};
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
    usize::try_from(soft / 2)
        .unwrap_or(usize::MAX)
        .clamp(64, 8192)
}

/// Connections held, by peer (see [`peer_key`]).
#[derive(Clone, Default)]
struct Peers(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection counted for its peer; dropping it ends the count.
struct PeerSlot {
    peers: Peers,
    key: IpAddr,
}

impl Peers {
    /// Counts a connection from `ip`, unless its peer already holds [`PER_PEER`].
    fn enter(&self, ip: IpAddr) -> Option<PeerSlot> {
        let key = peer_key(ip);
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(key).or_default();
        if *count >= PER_PEER {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: self.clone(),
            key,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Whom a connection counts against: an IPv4 address (also when mapped into IPv6), or an
/// IPv6 address's /64 (one host commonly has a whole /64 to pick addresses from).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_holds_at_most_per_peer_connections_and_gets_them_back() {
        let peers = Peers::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let mut held: Vec<PeerSlot> = (0..PER_PEER).map(|_| peers.enter(a).unwrap()).collect();
        assert!(peers.enter(a).is_none());
        // The same address mapped into IPv6 is the same peer; another address is not.
        assert!(peers.enter("::ffff:192.0.2.1".parse().unwrap()).is_none());
        let other = peers.enter(b).expect("another peer");
        held.pop();
        assert!(peers.enter(a).is_some());
        drop(held);
        drop(other);
        assert!(peers.0.lock().unwrap().is_empty(), "no count left behind");
    }

    #[test]
    fn an_ipv6_peer_is_its_slash_64() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let two: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let elsewhere: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(peer_key(one), peer_key(two));
        assert_ne!(peer_key(one), peer_key(elsewhere));
    }

    #[test]
    fn the_connection_cap_is_within_its_bounds() {
        assert!((64..=8192).contains(&connection_cap()));
    }
}
