//! Meeting: an all-gather of small records among the ranks of a job.
//!
//! Three ways, one interface ([`Store::allgather`]):
//!
//! * **PMI-1** (hydra): put / barrier / get in the launcher's key-value
//!   space ([`super::pmi`]);
//! * **a root address** (`TANDEM_ROOT=host:port`): rank 0 listens there
//!   (a thread of its process serves the job) and every rank, rank 0
//!   included, connects; each connection proves the job's secret
//!   ([`super::auth`]) before anything it sends is parsed;
//! * **a local socket** (every rank on one host, no root given): the same
//!   service on an abstract Unix socket named after the user and the job;
//!   the server admits only processes of the same user (`SO_PEERCRED`),
//!   and the client checks the server the same way.
//!
//! A round: each rank sends its record, the server answers every rank with
//! all records in rank order, or with an error that names the ranks that
//! never came or that left.

use super::auth::{self, Role, Secret};
use super::pmi::Pmi;
use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const HELLO: &[u8; 4] = b"TBS1";
/// Largest record a rank may contribute.
const MAX_RECORD: usize = 1 << 16;
/// How long a fresh connection may take to prove itself.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// `now + t`, or a century from now where `t` reaches past what an
/// `Instant` holds (`TANDEM_BOOT_TIMEOUT` accepts up to about 1.8e19 s).
pub(crate) fn deadline_after(t: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(t)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// What is left until `deadline`, or `None` once it has passed.
fn left(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

/// Whether an I/O error is a socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`).
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// How much longer a client waits than the service, so that the
/// service's message naming the rank that stalled arrives first.
const CLIENT_GRACE: Duration = Duration::from_secs(2);

/// An all-gather among the job's ranks.
pub(crate) trait Store {
    /// Contributes `mine`; returns every rank's contribution in rank order.
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
}

/// PMI-1 as a [`Store`].
pub(crate) struct PmiStore {
    pmi: Box<Pmi>,
    round: u32,
}

impl PmiStore {
    pub(crate) fn new(pmi: Box<Pmi>) -> Self {
        Self { pmi, round: 0 }
    }
}

impl Store for PmiStore {
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.round += 1;
        self.pmi
            .allgather(&format!("tdm{}", self.round), mine)
            .map_err(|e| Error::Bootstrap(format!("PMI exchange failed: {e}")))
    }
}

impl Drop for PmiStore {
    fn drop(&mut self) {
        let _ = self.pmi.finalize();
    }
}

/// A connected stream of either family.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }

    fn peer(&self) -> String {
        match self {
            Stream::Tcp(s) => s
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into()),
            Stream::Unix(_) => "a local process".into(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }
    fn set_nonblocking(&self) -> std::io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l) => l.set_nonblocking(true),
        }
    }
}

/// How connections prove they belong to the job.
#[derive(Clone)]
pub(crate) struct Admission {
    /// The job's secret (required over TCP).
    pub secret: Option<Secret>,
    /// Binds proofs to this job and purpose.
    pub context: Vec<u8>,
}

/// Proves (and checks) membership on a fresh connection.
pub(crate) fn admit(s: &mut Stream, adm: &Admission, role: Role) -> std::io::Result<()> {
    if let Stream::Unix(u) = s {
        let uid = crate::sys::peer_uid(u.as_raw_fd())?;
        if uid != crate::sys::uid() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("a process of user {uid} is not of this job's user"),
            ));
        }
    }
    match &adm.secret {
        Some(secret) => auth::handshake(s, secret, role, &adm.context),
        None => Ok(()),
    }
}

fn write_frame(s: &mut impl Write, b: &[u8]) -> std::io::Result<()> {
    s.write_all(&(b.len() as u32).to_le_bytes())?;
    s.write_all(b)
}

fn read_frame(s: &mut impl Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut l = [0u8; 4];
    s.read_exact(&mut l)?;
    let n = u32::from_le_bytes(l) as usize;
    if n > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a {n}-byte bootstrap frame (at most {max})"),
        ));
    }
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)?;
    Ok(b)
}

/// The client side of the root or local service.
pub(crate) struct RootStore {
    stream: Stream,
    size: usize,
    root: String,
    server: Option<JoinHandle<()>>,
    /// The bootstrap's deadline: every round must end before it.
    deadline: Instant,
}

fn local_name(job: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(job.as_bytes());
    let hex = auth::to_hex(&h[..8]);
    format!("tandem-{}-{hex}", crate::sys::uid())
}

fn unix_addr(name: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
}

impl RootStore {
    /// Joins the service at `root` (`host:port`); rank 0 starts it first.
    pub(crate) fn tcp(
        root: &str,
        rank: usize,
        size: usize,
        adm: Admission,
        deadline: Instant,
    ) -> Result<Self> {
        let addrs: Vec<SocketAddr> = root
            .to_socket_addrs()
            .map_err(|e| Error::Config(format!("TANDEM_ROOT={root:?}: {e}")))?
            .collect();
        let Some(&first) = addrs.first() else {
            return Err(Error::Config(format!(
                "TANDEM_ROOT={root:?} names no address"
            )));
        };
        let server = if rank == 0 {
            let l = TcpListener::bind(first).map_err(|e| {
                Error::Config(format!(
                    "rank 0 cannot listen at TANDEM_ROOT={root} ({e}): it must be an address of \
                     rank 0's host with a free port"
                ))
            })?;
            Some(spawn_server(Listener::Tcp(l), size, adm.clone(), deadline)?)
        } else {
            None
        };
        let stream = retry(deadline, root, || {
            TcpStream::connect_timeout(&first, Duration::from_secs(1)).map(Stream::Tcp)
        })?;
        Self::hello(stream, rank, size, root.to_string(), adm, server, deadline)
    }

    /// Joins the job's local service (every rank on this host); rank 0
    /// starts it.
    pub(crate) fn local(
        job: &str,
        rank: usize,
        size: usize,
        adm: Admission,
        deadline: Instant,
    ) -> Result<Self> {
        let name = local_name(job);
        let addr = unix_addr(&name)?;
        let server = if rank == 0 {
            let l = UnixListener::bind_addr(&addr).map_err(|e| {
                Error::Config(format!(
                    "rank 0 cannot open the job's local socket @{name} ({e}): is another job \
                     with the same id ({job}) running? Set TANDEM_JOB to tell them apart"
                ))
            })?;
            Some(spawn_server(
                Listener::Unix(l),
                size,
                adm.clone(),
                deadline,
            )?)
        } else {
            None
        };
        let stream = retry(deadline, &format!("the local socket @{name}"), || {
            UnixStream::connect_addr(&addr).map(Stream::Unix)
        })?;
        Self::hello(
            stream,
            rank,
            size,
            format!("@{name}"),
            adm,
            server,
            deadline,
        )
    }

    fn hello(
        mut stream: Stream,
        rank: usize,
        size: usize,
        root: String,
        adm: Admission,
        server: Option<JoinHandle<()>>,
        deadline: Instant,
    ) -> Result<Self> {
        let bad = |e: std::io::Error| Error::Bootstrap(format!("joining the job at {root}: {e}"));
        stream
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(bad)?;
        admit(&mut stream, &adm, Role::Connector).map_err(bad)?;
        let mut h = Vec::with_capacity(12);
        h.extend_from_slice(HELLO);
        h.extend_from_slice(&(rank as u32).to_le_bytes());
        h.extend_from_slice(&(size as u32).to_le_bytes());
        stream.write_all(&h).map_err(bad)?;
        stream.set_read_timeout(None).map_err(bad)?;
        Ok(Self {
            stream,
            size,
            root,
            server,
            deadline,
        })
    }
}

fn retry<T>(deadline: Instant, what: &str, mut f: impl FnMut() -> std::io::Result<T>) -> Result<T> {
    let mut last;
    loop {
        match f() {
            Ok(t) => return Ok(t),
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            return Err(Error::Bootstrap(format!(
                "could not reach {what} before the bootstrap deadline: {last}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl RootStore {
    /// The local address of a TCP connection to the root: the interface
    /// that reaches the other hosts.
    pub(crate) fn local_ip(&self) -> Option<std::net::IpAddr> {
        match &self.stream {
            Stream::Tcp(s) => s.local_addr().ok().map(|a| a.ip()),
            Stream::Unix(_) => None,
        }
    }
}

impl Store for RootStore {
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let root = self.root.clone();
        let bad = move |e: std::io::Error| {
            if timed_out(&e) {
                Error::Bootstrap(format!(
                    "bootstrap deadline passed (TANDEM_BOOT_TIMEOUT): the exchange at {root} \
                     did not complete (a rank joined the job but stopped taking part)"
                ))
            } else {
                Error::Bootstrap(format!("bootstrap exchange with {root} failed: {e}"))
            }
        };
        // The service answers by its own deadline, naming the rank that
        // stalled; the grace lets that answer arrive before this side
        // gives up on its own.
        let wait = left(self.deadline).unwrap_or_default() + CLIENT_GRACE;
        self.stream.set_read_timeout(Some(wait)).map_err(&bad)?;
        self.stream.set_write_timeout(Some(wait)).map_err(&bad)?;
        let sent = write_frame(&mut self.stream, mine);
        let mut status = [0u8; 1];
        if let Err(e) = sent {
            // The service may have failed the job and hung up: its reason,
            // already in this socket, says more than the broken pipe.
            if self.stream.read_exact(&mut status).is_ok() && status[0] != 0 {
                if let Ok(msg) = read_frame(&mut self.stream, MAX_RECORD) {
                    return Err(Error::Bootstrap(String::from_utf8_lossy(&msg).into_owned()));
                }
            }
            return Err(bad(e));
        }
        self.stream.read_exact(&mut status).map_err(&bad)?;
        if status[0] != 0 {
            let msg = read_frame(&mut self.stream, MAX_RECORD).map_err(&bad)?;
            return Err(Error::Bootstrap(String::from_utf8_lossy(&msg).into_owned()));
        }
        (0..self.size)
            .map(|_| read_frame(&mut self.stream, MAX_RECORD).map_err(&bad))
            .collect()
    }
}

impl Drop for RootStore {
    fn drop(&mut self) {
        if let Stream::Tcp(s) = &self.stream {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Stream::Unix(s) = &self.stream {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(h) = self.server.take() {
            let _ = h.join();
        }
    }
}

/// Starts the service for `n` ranks on `l` in a thread of rank 0.
fn spawn_server(
    l: Listener,
    n: usize,
    adm: Admission,
    deadline: Instant,
) -> Result<JoinHandle<()>> {
    l.set_nonblocking()?;
    Ok(std::thread::Builder::new()
        .name("tandem-bootstrap".into())
        .spawn(move || serve(l, n, adm, deadline))?)
}

fn serve(l: Listener, n: usize, adm: Admission, deadline: Instant) {
    let (tx, rx) = mpsc::channel::<(usize, Stream)>();
    let mut conns: Vec<Option<Stream>> = (0..n).map(|_| None).collect();
    let mut joined = 0;
    while joined < n {
        if Instant::now() >= deadline {
            let missing: Vec<String> = (0..n)
                .filter(|&r| conns[r].is_none())
                .map(|r| r.to_string())
                .collect();
            let msg = format!(
                "bootstrap deadline passed: rank(s) {} never joined the job",
                missing.join(", ")
            );
            eprintln!("tandem: {msg}");
            fail_all(&mut conns, &msg);
            return;
        }
        match l.accept() {
            Ok(s) => {
                let (tx, adm) = (tx.clone(), adm.clone());
                let _ = std::thread::Builder::new()
                    .name("tandem-admit".into())
                    .spawn(move || match admit_rank(s, &adm, n) {
                        Ok((r, s)) => {
                            let _ = tx.send((r, s));
                        }
                        Err(e) => eprintln!("tandem: bootstrap refused a connection: {e}"),
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => eprintln!("tandem: bootstrap accept failed: {e}"),
        }
        while let Ok((r, s)) = rx.try_recv() {
            if conns[r].is_some() {
                eprintln!("tandem: bootstrap refused a second connection claiming rank {r}");
                continue;
            }
            conns[r] = Some(s);
            joined += 1;
        }
    }
    drop(l);
    // Rounds until the ranks hang up, each by the bootstrap's deadline.
    for round in 1.. {
        let mut records = Vec::with_capacity(n);
        for r in 0..n {
            let s = conns[r].as_mut().expect("every rank joined");
            let got = match left(deadline) {
                Some(t) => s
                    .set_read_timeout(Some(t))
                    .and_then(|()| s.set_write_timeout(Some(t)))
                    .and_then(|()| read_frame(s, MAX_RECORD)),
                None => Err(std::io::ErrorKind::TimedOut.into()),
            };
            match got {
                Ok(b) => records.push(b),
                Err(e) if r == 0 && e.kind() == std::io::ErrorKind::UnexpectedEof => return,
                Err(e) if timed_out(&e) => {
                    let msg = format!(
                        "bootstrap deadline passed (TANDEM_BOOT_TIMEOUT): rank {r} joined the \
                         job but did not take part in exchange round {round}"
                    );
                    eprintln!("tandem: {msg}");
                    fail_all(&mut conns, &msg);
                    return;
                }
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof && records.is_empty() {
                        // Bootstrap over: ranks hang up once done.
                        return;
                    }
                    let msg = format!("rank {r} left the bootstrap: {e}");
                    conns[r] = None;
                    fail_all(&mut conns, &msg);
                    return;
                }
            }
        }
        for s in conns.iter_mut().flatten() {
            let mut out =
                Vec::with_capacity(1 + records.iter().map(|r| r.len() + 4).sum::<usize>());
            out.push(0u8);
            for r in &records {
                out.extend_from_slice(&(r.len() as u32).to_le_bytes());
                out.extend_from_slice(r);
            }
            let _ = s.write_all(&out);
        }
    }
}

fn fail_all(conns: &mut [Option<Stream>], msg: &str) {
    for s in conns.iter_mut().flatten() {
        let _ = s.write_all(&[1u8]);
        let _ = write_frame(s, msg.as_bytes());
        // Close gently: a socket closed with unread input is reset, and the
        // reset may overtake the message.
        let _ = match s {
            Stream::Tcp(t) => t.shutdown(std::net::Shutdown::Write),
            Stream::Unix(u) => u.shutdown(std::net::Shutdown::Write),
        };
    }
    for s in conns.iter_mut().flatten() {
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let _ = std::io::copy(s, &mut std::io::sink());
    }
}

/// Admits one connection: membership, then the rank's hello.
fn admit_rank(mut s: Stream, adm: &Admission, n: usize) -> std::io::Result<(usize, Stream)> {
    let from = s.peer();
    let wrap = |e: std::io::Error| std::io::Error::new(e.kind(), format!("from {from}: {e}"));
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(wrap)?;
    admit(&mut s, adm, Role::Acceptor).map_err(wrap)?;
    let mut h = [0u8; 12];
    s.read_exact(&mut h).map_err(wrap)?;
    let rank = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    let size = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
    if &h[..4] != HELLO || rank >= n || size != n {
        return Err(wrap(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a rank of another job (rank {rank} of {size}; this job has {n} ranks)"),
        )));
    }
    s.set_read_timeout(None).map_err(wrap)?;
    Ok((rank, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank that joins, takes part in one round and then stops (without
    /// closing its socket) is named by the deadline, on every rank, rather
    /// than hanging the job.
    #[test]
    fn a_rank_that_joins_then_stalls_is_named_by_the_deadline() {
        let job = format!("meet-stall-{}", std::process::id());
        let adm = Admission {
            secret: None,
            context: b"bootstrap:meet-stall".to_vec(),
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        let (tx, rx) = mpsc::channel();
        let (a, j) = (adm.clone(), job.clone());
        std::thread::spawn(move || {
            let r = RootStore::local(&j, 0, 2, a, deadline).and_then(|mut s| {
                let first = s.allgather(b"zero")?;
                let second = s.allgather(b"zero again");
                Ok((first, second))
            });
            let _ = tx.send(r);
        });
        let mut one = RootStore::local(&job, 1, 2, adm, deadline).expect("rank 1 joins");
        assert_eq!(
            one.allgather(b"one").expect("the first round"),
            vec![b"zero".to_vec(), b"one".to_vec()]
        );
        // Rank 1 now stalls: it neither sends its second record nor hangs up.
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("rank 0's second round hung past the bootstrap deadline");
        let (first, second) = got.expect("rank 0 joined");
        assert_eq!(first.len(), 2);
        let e = second.expect_err("a round with a stalled rank cannot succeed");
        let t = e.to_string();
        assert!(
            t.contains("rank 1 joined the job but did not take part in exchange round 2"),
            "{t}"
        );
        // The stalled rank, when it comes back, is told the same.
        let t = one
            .allgather(b"late")
            .expect_err("the job failed")
            .to_string();
        assert!(
            t.contains("rank 1 joined the job but did not take part"),
            "{t}"
        );
    }

    /// `TANDEM_BOOT_TIMEOUT` takes up to about 1.8e19 s, past what an
    /// `Instant` holds: the deadline saturates instead of panicking.
    #[test]
    fn the_longest_boot_timeout_does_not_overflow() {
        let d = deadline_after(Duration::from_secs_f64(1.8e19));
        assert!(d > Instant::now() + Duration::from_secs(50 * 365 * 86_400));
        let near = deadline_after(Duration::from_secs(3));
        assert!(near <= Instant::now() + Duration::from_secs(3));
    }
}
