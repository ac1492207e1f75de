//! The API's listener: accepts connections and serves HTTP/1 on each with bounds on
//! what a peer that has not authenticated can hold.
//!
//! - Headers must arrive within [`Limits::header_read`] (slow-loris), bodies within
//!   [`Limits::body_read`] (enforced where the API reads them, [`crate::api`]).
//! - A connection that has not carried an authenticated request closes
//!   [`Limits::unauthenticated`] after it was accepted (once no request of it is being
//!   answered); an authenticated one closes after [`Limits::idle`] without a request.
//! - At most [`Limits::max_unauthenticated`] connections that have not authenticated
//!   are kept open, at most [`Limits::max_unauthenticated_per_peer`] from one address.
//!   Beyond either, the **oldest** idle one is closed to make room, never the new one:
//!   a flood of idle sockets then sheds itself while each new client (an authenticated
//!   one among them) is accepted and answered.
//!
//! A connection counts as authenticated once a request on it carried the service's
//! credential or a job's accepted report ([`Conn::authenticated`], called by the API).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bounds on connections.
#[derive(Debug, Clone)]
pub struct Limits {
    pub header_read: Duration,
    pub body_read: Duration,
    pub idle: Duration,
    pub unauthenticated: Duration,
    pub max_unauthenticated: usize,
    pub max_unauthenticated_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(10),
            body_read: crate::api::BODY_READ_TIMEOUT,
            idle: Duration::from_secs(60),
            unauthenticated: Duration::from_secs(10),
            max_unauthenticated: 512,
            max_unauthenticated_per_peer: 128,
        }
    }
}

/// One connection's state, shared between its task and the requests it carries (as a
/// request extension).
#[derive(Debug)]
pub struct Conn {
    id: u64,
    accepted: Instant,
    authenticated: AtomicBool,
    in_flight: AtomicUsize,
    /// Milliseconds after `accepted` when the last request ended.
    last_done_ms: AtomicU64,
    registry: Arc<Registry>,
}

impl Conn {
    /// Marks the connection as authenticated: it no longer counts against the limits on
    /// unauthenticated connections and may stay open while in use.
    pub fn authenticated(&self) {
        if !self.authenticated.swap(true, Ordering::AcqRel) {
            self.registry.remove(self.id);
        }
    }

    fn since_accept_ms(&self) -> u64 {
        self.accepted.elapsed().as_millis() as u64
    }

    /// Whether the connection should be closed now.
    fn expired(&self, l: &Limits) -> bool {
        let age = self.accepted.elapsed();
        let busy = self.in_flight.load(Ordering::Acquire) > 0;
        if self.authenticated.load(Ordering::Acquire) {
            let idle_ms = self
                .since_accept_ms()
                .saturating_sub(self.last_done_ms.load(Ordering::Acquire));
            !busy && idle_ms > l.idle.as_millis() as u64
        } else if busy {
            // A request that has not authenticated reads at most a login form.
            age > l.unauthenticated + l.body_read
        } else {
            age > l.unauthenticated
        }
    }
}

/// The connections that have not authenticated, oldest first.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<RegistryInner>,
}

#[derive(Debug, Default)]
struct RegistryInner {
    unauthenticated: BTreeMap<u64, Entry>,
    per_peer: HashMap<IpAddr, usize>,
}

#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    close: Arc<tokio::sync::Notify>,
    conn: std::sync::Weak<Conn>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new unauthenticated connection and closes the oldest ones beyond
    /// the limits.
    fn add(
        &self,
        id: u64,
        peer: IpAddr,
        conn: &Arc<Conn>,
        close: Arc<tokio::sync::Notify>,
        l: &Limits,
    ) {
        let mut g = self.lock();
        g.unauthenticated.insert(
            id,
            Entry {
                peer,
                close,
                conn: Arc::downgrade(conn),
            },
        );
        *g.per_peer.entry(peer).or_default() += 1;
        while g.per_peer.get(&peer).copied().unwrap_or(0) > l.max_unauthenticated_per_peer {
            if !g.evict_oldest(Some(peer), id) {
                break;
            }
        }
        while g.unauthenticated.len() > l.max_unauthenticated {
            if !g.evict_oldest(None, id) {
                break;
            }
        }
    }

    fn remove(&self, id: u64) {
        self.lock().remove(id);
    }

    /// How many connections have not authenticated (for tests and metrics).
    pub fn unauthenticated(&self) -> usize {
        self.lock().unauthenticated.len()
    }
}

impl RegistryInner {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.unauthenticated.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&e.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&e.peer);
            }
        }
        Some(e)
    }

    /// Closes the oldest connection (of `peer`, when given) other than `newest`,
    /// preferring one with no request being answered. False when there is none.
    fn evict_oldest(&mut self, peer: Option<IpAddr>, newest: u64) -> bool {
        let candidates = || {
            self.unauthenticated
                .iter()
                .filter(|(id, e)| **id != newest && peer.is_none_or(|p| p == e.peer))
        };
        let idle = candidates()
            .find(|(_, e)| {
                e.conn
                    .upgrade()
                    .is_none_or(|c| c.in_flight.load(Ordering::Acquire) == 0)
            })
            .map(|(id, _)| *id);
        let Some(id) = idle.or_else(|| candidates().next().map(|(id, _)| *id)) else {
            return false;
        };
        if let Some(e) = self.remove(id) {
            e.close.notify_one();
        }
        true
    }
}

/// Requests being answered on every connection (the shutdown waits for them).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

struct InFlight(Arc<Conn>);

impl InFlight {
    fn new(c: Arc<Conn>) -> Self {
        c.in_flight.fetch_add(1, Ordering::AcqRel);
        IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        InFlight(c)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .last_done_ms
            .store(self.0.since_accept_ms(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits (≤ 5 s) for the
/// requests being answered.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let registry = Arc::new(Registry::default());
    let limits = Arc::new(limits);
    let mut next_id = 0u64;
    let mut accept_failures = 0u64;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors (EMFILE) or a connection reset before accept:
                // the limits above shed idle connections; try again shortly.
                accept_failures += 1;
                if accept_failures.is_power_of_two() {
                    eprintln!("pacer serve: accepting a connection failed ({accept_failures} times so far): {e}");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let close = Arc::new(tokio::sync::Notify::new());
        let conn = Arc::new(Conn {
            id: next_id,
            accepted: Instant::now(),
            authenticated: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_done_ms: AtomicU64::new(0),
            registry: registry.clone(),
        });
        registry.add(next_id, peer.ip(), &conn, close.clone(), &limits);
        tokio::spawn(serve_conn(stream, app.clone(), conn, close, limits.clone()));
    }
    let t0 = Instant::now();
    while IN_FLIGHT.load(Ordering::Acquire) > 0 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn serve_conn(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    conn: Arc<Conn>,
    close: Arc<tokio::sync::Notify>,
    limits: Arc<Limits>,
) {
    let inner = hyper_util::service::TowerToHyperService::new(app);
    let c = conn.clone();
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let guard = InFlight::new(c.clone());
        req.extensions_mut().insert(c.clone());
        let fut = hyper::service::Service::call(&inner, req);
        async move {
            let r = fut.await;
            drop(guard);
            r
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(256 * 1024);
    let served = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
    tokio::pin!(served);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = served.as_mut() => break,
            // Evicted to make room, or past its time: dropping the connection closes it.
            _ = close.notified() => break,
            _ = tick.tick() => if conn.expired(&limits) { break },
        }
    }
    conn.registry.remove(conn.id);
}

/// Raises this process's soft limit on open files to its hard limit (the idle
/// connections a peer may hold are bounded above; the rest is for real clients, jobs'
/// logs and the database).
pub fn raise_nofile_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
    }
    r.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(reg: &Arc<Registry>, id: u64) -> Arc<Conn> {
        Arc::new(Conn {
            id,
            accepted: Instant::now(),
            authenticated: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_done_ms: AtomicU64::new(0),
            registry: reg.clone(),
        })
    }

    #[test]
    fn the_oldest_idle_unauthenticated_connections_make_room() {
        let l = Limits {
            max_unauthenticated: 4,
            max_unauthenticated_per_peer: 3,
            ..Limits::default()
        };
        let reg = Arc::new(Registry::default());
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let mut closes = Vec::new();
        let mut conns = Vec::new();
        for (id, peer) in [(1, a), (2, b), (3, a), (4, a)] {
            let c = conn(&reg, id);
            let n = Arc::new(tokio::sync::Notify::new());
            reg.add(id, peer, &c, n.clone(), &l);
            closes.push(n);
            conns.push(c);
        }
        assert_eq!(reg.unauthenticated(), 4);
        // Connection 3 is answering a request: the next of peer a evicts 1, then 4.
        let _busy = InFlight::new(conns[2].clone());
        let c5 = conn(&reg, 5);
        reg.add(5, a, &c5, Arc::new(tokio::sync::Notify::new()), &l);
        let g = reg.lock();
        assert_eq!(
            g.unauthenticated.keys().copied().collect::<Vec<_>>(),
            [2, 3, 4, 5]
        );
        assert_eq!(g.per_peer[&a], 3);
        drop(g);
        // Peer a over its own limit: its oldest idle one (4) goes, not 3 (busy) or b's.
        let c6 = conn(&reg, 6);
        reg.add(6, a, &c6, Arc::new(tokio::sync::Notify::new()), &l);
        assert_eq!(
            reg.lock()
                .unauthenticated
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            [2, 3, 5, 6]
        );
        // An authenticated connection leaves the count.
        c5.authenticated();
        assert_eq!(reg.unauthenticated(), 3);
        assert_eq!(reg.lock().per_peer[&a], 2);
    }

    #[test]
    fn connections_expire_unless_authenticated_and_in_use() {
        let l = Limits {
            unauthenticated: Duration::ZERO,
            idle: Duration::from_secs(3600),
            ..Limits::default()
        };
        let reg = Arc::new(Registry::default());
        let c = conn(&reg, 1);
        std::thread::sleep(Duration::from_millis(2));
        assert!(c.expired(&l), "unauthenticated past its time");
        c.authenticated();
        assert!(!c.expired(&l), "authenticated, idle less than an hour");
    }
}
