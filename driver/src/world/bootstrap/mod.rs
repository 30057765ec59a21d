//! Joining a job: who am I, who are the others, and how to reach each.
//!
//! Rank and size come from the launcher that started the process
//! ([`launcher`]); the ranks then meet (an inherited shared-memory file,
//! a PMI key-value space, a root address, or a local socket), agree on the
//! protocol parameters, and connect: shared memory among the ranks of one
//! host, TCP to the others.

pub(crate) mod auth;
pub(crate) mod launcher;
mod meet;
pub(crate) mod pmi;

use crate::config::{debug_level, Config, DebugLevel, Layout, RdmaConfig, TransportChoice};
use crate::error::{Error, Result};
use crate::job::JobMap;
use crate::progress::{Engine, Protocol, WaitBoard};
use crate::transport::fabric::soft::{SoftOptions, SoftQp, Wire};
use crate::transport::rdma::{RdmaLink, RdmaOptions, Rendezvous};
use crate::transport::shm::{ShmLink, ShmOptions};
use crate::transport::tcp::TcpLink;
use crate::transport::{self, Link};
use auth::{Role, Secret};
use launcher::Meet;
use meet::{Admission, RootStore, Store};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_core::sync::{AtomicBool, Ordering};

/// A rank that joined its job: its engine, ready to use.
pub(crate) struct Joined {
    /// The engine, with a link to every rank.
    pub engine: Engine,
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub size: usize,
}

pub(crate) fn shm_options(cfg: &Config) -> ShmOptions {
    ShmOptions {
        cma: (!cfg.cma_auto).then_some(cfg.cma),
        cma_min: cfg.cma_min,
        debug: debug_level() >= DebugLevel::Info,
    }
}

/// A job whose ranks all share `map` (one host): shared memory to every
/// peer.
pub(crate) fn shm_world(map: Arc<JobMap>, rank: usize, cfg: &Config) -> Result<Joined> {
    map.attach(rank, std::process::id());
    let n = map.nranks();
    let opt = shm_options(cfg);
    let links = (0..n)
        .map(|p| Link::Shm(ShmLink::new(map.clone(), rank, p, rank, p, opt)))
        .collect();
    let l = map.layout();
    let protocol = Protocol::of(l);
    let board = WaitBoard {
        map: map.clone(),
        local_of: (0..n).collect(),
    };
    let engine = Engine::new(rank, links, protocol, cfg, Some(board))?;
    Ok(Joined {
        engine,
        rank,
        size: n,
    })
}

/// Which transport a job may use between ranks ([`NetConfig::transport`],
/// `TANDEM_TRANSPORT`).
type Choice = TransportChoice;

/// The RDMA device this rank would use for `choice`: required with
/// `verbs`, tried with `auto` (a job without one falls back to TCP between
/// hosts); `rdma.device` names it, or the first usable one.
fn rdma_device(choice: Choice, rdma: &RdmaConfig) -> Result<Option<String>> {
    let want = matches!(choice, Choice::Verbs);
    if !matches!(choice, Choice::Verbs | Choice::Auto) {
        return Ok(None);
    }
    if !cfg!(feature = "verbs") {
        return match want {
            true => Err(Error::Config(
                "TANDEM_TRANSPORT=verbs: this tandem was built without verbs support \
                 (build tandem-driver with --features verbs)"
                    .into(),
            )),
            false => Ok(None),
        };
    }
    match transport::fabric::verbs::probe_named(rdma.device.as_deref()) {
        Ok(d) => Ok(Some(d)),
        Err(e) if want => Err(Error::Config(format!("TANDEM_TRANSPORT=verbs: {e}"))),
        Err(_) => Ok(None),
    }
}

/// What carries the mesh's connections by default for `choice`.
fn default_net(choice: Choice) -> Net {
    match choice {
        Choice::Soft => Net::Soft(None),
        _ => Net::Tcp,
    }
}

/// The soft NIC's options: `rdma.soft_delay_us` makes it wait up to that
/// many microseconds before each request it handles (tests of timing
/// independence), with delays seeded by the rank.
fn soft_options(rank: usize, rdma: &RdmaConfig) -> SoftOptions {
    SoftOptions {
        max_delay_us: rdma.soft_delay_us,
        seed: 0x9e37_79b9_7f4a_7c15 ^ rank as u64,
    }
}

/// What carries the connections between hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Net {
    /// TCP.
    Tcp,
    /// RDMA over the soft NIC, which runs over the TCP connection;
    /// rendezvous as given, or as [`RdmaConfig::rendezvous`] says.
    Soft(Option<Rendezvous>),
    /// RDMA over this verbs device; the TCP connection stays open as the
    /// sign of the peer's life.
    Verbs,
}

/// An identity shared by exactly the processes that can share memory and
/// reach each other's loopback: the boot, the host name, the network
/// namespace (so network namespaces on one machine count as different
/// hosts) and the `/dev/shm` file system the job files live in.
/// `TANDEM_HOST_ID` overrides it.
fn host_id() -> String {
    if let Ok(h) = std::env::var("TANDEM_HOST_ID") {
        return h;
    }
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    let mut h = sha2::Sha256::new();
    for f in [
        "/proc/sys/kernel/random/boot_id",
        "/proc/sys/kernel/hostname",
    ] {
        h.update(std::fs::read(f).unwrap_or_default());
    }
    let net = std::fs::read_link("/proc/self/ns/net").unwrap_or_default();
    h.update(net.as_os_str().as_encoded_bytes());
    if let Ok(m) = std::fs::metadata("/dev/shm") {
        h.update(m.dev().to_le_bytes());
        h.update(m.ino().to_le_bytes());
    }
    auth::to_hex(&h.finalize()[..12])
}

/// What each rank tells the others at bootstrap.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    host: String,
    addr: Option<SocketAddr>,
    transport: Choice,
    protocol: Protocol,
    /// A data-connection secret rank 0 made up (local and PMI meetings,
    /// whose channel only the job can read).
    secret: Option<String>,
    /// Whether this rank has a usable RDMA device (and tandem was built
    /// with verbs).
    rdma: bool,
}

/// The version of the records and of the wire protocol behind them: 2
/// since an eager message takes one eager credit and an RTS one rendezvous
/// credit (`tandem_core::proto`), so a rank of another build is refused at
/// bootstrap instead of misreading the credits its headers return.
const RECORD_VERSION: &str = "2";

impl Record {
    fn encode(&self) -> Vec<u8> {
        let mut s = format!(
            "v={RECORD_VERSION}\nhost={}\ntransport={}\neager_limit={}\ncredits={}\nenvelopes={}\n",
            self.host,
            self.transport.name(),
            self.protocol.eager_limit,
            self.protocol.credits,
            self.protocol.envelopes
        );
        if let Some(a) = self.addr {
            s += &format!("addr={a}\n");
        }
        if let Some(x) = &self.secret {
            s += &format!("secret={x}\n");
        }
        if self.rdma {
            s += "rdma=1\n";
        }
        s.into_bytes()
    }

    fn decode(rank: usize, b: &[u8]) -> Result<Self> {
        let bad = |what: &str| Error::Bootstrap(format!("rank {rank} sent a bad record: {what}"));
        let text = std::str::from_utf8(b).map_err(|_| bad("not UTF-8"))?;
        let kv: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        if kv.get("v") != Some(&RECORD_VERSION) {
            return Err(bad("another tandem version"));
        }
        let n = |k: &str| -> Result<u32> {
            kv.get(k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(&format!("{k} missing")))
        };
        let transport = match kv.get("transport") {
            Some(&"shm") => Choice::Shm,
            Some(&"tcp") => Choice::Tcp,
            Some(&"soft") => Choice::Soft,
            Some(&"verbs") => Choice::Verbs,
            _ => Choice::Auto,
        };
        Ok(Record {
            host: kv
                .get("host")
                .ok_or_else(|| bad("host missing"))?
                .to_string(),
            addr: match kv.get("addr") {
                Some(a) => Some(a.parse().map_err(|_| bad("addr"))?),
                None => None,
            },
            transport,
            protocol: Protocol {
                eager_limit: n("eager_limit")?,
                credits: n("credits")?,
                envelopes: n("envelopes")?,
            },
            secret: kv.get("secret").map(|s| s.to_string()),
            rdma: kv.get("rdma") == Some(&"1"),
        })
    }
}

/// Every rank must agree with every other on these; the first difference
/// is an error that names the parameter, both values and both ranks.
fn check_agreement(me: usize, records: &[Record]) -> Result<()> {
    let mine = &records[me];
    for (r, other) in records.iter().enumerate() {
        let pairs: [(&'static str, String, String); 4] = [
            (
                "eager_limit (TANDEM_EAGER_LIMIT)",
                mine.protocol.eager_limit.to_string(),
                other.protocol.eager_limit.to_string(),
            ),
            (
                "credits (TANDEM_CREDITS)",
                mine.protocol.credits.to_string(),
                other.protocol.credits.to_string(),
            ),
            (
                "envelopes (TANDEM_ENVELOPES)",
                mine.protocol.envelopes.to_string(),
                other.protocol.envelopes.to_string(),
            ),
            (
                "transport (TANDEM_TRANSPORT)",
                mine.transport.name().to_string(),
                other.transport.name().to_string(),
            ),
        ];
        for (param, ours, theirs) in pairs {
            if ours != theirs {
                return Err(Error::Mismatch {
                    parameter: param.to_string(),
                    rank: me,
                    value: ours,
                    peer: r,
                    peer_value: theirs,
                });
            }
        }
    }
    Ok(())
}

/// The address this rank advertises for data connections: `given`
/// ([`NetConfig::addr`]), else one found from how the ranks meet.
fn data_ip(given: Option<IpAddr>, meet: &str, root_local: Option<IpAddr>) -> IpAddr {
    if let Some(a) = given {
        return a;
    }
    match meet {
        // The interface that reaches the root reaches the other hosts.
        "root" => root_local.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        "local" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        _ => {
            // The host name's first non-loopback address, if any.
            let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            use std::net::ToSocketAddrs;
            (name.trim(), 0)
                .to_socket_addrs()
                .ok()
                .and_then(|mut it| it.find(|a| a.is_ipv4() && !a.ip().is_loopback()))
                .map(|a| a.ip())
                .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
        }
    }
}

const DATA_HELLO: &[u8; 4] = b"TDA1";

/// Accepts data connections from higher ranks until told to stop; hands
/// each admitted one over with the rank it proved.
fn spawn_acceptor(
    l: TcpListener,
    me: usize,
    n: usize,
    adm: Admission,
    stop: Arc<AtomicBool>,
) -> Result<mpsc::Receiver<(usize, TcpStream)>> {
    l.set_nonblocking(true)?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("tandem-accept".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((s, from)) => {
                        let (tx, adm) = (tx.clone(), adm.clone());
                        let _ = std::thread::Builder::new()
                            .name("tandem-admit".into())
                            .spawn(move || match admit_data(s, &adm, me, n) {
                                Ok((r, s)) => {
                                    let _ = tx.send((r, s));
                                }
                                Err(e) => eprintln!(
                                    "tandem[{me}]: refused a data connection from {from}: {e}"
                                ),
                            });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => {
                        eprintln!("tandem[{me}]: accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(10))
                    }
                }
            }
        })?;
    Ok(rx)
}

fn admit_data(
    s: TcpStream,
    adm: &Admission,
    me: usize,
    n: usize,
) -> std::io::Result<(usize, TcpStream)> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut st = meet::Stream::Tcp(s);
    meet::admit(&mut st, adm, Role::Acceptor)?;
    let meet::Stream::Tcp(mut s) = st else {
        unreachable!("a TCP stream stays one")
    };
    let mut h = [0u8; 8];
    s.read_exact(&mut h)?;
    let r = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if &h[..4] != DATA_HELLO || r <= me || r >= n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a hello naming rank {r}, not a higher rank of this job"),
        ));
    }
    s.set_read_timeout(None)?;
    Ok((r, s))
}

fn connect_data(
    addr: SocketAddr,
    me: usize,
    peer: usize,
    adm: &Admission,
    deadline: Instant,
) -> Result<TcpStream> {
    let what = format!("rank {peer} at {addr}");
    let s = meet_retry(deadline, &what, || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(1))
    })?;
    let fail = |e: std::io::Error| Error::Bootstrap(format!("connecting to {what}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(fail)?;
    let mut st = meet::Stream::Tcp(s);
    meet::admit(&mut st, adm, Role::Connector).map_err(fail)?;
    let meet::Stream::Tcp(mut s) = st else {
        unreachable!("a TCP stream stays one")
    };
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(DATA_HELLO);
    h[4..].copy_from_slice(&(me as u32).to_le_bytes());
    s.write_all(&h).map_err(fail)?;
    s.set_read_timeout(None).map_err(fail)?;
    Ok(s)
}

fn meet_retry<T>(
    deadline: Instant,
    what: &str,
    mut f: impl FnMut() -> std::io::Result<T>,
) -> Result<T> {
    loop {
        match f() {
            Ok(t) => return Ok(t),
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::Bootstrap(format!(
                    "could not reach {what} before the bootstrap deadline: {e}"
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn job_hash(job: &str, leader: usize) -> u64 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(format!("{job}/{leader}").as_bytes());
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) | 1
}

/// Connects this rank to every TCP peer (`tcp(p)`): it connects to the
/// lower ranks at `addr(p)` and accepts the higher ones on `listener`, so
/// each pair has exactly one connection whoever starts first. Every
/// connection proves the job's secret before its hello is read.
#[allow(clippy::too_many_arguments)]
fn mesh(
    rank: usize,
    size: usize,
    tcp: &dyn Fn(usize) -> bool,
    addr: &dyn Fn(usize) -> Option<SocketAddr>,
    listener: TcpListener,
    adm: &Admission,
    deadline: Instant,
) -> Result<Vec<Option<TcpStream>>> {
    let stop = Arc::new(AtomicBool::new(false));
    let inbound = spawn_acceptor(listener, rank, size, adm.clone(), stop.clone())?;
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let result = (|| -> Result<()> {
        for p in (0..rank).filter(|&p| tcp(p)) {
            let a = addr(p).ok_or_else(|| Error::Bootstrap(format!("rank {p} gave no address")))?;
            streams[p] = Some(connect_data(a, rank, p, adm, deadline)?);
        }
        let want: Vec<usize> = (rank + 1..size).filter(|&p| tcp(p)).collect();
        let mut got = 0;
        while got < want.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match inbound.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok((r, s)) if want.contains(&r) && streams[r].is_none() => {
                    streams[r] = Some(s);
                    got += 1;
                }
                Ok((r, _)) => {
                    eprintln!("tandem[{rank}]: refused an unexpected connection claiming rank {r}")
                }
                Err(_) if Instant::now() < deadline => {}
                Err(_) => {
                    let missing: Vec<String> = want
                        .iter()
                        .filter(|&&r| streams[r].is_none())
                        .map(|r| r.to_string())
                        .collect();
                    return Err(Error::Bootstrap(format!(
                        "bootstrap deadline passed: rank(s) {} never connected to rank {rank}",
                        missing.join(", ")
                    )));
                }
            }
        }
        Ok(())
    })();
    stop.store(true, Ordering::Release);
    result.map(|()| streams)
}

/// The engine of `rank` from its TCP connections and its host's mapping,
/// shared by the ranks `local` (sorted, this rank among them).
#[allow(clippy::too_many_arguments)]
fn assemble(
    rank: usize,
    streams: Vec<Option<TcpStream>>,
    map: Arc<JobMap>,
    local: &[usize],
    protocol: Protocol,
    cfg: &Config,
    nets: &[Net],
    rdma_dev: Option<&str>,
) -> Result<Joined> {
    let size = streams.len();
    let me_local = local
        .binary_search(&rank)
        .map_err(|_| Error::Config(format!("rank {rank} is not among its host's ranks")))?;
    map.attach(me_local, std::process::id());
    let opt = shm_options(cfg);
    let mut links = Vec::with_capacity(size);
    let eager = protocol.eager_limit as usize;
    let rdma_opts = |r: Option<Rendezvous>| -> Result<RdmaOptions> {
        let mut o = RdmaOptions::new(eager, &cfg.rdma)?;
        o.rendezvous = r.unwrap_or(o.rendezvous);
        Ok(o)
    };
    for (p, stream) in streams.into_iter().enumerate() {
        let net = nets.get(p).copied().unwrap_or(Net::Tcp);
        links.push(match (stream, net) {
            (Some(s), Net::Tcp) => Link::Tcp(Box::new(
                TcpLink::new(s, p, protocol.eager_limit as usize)
                    .map_err(|e| Error::io(format!("TCP link to rank {p}"), e))?,
            )),
            (Some(s), Net::Verbs) => {
                let dev = rdma_dev.unwrap_or_default();
                verbs_link(s, p, dev, &cfg.rdma, eager, rdma_opts(None)?)?
            }
            (Some(s), Net::Soft(r)) => {
                let opts = rdma_opts(r)?;
                let io = |e: std::io::Error| Error::io(format!("soft RDMA link to rank {p}"), e);
                let wire = Wire::Tcp(s.try_clone().map_err(io)?);
                let qp = SoftQp::new(wire, transport::rdma::caps(), soft_options(rank, &cfg.rdma))
                    .map_err(io)?;
                Link::Soft(Box::new(rdma_connect(qp, s, p, eager, opts)?))
            }
            (None, _) => {
                let pl = local.binary_search(&p).map_err(|_| {
                    Error::Config(format!("rank {p} is neither on this host nor connected"))
                })?;
                Link::Shm(ShmLink::new(map.clone(), me_local, pl, rank, p, opt))
            }
        });
    }
    let board = WaitBoard {
        map,
        local_of: (0..size)
            .map(|p| local.binary_search(&p).unwrap_or(usize::MAX))
            .collect(),
    };
    let engine = Engine::new(rank, links, protocol, cfg, Some(board))?;
    Ok(Joined { engine, rank, size })
}

/// Brings `qp` up with rank `p`'s over the bootstrap connection `s` (a
/// bounded hello exchange), recording the connection's ends for the route.
fn rdma_connect<Q: transport::fabric::QueuePair>(
    qp: Q,
    mut s: TcpStream,
    p: usize,
    eager: usize,
    opts: RdmaOptions,
) -> Result<RdmaLink<Q>> {
    let io = |e: std::io::Error| Error::io(format!("RDMA link to rank {p}"), e);
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(io)?;
    let ends = s.local_addr().and_then(|l| Ok((l, s.peer_addr()?)));
    let mut link = RdmaLink::connect(qp, &mut s, p, eager, opts)?;
    if let Ok(e) = ends {
        link.set_tcp(e);
    }
    Ok(link)
}

/// The verbs link to rank `p` over device `dev`, brought up through the
/// bootstrap connection `s`, which then stays open to tell the peer's end.
#[cfg(feature = "verbs")]
fn verbs_link(
    s: TcpStream,
    p: usize,
    dev: &str,
    rdma: &RdmaConfig,
    eager: usize,
    opts: RdmaOptions,
) -> Result<Link> {
    use transport::fabric::verbs_qp;
    let mut qp = verbs_qp::open(dev, rdma.port, rdma.gid_index, transport::rdma::caps())
        .map_err(|e| Error::Config(format!("RDMA device {dev}: {e}")))?;
    let io = |e: std::io::Error| Error::io(format!("verbs link to rank {p}"), e);
    qp.watch_peer(s.try_clone().map_err(io)?).map_err(io)?;
    Ok(Link::Verbs(Box::new(rdma_connect(qp, s, p, eager, opts)?)))
}

#[cfg(not(feature = "verbs"))]
fn verbs_link(
    _: TcpStream,
    _: usize,
    dev: &str,
    _: &RdmaConfig,
    _: usize,
    _: RdmaOptions,
) -> Result<Link> {
    Err(Error::Config(format!(
        "RDMA device {dev}: this tandem was built without verbs support"
    )))
}

/// How the ranks of [`crate::Comm::threads_on`] are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Shared memory between every pair.
    Shm,
    /// TCP over the loopback between every pair (shared memory only to
    /// oneself).
    Tcp,
    /// The ranks split into `hosts` blocks of consecutive ranks, as if on
    /// that many hosts: shared memory within a block, TCP between blocks.
    Mixed {
        /// Number of pretend hosts.
        hosts: usize,
    },
    /// RDMA over the software RC NIC between every pair (over loopback
    /// TCP), with receiver-not-ready retries off: a single RNR fails the
    /// link. Rendezvous payloads are RDMA-written into the receive buffer
    /// its CTS names.
    Soft,
    /// As [`Links::Soft`], with rendezvous payloads RDMA-read by the
    /// receiver from the send buffer its RTS names.
    SoftRead,
}

/// What the threads of a world in one process share while they connect.
pub(crate) enum ThreadPlan {
    /// Every rank on one host, over shared memory alone: no connections.
    Shm(Arc<JobMap>),
    /// Ranks on several (pretend) hosts, or TCP or RDMA between all.
    Net(NetPlan),
}

/// A [`ThreadPlan`] whose ranks connect.
pub(crate) struct NetPlan {
    host_of: Vec<usize>,
    maps: Vec<Arc<JobMap>>,
    listeners: Vec<std::sync::Mutex<Option<TcpListener>>>,
    addrs: Vec<SocketAddr>,
    adm: Admission,
    protocol: Protocol,
    net: Net,
}

impl ThreadPlan {
    /// Prepares a world of `n` threads connected as `links` say.
    pub(crate) fn new(n: usize, links: Links, layout: &Layout) -> Result<Self> {
        if links == Links::Shm {
            return Ok(Self::Shm(Arc::new(JobMap::anon_with(
                n,
                layout,
                crate::calibrate::for_ranks(n, layout),
            )?)));
        }
        layout.validate()?;
        let hosts = match links {
            Links::Shm => 1,
            Links::Tcp | Links::Soft | Links::SoftRead => n,
            Links::Mixed { hosts } => hosts.clamp(1, n.max(1)),
        };
        let host_of: Vec<usize> = (0..n).map(|r| r * hosts / n.max(1)).collect();
        let maps = (0..hosts)
            .map(|h| {
                let k = host_of.iter().filter(|&&x| x == h).count().max(1);
                JobMap::anon_with(k, layout, crate::calibrate::for_ranks(k, layout)).map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut listeners = Vec::with_capacity(n);
        let mut addrs = Vec::with_capacity(n);
        for _ in 0..n {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            addrs.push(l.local_addr()?);
            listeners.push(std::sync::Mutex::new(Some(l)));
        }
        let (secret, _) = Secret::random().map_err(|e| Error::io("drawing the job secret", e))?;
        Ok(Self::Net(NetPlan {
            host_of,
            maps,
            listeners,
            addrs,
            adm: Admission {
                secret: Some(secret),
                context: b"data:threads".to_vec(),
            },
            protocol: Protocol::of(layout),
            net: match links {
                Links::Soft => Net::Soft(Some(Rendezvous::Write)),
                Links::SoftRead => Net::Soft(Some(Rendezvous::Read)),
                _ => Net::Tcp,
            },
        }))
    }

    /// Connects rank `rank` (called on its own thread).
    pub(crate) fn join(&self, rank: usize, cfg: &Config) -> Result<Joined> {
        match self {
            Self::Shm(map) => shm_world(map.clone(), rank, cfg),
            Self::Net(plan) => plan.join(rank, cfg),
        }
    }
}

impl NetPlan {
    fn join(&self, rank: usize, cfg: &Config) -> Result<Joined> {
        let n = self.host_of.len();
        let h = self.host_of[rank];
        let local: Vec<usize> = (0..n).filter(|&p| self.host_of[p] == h).collect();
        let listener = self.listeners[rank]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::Config(format!("rank {rank} joined twice")))?;
        let deadline = meet::deadline_after(cfg.net.boot_timeout);
        let streams = mesh(
            rank,
            n,
            &|p| self.host_of[p] != h,
            &|p| Some(self.addrs[p]),
            listener,
            &self.adm,
            deadline,
        )?;
        assemble(
            rank,
            streams,
            self.maps[h].clone(),
            &local,
            self.protocol,
            cfg,
            &vec![self.net; n],
            None,
        )
    }
}

/// Joins the job described by the environment (see [`launcher`]).
pub(crate) fn join(cfg: &Config) -> Result<Joined> {
    let choice = cfg.net.transport;
    // tandem-run on one host: the shared-memory file is inherited.
    if !choice.networked() && std::env::var_os("TANDEM_SHM_FD").is_some() {
        return join_inherited(cfg);
    }
    join_launched(cfg, launcher::detect()?, choice)
}

/// The world [`crate::Comm::local_with`] joins, and the ranks it started
/// (rank 0 waits for them): under a launcher, the launched job, which must
/// have `n` ranks; otherwise `n - 1` copies of this program started on
/// this host, met over the job file they inherit (or over TCP when
/// `TANDEM_TRANSPORT` forces it).
pub(crate) fn local_world(
    n: usize,
    cfg: &Config,
) -> Result<(Joined, Option<crate::world::launch::Children>)> {
    if launcher::present() {
        let j = join(cfg)?;
        if j.size != n {
            return Err(Error::JobMismatch {
                expected: format!("a local world of {n} ranks"),
                found: format!("a job of {} ranks in the environment", j.size),
            });
        }
        return Ok((j, None));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("finding this program to start it again", e))?;
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let layout = Layout::from_env()?;
    let (map, children) = crate::world::launch::spawn_world(n, &layout, &exe, &args)?;
    let j = if cfg.net.transport.networked() {
        join_as_local_root(cfg, n, map.job())?
    } else {
        shm_world(Arc::new(map), 0, cfg)?
    };
    Ok((j, Some(children)))
}

/// Rank 0 of a world that [`crate::Comm::local`] started itself, when its
/// ranks must meet rather than share the inherited file (TCP forced).
fn join_as_local_root(cfg: &Config, size: usize, job: u64) -> Result<Joined> {
    let launch = launcher::Launch {
        rank: 0,
        size,
        launcher: "Comm::local",
        job: format!("{job:016x}"),
        meet: Meet::Local,
    };
    join_launched(cfg, launch, cfg.net.transport)
}

fn join_launched(cfg: &Config, launch: launcher::Launch, choice: Choice) -> Result<Joined> {
    let (rank, size) = (launch.rank, launch.size);
    let layout = Layout::from_env()?;
    layout.validate()?;
    let net = default_net(choice);
    let rdma_dev = rdma_device(choice, &cfg.rdma)?;
    let deadline = meet::deadline_after(cfg.net.boot_timeout);
    let given = match std::env::var("TANDEM_SECRET") {
        Ok(t) if !t.is_empty() => Some(t),
        _ => None,
    };
    let secret_of =
        |t: &str| Secret::from_text(t).map_err(|e| Error::Config(format!("TANDEM_SECRET: {e}")));
    let mut root_local = None;
    let meet_kind = match launch.meet {
        Meet::Pmi(_) => "PMI",
        Meet::Root(_) => "root",
        Meet::Local => "local",
    };
    let job = launch.job.clone();
    let mut store: Box<dyn Store> = match launch.meet {
        Meet::Pmi(p) => Box::new(meet::PmiStore::new(p)),
        Meet::Root(ref root) => {
            let Some(t) = &given else {
                return Err(Error::Config(format!(
                    "a job that meets at a network address (TANDEM_ROOT={root}) needs a \
                     per-job secret: set TANDEM_SECRET to the same random string on every \
                     rank (e.g. `export TANDEM_SECRET=$(openssl rand -hex 16)` and \
                     `mpirun -x TANDEM_SECRET`, or `srun --export=ALL`); tandem-run sets it \
                     itself"
                )));
            };
            let adm = Admission {
                secret: Some(secret_of(t)?),
                context: format!("bootstrap:{}", job).into_bytes(),
            };
            let s = RootStore::tcp(root, rank, size, adm, deadline)?;
            root_local = s.local_ip();
            Box::new(s)
        }
        Meet::Local => {
            let adm = Admission {
                secret: match &given {
                    Some(t) => Some(secret_of(t)?),
                    None => None,
                },
                context: format!("bootstrap:{}", job).into_bytes(),
            };
            Box::new(RootStore::local(&job, rank, size, adm, deadline)?)
        }
    };
    // Data connections: a listener before anyone can try to connect.
    let ip = data_ip(cfg.net.addr, meet_kind, root_local);
    let port = cfg.net.data_port;
    let bind_ip = match meet_kind {
        "PMI" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        _ => ip,
    };
    let listener = TcpListener::bind((bind_ip, port)).map_err(|e| {
        Error::Config(format!(
            "cannot listen for data connections on {bind_ip}:{port}: {e}"
        ))
    })?;
    let addr = SocketAddr::new(ip, listener.local_addr()?.port());
    // A secret for data connections: given, or made up by rank 0 and passed
    // over the meeting channel (same-user socket, or the launcher's PMI).
    let made_up = if given.is_none() && rank == 0 {
        Some(
            Secret::random()
                .map_err(|e| Error::io("drawing randomness", e))?
                .1,
        )
    } else {
        None
    };
    let protocol = Protocol::of(&layout);
    let mine = Record {
        host: host_id(),
        addr: Some(addr),
        transport: choice,
        protocol,
        secret: made_up,
        rdma: rdma_dev.is_some(),
    };
    let records: Vec<Record> = store
        .allgather(&mine.encode())?
        .iter()
        .enumerate()
        .map(|(r, b)| Record::decode(r, b))
        .collect::<Result<_>>()?;
    check_agreement(rank, &records)?;
    if choice == Choice::Verbs {
        let without: Vec<String> = (0..size)
            .filter(|&r| !records[r].rdma)
            .map(|r| r.to_string())
            .collect();
        if !without.is_empty() {
            return Err(Error::Config(format!(
                "TANDEM_TRANSPORT=verbs: rank(s) {} have no usable RDMA device",
                without.join(", ")
            )));
        }
    }
    // Verbs between two ranks when both have a device; otherwise the
    // default.
    let nets: Vec<Net> = (0..size)
        .map(|p| match (records[p].rdma && records[rank].rdma, choice) {
            (true, Choice::Auto | Choice::Verbs) => Net::Verbs,
            _ => net,
        })
        .collect();
    let data_secret = match (&given, &records[0].secret) {
        (Some(t), _) | (None, Some(t)) => secret_of(t)?,
        (None, None) => {
            return Err(Error::Bootstrap(
                "rank 0 sent no data secret and none is set".into(),
            ))
        }
    };
    // Routing: shared memory within a host (unless TCP is forced).
    let local: Vec<usize> = (0..size)
        .filter(|&p| p == rank || (!choice.networked() && records[p].host == records[rank].host))
        .collect();
    let is_local = |p: usize| local.binary_search(&p).is_ok();
    // TCP mesh: each rank connects to the lower ranks, accepts the higher.
    let adm = Admission {
        secret: Some(data_secret),
        context: format!("data:{}", job).into_bytes(),
    };
    let streams = mesh(
        rank,
        size,
        &|p| !is_local(p),
        &|p| records[p].addr,
        listener,
        &adm,
        deadline,
    )?;
    // Shared memory among this host's ranks: the lowest creates the file,
    // the others open it by name, then it is unlinked.
    let leader = local[0];
    // Every rank takes part in both rounds, whether its host needs a file
    // or not: the rounds are job-wide.
    let file_job = job_hash(&job, leader);
    let created = if rank == leader && local.len() > 1 {
        Some(JobMap::create_file_with(
            file_job,
            local.len(),
            &layout,
            crate::calibrate::for_ranks(local.len(), &layout),
        ))
    } else {
        None
    };
    // The name goes away however this function ends (a failed round, an
    // error opening): only a process killed in between can leave it.
    let _unlink = crate::job::Unlink(match &created {
        Some(Ok((_, p))) => Some(p.clone()),
        _ => None,
    });
    let created_ok = !matches!(created, Some(Err(_)));
    store.allgather(if created_ok {
        b"shm-created"
    } else {
        b"shm-failed"
    })?;
    let opened = match &created {
        _ if local.len() == 1 => JobMap::anon(1, &layout),
        Some(Ok((f, _))) => JobMap::open(f, file_job, local.len()),
        Some(Err(e)) => Err(e.clone()),
        None => {
            let path = crate::job::shm_path(file_job);
            std::fs::File::options()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| Error::io(format!("opening {}", path.display()), e))
                .and_then(|f| JobMap::open(&f, file_job, local.len()))
        }
    };
    store.allgather(b"shm-opened")?;
    drop(_unlink);
    let map = opened?;
    drop(store);
    let joined = assemble(
        rank,
        streams,
        Arc::new(map),
        &local,
        protocol,
        cfg,
        &nets,
        rdma_dev.as_deref(),
    )?;
    if debug_level() >= DebugLevel::Info {
        eprintln!(
            "tandem[{rank}/{size}] started by {} (met via {meet_kind}, job {job}), \
             TANDEM_TRANSPORT={}, {} rank(s) on this host, data address {addr}",
            launch.launcher,
            choice.name(),
            local.len()
        );
    }
    Ok(joined)
}

/// tandem-run's single-host jobs: the launcher made the shared-memory file
/// for every rank and passed it down.
fn join_inherited(cfg: &Config) -> Result<Joined> {
    let num = |name: &str| -> Result<usize> {
        let v = std::env::var(name)
            .map_err(|_| Error::NotLaunched(format!("{name} is not set (tandem-run sets it)")))?;
        v.parse()
            .map_err(|_| Error::NotLaunched(format!("{name}={v:?} is not a number")))
    };
    let rank = num("TANDEM_RANK")?;
    let size = num("TANDEM_SIZE")?;
    let fd = num("TANDEM_SHM_FD")? as i32;
    let job_s = std::env::var("TANDEM_JOB")
        .map_err(|_| Error::NotLaunched("TANDEM_JOB is not set".into()))?;
    let job = u64::from_str_radix(&job_s, 16)
        .map_err(|_| Error::NotLaunched(format!("TANDEM_JOB={job_s:?} is not a job id")))?;
    if rank >= size {
        return Err(Error::InvalidRank { rank, size });
    }
    let owned = crate::sys::take_inherited_fd(fd).ok_or_else(|| {
        Error::NotLaunched(format!(
            "TANDEM_SHM_FD={fd} is not an open descriptor (stale environment?)"
        ))
    })?;
    let file = std::fs::File::from(owned);
    let map = JobMap::open(&file, job, size)?;
    shm_world(Arc::new(map), rank, cfg)
}
