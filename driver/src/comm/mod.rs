//! The communicator: blocking and scoped non-blocking point-to-point calls.

use crate::config::{debug_level, Config, DebugLevel, Layout};
use crate::error::{Error, OpKind, Result, Wait};
use crate::progress::waits::WaitRec;
use crate::progress::{
    delivered, Engine, Fast, OpId, Status, ANY_TAG as CORE_ANY_TAG, FT_CTX, TAG_UB,
};
use crate::world::heart::Heart;
use crate::world::launch::Children;
use crate::world::proxy::Proxy;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tandem_core::lock::{SpinGuard, SpinLock};
use tandem_core::sync::{AtomicU32, AtomicU64, Ordering};

mod collective;
mod ft;
pub use ft::{Agreeing, Agreement, CONTEXT_WORDS};
mod persistent;
mod raw;
mod trace;
mod typed;
pub use collective::CollRequest;
use collective::CollState;
pub use persistent::{PersistentRecv, PersistentSend};
pub use raw::{RawCollRequest, RawRequest};

/// A message tag.
pub type Tag = u32;

/// Polls of the fast receive path per lock hold.
const FAST_POLLS: u32 = 64;

/// Most polls of the fast receive path before a blocking receive is
/// posted (milliseconds): past that a wait goes through the general path,
/// whose deadline and peer checks it needs, whatever the spin setting
/// ([`WaitPolicy::BUSY`](crate::WaitPolicy::BUSY) spins without end).
const FAST_SPIN_MAX: u32 = 1 << 20;

/// Receive from any source (MPI's `MPI_ANY_SOURCE`).
pub const ANY_SOURCE: usize = usize::MAX;
/// Receive any tag (MPI's `MPI_ANY_TAG`).
pub const ANY_TAG: Tag = CORE_ANY_TAG;

struct Shared {
    engine: SpinLock<Engine>,
    rank: usize,
    size: usize,
    cfg: Config,
    next_scope: AtomicU32,
    next_ctx: AtomicU32,
    proxy: Proxy,
    /// The heartbeat thread, where a link needs one.
    heart: Heart,
    children: Mutex<Option<Children>>,
    /// What this rank's blocking calls spent waiting ([`Comm::counters`]).
    waits: WaitCounts,
    /// The count of trace signals this rank has answered.
    signals_seen: AtomicU64,
}

/// What one rank did, from [`Comm::counters`]: a test or a benchmark can
/// tell which path ran (a kernel that refuses cross-memory attach shows as
/// streamed receives, not as slow pulls) and what a wait cost, without
/// timing anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Rendezvous receives whose payload was pulled single-copy from the
    /// sender's buffer (cross-memory attach over shared memory, RDMA READ).
    pub pulled: u64,
    /// Rendezvous receives whose payload the sender streamed (the slot ring
    /// over shared memory, the byte stream over TCP, RDMA writes), because
    /// single copy was off, below its threshold, or refused.
    pub streamed: u64,
    /// Polls of blocking calls that found nothing to do.
    pub idle_polls: u64,
    /// `sched_yield` calls of blocking calls (after spinning found nothing).
    pub yields: u64,
    /// Sleeps of blocking calls (after yielding found nothing).
    pub sleeps: u64,
    /// Eager payloads sent through a shared-memory eager cell (those from
    /// the host's cell threshold up), not behind their header in the line
    /// ring.
    pub cells: u64,
}

/// Fruitless polls, yields and sleeps of one rank's blocking calls, added
/// when a wait ends (polls) or as it goes (yields and sleeps, which are
/// system calls anyway).
#[derive(Default)]
struct WaitCounts {
    polls: AtomicU64,
    yields: AtomicU64,
    sleeps: AtomicU64,
}

impl WaitCounts {
    fn add_polls(&self, n: u64) {
        if n > 0 {
            self.polls.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// A communicator: `size` ranks that exchange messages by rank and tag.
///
/// Blocking calls borrow their buffer for the call. Non-blocking calls live
/// in a [`Comm::scope`], which does not return before every operation
/// started in it has finished, so a buffer can never be freed or reused
/// while a transfer into it may still run, even if a [`Request`] is leaked
/// with `mem::forget`.
///
/// ```no_run
/// use tandem_driver::Comm;
/// // Started by `tandem-run -n 2 ./prog`:
/// let comm = Comm::from_env()?;
/// let peer = 1 - comm.rank();
/// let mut got = [0u8; 5];
/// comm.scope(|s| {
///     let r = s.irecv(&mut got, peer, 7)?;
///     s.isend(b"hello", peer, 7)?.wait()?;
///     r.wait()
/// })??;
/// assert_eq!(&got, b"hello");
/// # Ok::<(), tandem_driver::Error>(())
/// ```
///
/// # Errors
/// The point-to-point calls share these errors; each call's own section
/// names those that apply to it.
///
/// * Refused at the call, with nothing posted: [`Error::InvalidRank`] (a
///   rank outside `0..size()`; [`ANY_SOURCE`] only on receives),
///   [`Error::InvalidTag`] (a tag above [`TAG_UB`]; [`ANY_TAG`] only on
///   receives), [`Error::MessageTooLarge`] (a send longer than
///   [`MAX_MESSAGE`](crate::MAX_MESSAGE)), [`Error::TooManyRequests`]
///   (more operations pending than
///   [`Config::max_requests`](field@Config::max_requests)).
/// * The link to the peer failed: [`Error::PeerLost`] (the peer exited, or
///   closed or reset its connection), [`Error::Protocol`] (it sent a
///   corrupt header) or [`Error::ChannelBroken`] (any other failure of the
///   link, or a rendezvous send to that peer abandoned part-way). Every
///   operation with that peer fails with that same error from then on,
///   those posted later at once; eager messages that arrived before stay
///   receivable.
/// * Blocked in a cycle: [`Error::Deadlock`] once the ranks it waits for
///   wait for this rank in a cycle (followed through the wait records of
///   every host) that held still for
///   [`Config::deadlock_after`](field@Config::deadlock_after).
/// * No progress for [`Config::timeout`](field@Config::timeout):
///   [`Error::Deadlock`] when the ranks it waits for wait for this rank
///   in a cycle, else [`Error::Timeout`] (with what this rank can see of
///   why: the chain of waits, unmatched messages). The operation is withdrawn; a
///   rendezvous send withdrawn that way leaves its channel broken.
/// * A receive: [`Error::Truncated`] when the message is longer than the
///   buffer (its first bytes are delivered), [`Error::Cancelled`] after
///   [`Request::cancel`].
pub struct Comm {
    sh: Arc<Shared>,
    /// This communicator's context: its traffic never matches another's.
    ctx: u16,
    /// This rank and the number of ranks, in this communicator.
    rank: usize,
    size: usize,
    /// The world rank of each of this communicator's ranks, in order, for
    /// a communicator over part of the world ([`Comm::shrink`]); `None`:
    /// the whole world, rank for rank.
    members: Option<Arc<[u32]>>,
    /// The communicator that owns the proxy thread (not a dup).
    primary: bool,
    /// Collectives in flight and their settings.
    coll: std::cell::RefCell<CollState>,
    /// The small blocking collective compiled last, run again by a call of
    /// the same shape.
    inline: std::cell::RefCell<Box<crate::coll::exec::Program>>,
    /// Agreements and shrinks run on this communicator so far (they tag
    /// their messages with it).
    epoch: std::cell::Cell<u32>,
    /// `!Sync`: one thread at a time drives a communicator (it may be moved
    /// to another thread). Ranks in threads each get their own.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("context", &self.ctx)
            .finish()
    }
}

impl Comm {
    /// Whether the environment names a launcher tandem knows (`tandem-run`,
    /// hydra's PMI, Open MPI, Slurm, or `RANK`/`WORLD_SIZE`). When it does
    /// not, [`from_env`](Self::from_env) fails with [`Error::NotLaunched`],
    /// and a program may start alone instead ([`Comm::local`] with one
    /// rank), as MPI's singleton initialisation does.
    pub fn launched() -> bool {
        crate::world::bootstrap::launcher::present()
    }

    /// Joins the job this process was started in by `tandem-run` (or by
    /// [`Comm::local`]), with configuration from `TANDEM_*` variables.
    ///
    /// # Errors
    /// * [`Error::Config`]: a `TANDEM_*` variable that does not parse or is out
    ///   of range ([`Config::from_env`], [`Layout::from_env`], the transport,
    ///   collective and bootstrap settings), `TANDEM_TRANSPORT=verbs` without a
    ///   usable RDMA device, or pinning to
    ///   [`Config::pin_core`](field@Config::pin_core) failed;
    /// * [`Error::NotLaunched`]: the environment names no launcher tandem
    ///   knows, or its variables are incomplete or malformed;
    /// * [`Error::InvalidRank`]: the launcher's rank is not below its size;
    /// * [`Error::JobMismatch`]: the inherited shared-memory file belongs to
    ///   another job;
    /// * [`Error::Bootstrap`]: the ranks could not meet: one never came before
    ///   the bootstrap deadline (`TANDEM_BOOT_TIMEOUT`), could not be reached,
    ///   sent a bad record or failed the secret check;
    /// * [`Error::Mismatch`]: ranks disagree on the eager limit, the credits,
    ///   the envelopes or the transport;
    /// * [`Error::Io`]: an operating-system call failed (mapping the job file,
    ///   a socket, starting the proxy thread).
    pub fn from_env() -> Result<Self> {
        Self::from_env_with(Config::from_env()?)
    }

    /// Like [`from_env`](Self::from_env) with an explicit configuration.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env). The tuning variables `cfg` stands for
    /// are not read: only the job's identity comes from the environment.
    pub fn from_env_with(cfg: Config) -> Result<Self> {
        // The launcher was asked to pass SIGUSR1 on for hang reports
        // (`tandem-run --report-signal`): the program's user opted in.
        if matches!(
            std::env::var("TANDEM_REPORT_SIGNAL").as_deref(),
            Ok("1" | "launcher")
        ) {
            Self::trace_on_signal(libc::SIGUSR1)?;
        }
        let j = crate::world::bootstrap::join(&cfg)?;
        Self::start(j, cfg)
    }

    /// Creates a local world of `n` ranks on this machine by starting `n-1`
    /// more copies of the running program (same arguments); the original
    /// process becomes rank 0 and each copy returns its own rank from this
    /// same call. Rank 0 waits for the copies when the communicator is
    /// dropped or [`finish`](Self::finish)ed.
    ///
    /// Under a launcher (tandem-run, mpirun, mpiexec, srun, torchrun) it
    /// starts nothing and joins the launched job instead, which must have
    /// `n` ranks.
    ///
    /// Call it before starting threads whose work the copies must not redo.
    ///
    /// # Errors
    /// As [`local_with`](Self::local_with), and [`Error::Config`] for a
    /// variable [`Config::from_env`] refuses.
    pub fn local(n: usize) -> Result<Self> {
        Self::local_with(n, Config::from_env()?)
    }

    /// [`local`](Self::local) with an explicit configuration.
    ///
    /// # Errors
    /// * Under a launcher: as [`from_env_with`](Self::from_env_with), and
    ///   [`Error::JobMismatch`] if the launched job does not have `n` ranks.
    /// * Otherwise: [`Error::Config`] for `n` of 0 or above
    ///   [`MAX_RANKS`](crate::job::MAX_RANKS), a layout
    ///   [`Layout::from_env`] refuses, a job file over 1 TiB or an invalid
    ///   `TANDEM_TRANSPORT`; [`Error::Io`] if the program cannot be found or
    ///   started again, or the job file cannot be made (`/dev/shm` full); then
    ///   the errors of joining, as for [`from_env`](Self::from_env), here and
    ///   in each copy.
    pub fn local_with(n: usize, cfg: Config) -> Result<Self> {
        let (j, children) = crate::world::bootstrap::local_world(n, &cfg)?;
        let c = Self::start(j, cfg)?;
        *c.sh.children.lock().unwrap_or_else(|e| e.into_inner()) = children;
        Ok(c)
    }

    /// Runs `f` on `n` threads of this process, each with the communicator
    /// of its rank, over anonymous shared memory; returns their results in
    /// rank order. Handy for tests and examples; for separate processes use
    /// [`Comm::local`] or `tandem-run`.
    ///
    /// # Errors
    /// Per rank, in its entry: `f`'s error, [`Error::Panicked`] if
    /// its thread panicked, or what kept its communicator from being
    /// made: [`Error::Config`] or [`Error::Io`] from the shared memory
    /// ([`JobMap::anon`](crate::job::JobMap::anon); then
    /// every entry holds it, a single one for `n` of 0), or
    /// [`Error::Config`] from `cfg` (a
    /// [`pin_core`](field@Config::pin_core) that cannot be pinned).
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout};
    /// let out = Comm::threads(2, &Layout::default(), Config::default(), |comm| {
    ///     let peer = 1 - comm.rank();
    ///     let mut buf = [0u8; 4];
    ///     if comm.rank() == 0 {
    ///         comm.send(b"ping", peer, 1)?;
    ///     } else {
    ///         comm.recv(&mut buf, peer, 1)?;
    ///     }
    ///     Ok(buf)
    /// });
    /// assert_eq!(out[1].as_ref().unwrap(), b"ping");
    /// ```
    pub fn threads<R: Send>(
        n: usize,
        layout: &Layout,
        cfg: Config,
        f: impl Fn(Comm) -> Result<R> + Sync,
    ) -> Vec<Result<R>> {
        Self::threads_on(n, crate::world::bootstrap::Links::Shm, layout, cfg, f)
    }

    /// Like [`Comm::threads`], with the ranks connected as `links` says:
    /// shared memory, TCP over the loopback, or a mix as if the ranks were
    /// spread over several hosts. The transport-generic test suites use it
    /// to run every scenario over every transport in one process.
    ///
    /// # Errors
    /// Per rank, in its entry, as for [`Comm::threads`]; setting the ranks
    /// up may also fail with [`Error::Io`] (a loopback socket) or
    /// [`Error::Bootstrap`] (a connection between two ranks).
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout, Links};
    /// let out = Comm::threads_on(3, Links::Mixed { hosts: 2 }, &Layout::default(),
    ///                            Config::default(), |comm| {
    ///     let next = (comm.rank() + 1) % comm.size();
    ///     let prev = (comm.rank() + comm.size() - 1) % comm.size();
    ///     let mut got = [0u8; 1];
    ///     comm.sendrecv(&[comm.rank() as u8], next, 0, &mut got, prev, 0)?;
    ///     Ok(got[0])
    /// });
    /// assert_eq!(*out[0].as_ref().unwrap(), 2);
    /// ```
    pub fn threads_on<R: Send>(
        n: usize,
        links: crate::world::bootstrap::Links,
        layout: &Layout,
        cfg: Config,
        f: impl Fn(Comm) -> Result<R> + Sync,
    ) -> Vec<Result<R>> {
        let plan = match crate::world::bootstrap::ThreadPlan::new(n, links, layout) {
            Ok(p) => p,
            Err(e) => return (0..n.max(1)).map(|_| Err(e.clone())).collect(),
        };
        on_threads(n, cfg, |r, cfg| plan.join(r, cfg), f)
    }

    fn start(j: crate::world::bootstrap::Joined, cfg: Config) -> Result<Self> {
        let crate::world::bootstrap::Joined { engine, rank, size } = j;
        if let Some(core) = cfg.pin_core {
            crate::sys::pin_to(core)?;
        }
        if debug_level() >= DebugLevel::Info {
            let routes: Vec<String> = (0..size)
                .map(|p| match engine.route(p) {
                    Some(k) => format!("{p}:{k}"),
                    None => format!("{p}:?"),
                })
                .collect();
            eprintln!(
                "tandem[{rank}/{size}] routes [{}] config {:?}",
                routes.join(" "),
                cfg
            );
        }
        let heart = engine.needs_heartbeats();
        let sh = Arc::new(Shared {
            engine: if cfg.proxy_core.is_some() || heart {
                SpinLock::new(engine)
            } else {
                // SAFETY: without a proxy or heartbeat thread only the
                // thread holding the `Comm` reaches the engine: `Comm` is
                // `!Sync`, scopes and requests borrow it on that thread, and
                // `dup` (the only way to a second owner, which may move to
                // another thread) switches the lock to the shared protocol
                // first.
                unsafe { SpinLock::new_single(engine) }
            },
            rank,
            size,
            cfg,
            next_scope: AtomicU32::new(1),
            next_ctx: AtomicU32::new(1),
            proxy: Proxy::default(),
            heart: Heart::default(),
            children: Mutex::new(None),
            waits: WaitCounts::default(),
            signals_seen: AtomicU64::new(0),
        });
        if let Some(core) = sh.cfg.proxy_core {
            sh.proxy
                .start(Arc::downgrade(&sh), |sh| &sh.engine, rank, core)?;
        }
        if heart {
            let every = sh.cfg.failure_timeout / 4;
            sh.heart
                .start(Arc::downgrade(&sh), |sh| &sh.engine, rank, every)?;
        }
        let coll = std::cell::RefCell::new(CollState::new(sh.cfg.coll.clone()));
        Ok(Self {
            sh,
            ctx: 0,
            rank,
            size,
            members: None,
            primary: true,
            coll,
            inline: Default::default(),
            epoch: Default::default(),
            _not_sync: PhantomData,
        })
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The configuration in effect.
    pub fn config(&self) -> &Config {
        &self.sh.cfg
    }

    /// How this rank reaches rank `p`: shared memory, or a TCP connection
    /// (with both ends' addresses).
    ///
    /// # Errors
    /// [`Error::InvalidRank`] for a rank outside `0..size()`.
    pub fn route(&self, p: usize) -> Result<crate::transport::Route> {
        let invalid = Error::InvalidRank {
            rank: p,
            size: self.size(),
        };
        if p >= self.size() {
            return Err(invalid);
        }
        self.engine().route_of(self.world(p)).ok_or(invalid)
    }

    /// What this rank has done so far, counted from its start (all of its
    /// communicators together): which path carried each rendezvous
    /// payload, and what its blocking calls spent waiting. Reading them
    /// costs a lock of the engine; counting costs nothing on the paths that
    /// move data.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout};
    /// let out = Comm::threads(2, &Layout::default(), Config::default().cma(false), |comm| {
    ///     let mut buf = vec![1u8; 1 << 20];
    ///     if comm.rank() == 0 {
    ///         comm.send(&buf, 1, 0)?;
    ///     } else {
    ///         comm.recv(&mut buf, 0, 0)?;
    ///     }
    ///     Ok(comm.counters())
    /// });
    /// // Single copy is off: rank 1 had the megabyte streamed to it.
    /// let c = out[1].as_ref().unwrap();
    /// assert_eq!((c.pulled, c.streamed), (0, 1));
    /// ```
    pub fn counters(&self) -> Counters {
        let e = self.engine();
        let w = &self.sh.waits;
        Counters {
            pulled: e.pulled,
            streamed: e.streamed,
            idle_polls: w.polls.load(Ordering::Relaxed) + e.idle_polls,
            yields: w.yields.load(Ordering::Relaxed),
            sleeps: w.sleeps.load(Ordering::Relaxed),
            cells: e.cells_sent(),
        }
    }

    /// Registers `buf` with every RDMA connection of this communicator for
    /// as long as the returned handle lives, so that rendezvous sends and
    /// receives on any part of it (through the handle, which derefs to the
    /// buffer) reuse that registration instead of registering and
    /// deregistering the buffer for each operation: on verbs hardware
    /// registration costs microseconds to milliseconds (it pins pages).
    /// The handle borrows the buffer exclusively, so the memory cannot be
    /// freed or moved while registered. Over shared memory and TCP nothing
    /// needs registering and this costs nothing.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout, Links};
    /// let out = Comm::threads_on(2, Links::Soft, &Layout::default(), Config::default(), |comm| {
    ///     let mut buf = vec![0u8; 1 << 20];
    ///     let mut reg = comm.register(&mut buf)?;
    ///     let peer = 1 - comm.rank();
    ///     for _ in 0..3 {
    ///         if comm.rank() == 0 {
    ///             reg.fill(5);
    ///             comm.send(&reg, peer, 0)?;
    ///         } else {
    ///             comm.recv(&mut reg, peer, 0)?;
    ///         }
    ///     }
    ///     Ok(reg[1000])
    /// });
    /// assert_eq!(*out[1].as_ref().unwrap(), 5);
    /// ```
    ///
    /// # Errors
    /// A transport that cannot register the buffer (an RDMA device out of
    /// memory-registration resources) says so; nothing stays registered.
    pub fn register<'a>(&'a self, buf: &'a mut [u8]) -> Result<Registered<'a>> {
        self.engine().pin(buf)?;
        Ok(Registered { comm: self, buf })
    }

    /// This communicator's context id (0 for the world).
    pub fn context(&self) -> u16 {
        self.ctx
    }

    /// A new communicator over the same ranks whose traffic is kept apart
    /// from this one's: a receive on one never matches a message sent on
    /// the other, wildcards included (MPI's `MPI_Comm_dup`). Like MPI, every
    /// rank must call `dup` in the same order (contexts are numbered
    /// locally). The duplicate shares this rank's engine; it may be moved to
    /// another thread (calls on the two are then serialized by the engine's
    /// lock, which `dup` switches to its atomic protocol). The duplicate's
    /// collectives start with this communicator's settings
    /// ([`set_algorithm`](Self::set_algorithm),
    /// [`set_pipeline`](Self::set_pipeline) included), as `MPI_Comm_dup`
    /// copies a communicator's hints.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout, ANY_TAG};
    /// let out = Comm::threads(2, &Layout::default(), Config::default(), |world| {
    ///     let lib = world.dup()?;
    ///     let mut buf = [0u8; 3];
    ///     if world.rank() == 0 {
    ///         lib.send(b"lib", 1, 0)?;
    ///         world.send(b"app", 1, 0)?;
    ///     } else {
    ///         world.recv(&mut buf, 0, ANY_TAG)?; // never sees "lib"
    ///         assert_eq!(&buf, b"app");
    ///         lib.recv(&mut buf, 0, 0)?;
    ///     }
    ///     Ok(buf)
    /// });
    /// assert_eq!(out[1].as_ref().unwrap(), b"lib");
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] past 4094 communicators on this rank (the world, its
    /// duplicates and shrunk communicators: each takes two of the
    /// [`MAX_CONTEXTS`](crate::MAX_CONTEXTS) contexts, and two are kept for
    /// the fault-tolerance protocols).
    pub fn dup(&self) -> Result<Comm> {
        // The duplicate may be moved to another thread: from now on the
        // engine is locked atomically (we are its only user right now).
        self.sh.engine.share();
        let c = self.sh.next_ctx.fetch_add(1, Ordering::Relaxed);
        // Each communicator has two contexts: its own, and the one of its
        // collectives (the upper half).
        if c >= FT_CTX as u32 {
            return Err(Error::Config(format!("more than {FT_CTX} communicators")));
        }
        Ok(Comm {
            sh: self.sh.clone(),
            ctx: c as u16,
            rank: self.rank,
            size: self.size,
            members: self.members.clone(),
            primary: false,
            coll: std::cell::RefCell::new(CollState::new(self.coll.borrow().settings().clone())),
            inline: Default::default(),
            epoch: Default::default(),
            _not_sync: PhantomData,
        })
    }

    /// A communicator over the same ranks with the context `ctx`
    /// (`1..MAX_CONTEXTS / 2 - 1`), chosen by the caller: for layers that build
    /// communicators over a subset of the ranks and agree on contexts among
    /// those ranks themselves, as MPI's `MPI_Comm_split` does (tandem's MPI
    /// library keeps a bitmap of free contexts and takes the lowest free on
    /// every member). Traffic on it never matches another context's. The
    /// caller must not use one context for two live communicators, nor mix
    /// this with [`dup`](Self::dup), whose numbering it does not see.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a context outside `1..MAX_CONTEXTS / 2 - 1`
    /// (the last is the fault-tolerance protocols').
    pub fn dup_with_context(&self, ctx: u16) -> Result<Comm> {
        if ctx == 0 || ctx >= FT_CTX {
            return Err(Error::InvalidArgument(format!(
                "context {ctx} outside 1..{FT_CTX}"
            )));
        }
        self.sh.engine.share();
        Ok(Comm {
            sh: self.sh.clone(),
            ctx,
            rank: self.rank,
            size: self.size,
            members: self.members.clone(),
            primary: false,
            coll: std::cell::RefCell::new(CollState::new(self.coll.borrow().settings().clone())),
            inline: Default::default(),
            epoch: Default::default(),
            _not_sync: PhantomData,
        })
    }

    #[inline(always)]
    fn engine(&self) -> SpinGuard<'_, Engine> {
        self.sh.engine()
    }

    fn check_send_tag(tag: Tag) -> Result<()> {
        if tag > TAG_UB {
            return Err(Error::InvalidTag { tag });
        }
        Ok(())
    }

    /// A send to `dst` with `tag` would be accepted.
    fn check_send(&self, dst: usize, tag: Tag) -> Result<()> {
        Self::check_send_tag(tag)?;
        if dst >= self.size() {
            return Err(Error::InvalidRank {
                rank: dst,
                size: self.size(),
            });
        }
        Ok(())
    }

    fn source(&self, src: usize) -> Result<u32> {
        if src == ANY_SOURCE {
            return Ok(crate::progress::ANY_SOURCE);
        }
        if src >= self.size() {
            return Err(Error::InvalidRank {
                rank: src,
                size: self.size(),
            });
        }
        Ok(self.world(src) as u32)
    }

    /// The world rank (the engine's numbering) of this communicator's rank
    /// `r`; for `r` not below `size()`, `usize::MAX`, a rank no peer has,
    /// so that the shortcuts refuse it and the general path reports
    /// [`Error::InvalidRank`] (never `r` itself: on a communicator of some
    /// of the job's ranks that can be another rank of the job).
    #[inline(always)]
    fn world(&self, r: usize) -> usize {
        match &self.members {
            None => r,
            Some(m) => m.get(r).map_or(usize::MAX, |&w| w as usize),
        }
    }

    /// The rank in this communicator of world rank `w` (`w` itself if it
    /// is not a member, which no message on this context comes from).
    fn rank_of_world(&self, w: usize) -> usize {
        match &self.members {
            None => w,
            // Sorted (a shrunk communicator): a binary search; in any
            // order (a subset): a scan.
            Some(m) => m
                .binary_search(&(w as u32))
                .ok()
                .or_else(|| m.iter().position(|&x| x == w as u32))
                .unwrap_or(w),
        }
    }

    /// An operation's result with the ranks in it renumbered from the
    /// world's to this communicator's.
    #[inline(always)]
    fn here(&self, r: Result<Status>) -> Result<Status> {
        if self.members.is_none() {
            return r;
        }
        self.here_slow(r)
    }

    /// A receive's outcome as its caller sees it: truncated or not, the
    /// source in this communicator's numbering. The common case, whole and
    /// in the world's numbering, without moving an error through.
    #[inline(always)]
    fn delivered_here(&self, st: Status, cap: usize) -> Result<Status> {
        if st.len > cap || self.members.is_some() {
            return self.here_slow(delivered(st, cap));
        }
        Ok(st)
    }

    #[cold]
    fn here_slow(&self, r: Result<Status>) -> Result<Status> {
        match r {
            Ok(mut st) => {
                st.source = self.rank_of_world(st.source);
                Ok(st)
            }
            Err(e) => Err(self.here_err(e)),
        }
    }

    /// `e` with the ranks it names renumbered to this communicator's.
    fn here_err(&self, e: Error) -> Error {
        if self.members.is_none() {
            return e;
        }
        match e {
            Error::Truncated {
                needed,
                got,
                source,
                tag,
            } => Error::Truncated {
                needed,
                got,
                source: self.rank_of_world(source),
                tag,
            },
            Error::PeerLost { rank } => Error::PeerLost {
                rank: self.rank_of_world(rank),
            },
            Error::PeerSilent {
                rank,
                host,
                evidence,
            } => Error::PeerSilent {
                rank: self.rank_of_world(rank),
                host,
                evidence,
            },
            Error::ChannelBroken { peer, reason } => Error::ChannelBroken {
                peer: self.rank_of_world(peer),
                reason,
            },
            Error::Protocol { peer, detail } => Error::Protocol {
                peer: self.rank_of_world(peer),
                detail,
            },
            // The awaited peer in this communicator's numbering; a
            // deadlock's cycle may run through other communicators, so its
            // waits keep the job's numbering.
            Error::Timeout {
                op,
                peer,
                tag,
                waited,
                why,
            } => Error::Timeout {
                op,
                peer: self.rank_of_world(peer),
                tag,
                waited,
                why,
            },
            other => other,
        }
    }

    fn check_recv_tag(tag: Tag) -> Result<()> {
        if tag > TAG_UB && tag != ANY_TAG {
            return Err(Error::InvalidTag { tag });
        }
        Ok(())
    }

    fn post_send(&self, buf: &[u8], dst: usize, tag: Tag, sync: bool, scope: u32) -> Result<OpId> {
        Self::check_send_tag(tag)?;
        if dst >= self.size() {
            return Err(Error::InvalidRank {
                rank: dst,
                size: self.size(),
            });
        }
        self.engine()
            .post_send(buf, self.world(dst), self.ctx, tag, sync, scope)
            .map_err(|e| self.here_err(e))
    }

    fn post_recv(&self, buf: &mut [u8], src: usize, tag: Tag, scope: u32) -> Result<OpId> {
        Self::check_recv_tag(tag)?;
        let src = self.source(src)?;
        self.engine()
            .post_recv(buf, src, self.ctx, tag, scope)
            .map_err(|e| self.here_err(e))
    }

    /// Sends `buf` to rank `dst` with `tag` (at most [`TAG_UB`]); returns
    /// once `buf` may be reused: a message up to the eager limit is copied
    /// into the channel right away (if the receiver has credit for it), a
    /// larger one is handed over once the receiver matched it and copied it
    /// out.
    ///
    /// # Errors
    /// Refused at the call: [`Error::InvalidTag`], [`Error::InvalidRank`],
    /// [`Error::MessageTooLarge`], [`Error::TooManyRequests`]. Then
    /// [`Error::PeerLost`], [`Error::ChannelBroken`] or [`Error::Protocol`] if
    /// the link to `dst` fails (or had failed) before `buf` is handed over, and
    /// [`Error::Timeout`] or [`Error::Deadlock`] after the timeout without
    /// progress. See [`Comm`] for each.
    #[inline]
    pub fn send(&self, buf: &[u8], dst: usize, tag: Tag) -> Result<()> {
        Self::check_send_tag(tag)?;
        self.send_valid_tag(buf, dst, tag)
    }

    /// [`send`](Self::send) with `tag` checked already.
    #[inline(always)]
    fn send_valid_tag(&self, buf: &[u8], dst: usize, tag: Tag) -> Result<()> {
        if self
            .engine()
            .try_send_now(buf, self.world(dst), self.ctx, tag)
        {
            return Ok(());
        }
        self.send_posted(buf, dst, tag)
    }

    /// [`send`](Self::send) when the message cannot go out right away.
    #[cold]
    #[inline(never)]
    fn send_posted(&self, buf: &[u8], dst: usize, tag: Tag) -> Result<()> {
        let id = self.post_send(buf, dst, tag, false, 0)?;
        self.wait_one(id, OpKind::Send).map(|_| ())
    }

    /// Synchronous send: returns only once the receiver has matched the
    /// message with a receive (MPI's `MPI_Ssend`). Two ranks that `ssend`
    /// to each other before receiving deadlock; tandem reports that as
    /// [`Error::Deadlock`] when the timeout expires. Put both in a
    /// [`group`](Self::group) instead.
    ///
    /// # Errors
    /// As [`send`](Self::send), up to the receiver's match.
    pub fn ssend(&self, buf: &[u8], dst: usize, tag: Tag) -> Result<()> {
        let id = self.post_send(buf, dst, tag, true, 0)?;
        self.wait_one(id, OpKind::Ssend).map(|_| ())
    }

    /// Receives the next message from rank `src` (or [`ANY_SOURCE`]) with
    /// `tag` (or [`ANY_TAG`]) into `buf`. Messages from one sender are
    /// received in the order they were sent. A message longer than `buf`
    /// fills it and fails with [`Error::Truncated`]; the next message is
    /// unaffected.
    ///
    /// # Errors
    /// Refused at the call: [`Error::InvalidTag`] (above [`TAG_UB`] and not
    /// [`ANY_TAG`]), [`Error::InvalidRank`] (neither below `size()` nor
    /// [`ANY_SOURCE`]), [`Error::TooManyRequests`]. Then [`Error::Truncated`]
    /// for a message longer than `buf`; [`Error::PeerLost`],
    /// [`Error::ChannelBroken`] or [`Error::Protocol`] if the link to `src`
    /// fails with no message for this receive; [`Error::Timeout`] or
    /// [`Error::Deadlock`] after the timeout without progress. See [`Comm`].
    #[inline]
    pub fn recv(&self, buf: &mut [u8], src: usize, tag: Tag) -> Result<Status> {
        Self::check_recv_tag(tag)?;
        self.recv_valid_tag(buf, src, tag)
    }

    /// [`recv`](Self::recv) with `tag` checked already.
    #[inline(always)]
    fn recv_valid_tag(&self, buf: &mut [u8], src: usize, tag: Tag) -> Result<Status> {
        if src < self.size() {
            // Often the message is there already. The communicator's
            // numbering looked at once, for the rank and for the status.
            let (w, whole) = (self.world(src), self.members.is_none());
            // A one-line message only here: anything else, and the
            // polling, in the cold path below.
            if let Some(Fast::Done(st)) = self.engine().try_recv_line(buf, w, self.ctx, tag) {
                if st.len <= buf.len() && whole {
                    return Ok(st);
                }
                return self.here_slow(delivered(st, buf.len()));
            }
        }
        self.recv_waiting(buf, src, tag)
    }

    /// [`recv_valid_tag`](Self::recv_valid_tag) that also stores in `got`
    /// how many bytes of `buf` the message filled (0 after an error other
    /// than a truncation), for a persistent receive: in the shortcut's
    /// branch where the message fit, a single store, not a look at the
    /// result afterwards. (Apart from `recv_valid_tag`, which a plain
    /// receive keeps as it was: through this one it took 12 instructions
    /// more at 64 B, callgrind.)
    #[inline(always)]
    pub(crate) fn recv_counted(
        &self,
        buf: &mut [u8],
        src: usize,
        tag: Tag,
        got: &mut usize,
    ) -> Result<Status> {
        if src < self.size() {
            // Often the message is there already.
            let w = self.world(src);
            // A one-line message only here: anything else, and the
            // polling, in the cold path below.
            if let Some(Fast::Done(st)) = self.engine().try_recv_line(buf, w, self.ctx, tag) {
                if st.len <= buf.len() && self.members.is_none() {
                    *got = st.len;
                    return Ok(st);
                }
                return filled(self.delivered_here(st, buf.len()), got);
            }
        }
        filled(self.recv_waiting(buf, src, tag), got)
    }

    /// [`recv`](Self::recv) when the message is not there at once: polls
    /// for it, then posts the receive.
    #[cold]
    #[inline(never)]
    fn recv_waiting(&self, buf: &mut [u8], src: usize, tag: Tag) -> Result<Status> {
        if src < self.size() {
            // A message of several lines, or in a cell, that is there
            // already.
            let w = self.world(src);
            let mut e = self.engine();
            match e.try_recv_eager(buf, w, self.ctx, tag) {
                Some(Fast::Done(st)) => {
                    drop(e);
                    return self.delivered_here(st, buf.len());
                }
                Some(Fast::Failed) => {
                    let lost = e.lost(w);
                    drop(e);
                    return self.here(Err(lost));
                }
                _ => drop(e),
            }
            if let Some(r) = self.recv_polled(buf, self.world(src), self.ctx, tag) {
                return self.here(r);
            }
        }
        let id = self.post_recv(buf, src, tag, 0)?;
        self.wait_one(id, OpKind::Recv)
    }

    /// The receive fast path while spinning: polls world rank `src`'s line ring
    /// directly, no operation recorded, for the wait policy's spin but at
    /// most [`FAST_SPIN_MAX`] polls. `None`: post the receive and wait on
    /// the general path, which has the deadlines and diagnostics; that is
    /// also where anything unusual goes (a rendezvous, a posted receive
    /// ahead, a stored message).
    fn recv_polled(
        &self,
        buf: &mut [u8],
        src: usize,
        ctx: u16,
        tag: Tag,
    ) -> Option<Result<Status>> {
        let spins = self.sh.cfg.wait.spin.clamp(FAST_POLLS, FAST_SPIN_MAX);
        let mut polls = 0;
        let mut idle = 0;
        'fast: while polls < spins {
            let mut e = self.engine();
            for _ in 0..FAST_POLLS {
                match e.try_recv_now(buf, src, ctx, tag) {
                    Fast::Done(st) => {
                        e.idle_polls += idle;
                        return Some(delivered(st, buf.len()));
                    }
                    Fast::NotYet => {
                        idle += 1;
                        std::hint::spin_loop()
                    }
                    Fast::Fallback => break 'fast,
                    Fast::Failed => return Some(Err(e.lost(src))),
                }
            }
            if e.in_use() > 0 {
                // Others' operations need progress too.
                e.progress();
            }
            polls += FAST_POLLS;
        }
        self.sh.waits.add_polls(idle);
        None
    }

    /// Sends `sbuf` to `dst` and receives into `rbuf` from `src` at once,
    /// so two ranks exchanging with each other never deadlock, whatever the
    /// sizes (MPI's `MPI_Sendrecv`). Returns the receive's status.
    ///
    /// # Errors
    /// The ranks and tags of both halves are checked before either is posted
    /// ([`Error::InvalidRank`], [`Error::InvalidTag`]); then the errors of
    /// [`send`](Self::send) and [`recv`](Self::recv). The send is posted
    /// first: if posting it fails ([`Error::MessageTooLarge`],
    /// [`Error::TooManyRequests`], a failed link to `dst`), no receive is
    /// posted and no message is consumed. Once both are posted, if one half
    /// fails the call still waits for the other; if both fail, the send's
    /// error is returned.
    pub fn sendrecv(
        &self,
        sbuf: &[u8],
        dst: usize,
        stag: Tag,
        rbuf: &mut [u8],
        src: usize,
        rtag: Tag,
    ) -> Result<Status> {
        // Both halves are checked before either is posted, and the send is
        // posted first: what only posting finds (a message too large, no
        // free request, a failed link to `dst`) then leaves no receive
        // posted, so a call that fails never consumes a message.
        self.check_send(dst, stag)?;
        Self::check_recv_tag(rtag)?;
        self.source(src)?;
        self.scope(|s| {
            let w = s.isend(sbuf, dst, stag)?;
            let r = s.irecv(rbuf, src, rtag)?;
            let st = r.wait();
            w.wait()?;
            st
        })?
    }

    /// Waits until a message from `src` (or [`ANY_SOURCE`]) with `tag` (or
    /// [`ANY_TAG`]) has arrived and returns its source, tag and length
    /// without receiving it (MPI's `MPI_Probe`).
    ///
    /// # Errors
    /// [`Error::InvalidTag`] or [`Error::InvalidRank`] at the call;
    /// once the link to `src` (not [`ANY_SOURCE`]) has failed with no such
    /// message arrived, the link's failure as other operations report it:
    /// [`Error::PeerLost`], [`Error::Protocol`] or [`Error::ChannelBroken`];
    /// [`Error::Revoked`] on a revoked communicator, as a receive, even if
    /// a matching message is there; [`Error::Timeout`] or
    /// [`Error::Deadlock`] after the timeout.
    pub fn probe(&self, src: usize, tag: Tag) -> Result<Status> {
        Self::check_recv_tag(tag)?;
        let s = self.source(src)?;
        // The peer waited for as hang reports and the cycle search read
        // it: a world rank, as every wait publishes it.
        let peer = if src == ANY_SOURCE {
            ANY_SOURCE
        } else {
            s as usize
        };
        let mut w = Waiter::new(&self.sh);
        loop {
            {
                let mut e = self.engine();
                if let Err(err) = e.gate(self.ctx) {
                    e.publish_wait(None);
                    return Err(err);
                }
                if let Some(st) = e.probe(s, self.ctx, tag) {
                    e.publish_wait(None);
                    return self.here(Ok(st));
                }
                self.drive_collectives(&mut e);
                if w.slow_path_due() {
                    e.check_peers();
                    if src != ANY_SOURCE && e.is_dead(s as usize) {
                        e.progress();
                        if let Some(st) = e.probe(s, self.ctx, tag) {
                            return self.here(Ok(st));
                        }
                        // Why the link failed (PeerLost, Protocol,
                        // ChannelBroken), as other operations report it.
                        return Err(self.here_err(e.lost(s as usize)));
                    }
                    if let Some(waited) = w.stalled(0) {
                        e.publish_wait(None);
                        let err = explain(&e, OpKind::Probe, peer, tag, self.ctx, waited);
                        return Err(self.here_err(err));
                    }
                    w.publish(&mut e, OpKind::Probe, self.ctx, peer, tag);
                    let ours = Wait {
                        rank: e.rank(),
                        op: OpKind::Probe,
                        peer,
                        tag,
                    };
                    let activity = e.activity();
                    if let Some(err) = w.early_deadlock(&mut e, ours, activity) {
                        return Err(err);
                    }
                }
            }
            w.pause(1);
        }
    }

    /// The status of a message from `src` with `tag` that has arrived, if
    /// any, without receiving it (MPI's `MPI_Iprobe`).
    ///
    /// # Errors
    /// [`Error::InvalidTag`] or [`Error::InvalidRank`] only; a failed peer is
    /// not reported (nothing more arrives from it).
    pub fn iprobe(&self, src: usize, tag: Tag) -> Result<Option<Status>> {
        Self::check_recv_tag(tag)?;
        let s = self.source(src)?;
        let mut e = self.engine();
        self.drive_collectives(&mut e);
        match e.probe(s, self.ctx, tag) {
            Some(st) => self.here(Ok(st)).map(Some),
            None => Ok(None),
        }
    }

    /// Runs `f` with a [`Scope`] in which non-blocking operations may
    /// borrow buffers that outlive the scope. Before returning, waits for
    /// every operation started in the scope (requests dropped unwaited
    /// included); if that wait fails, the error is returned instead of
    /// `f`'s result. If `f` panics, the scope's operations are withdrawn
    /// before the panic continues, so no buffer is touched afterwards.
    ///
    /// # Errors
    /// The first error of an operation started in the scope that `f` did not
    /// collect (a dropped [`Request`] or [`CollRequest`], a persistent request
    /// dropped while started), failing as the call that started it
    /// describes. `f`'s own result, an error included, comes back inside
    /// `Ok`.
    pub fn scope<'env, R>(
        &'env self,
        f: impl for<'s> FnOnce(&'s Scope<'s, 'env>) -> R,
    ) -> Result<R> {
        let id = loop {
            // 0 is the blocking calls' scope, RAW_SCOPE the raw collectives'.
            let id = self.sh.next_scope.fetch_add(1, Ordering::Relaxed);
            if id != 0 && id != raw::RAW_SCOPE {
                break id;
            }
        };
        let scope = Scope {
            comm: self,
            id,
            _s: PhantomData,
            _e: PhantomData,
        };
        let guard = ScopeGuard { comm: self, id };
        let r = f(&scope);
        std::mem::forget(guard);
        self.finish_scope(id)?;
        Ok(r)
    }

    /// NCCL-style group: every operation `f` adds is posted at once (none
    /// waits for another), then all are waited for together, so a group
    /// where two ranks send to each other and then receive never
    /// deadlocks, whatever the message sizes and even with synchronous
    /// sends. Returns the first error of any operation in the group.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout};
    /// let out = Comm::threads(2, &Layout::default(), Config::default(), |comm| {
    ///     let peer = 1 - comm.rank();
    ///     let mine = vec![comm.rank() as u8; 1 << 20];
    ///     let mut theirs = vec![0u8; 1 << 20];
    ///     comm.group(|g| {
    ///         g.ssend(&mine, peer, 0)?; // both ranks "send first": fine in a group
    ///         g.recv(&mut theirs, peer, 0)
    ///     })?;
    ///     Ok(theirs[0])
    /// });
    /// assert_eq!(*out[0].as_ref().unwrap(), 1);
    /// ```
    ///
    /// # Errors
    /// `f`'s error if a call in it was refused (its receives that have not
    /// matched are then cancelled, and what was started still completes);
    /// otherwise the first error of an operation of the group (see [`Comm`]).
    pub fn group<'env>(
        &'env self,
        f: impl for<'s> FnOnce(&mut Group<'s, 'env>) -> Result<()>,
    ) -> Result<()> {
        let mut first = Ok(());
        let end = self.scope(|s| {
            let mut g = Group { scope: s };
            first = f(&mut g);
            if first.is_err() {
                // The group failed part-way (an invalid rank or tag, say):
                // its receives that have not matched are cancelled, so their
                // messages stay receivable and the end of the group does not
                // wait for messages that may never come. What it did post
                // and start still completes.
                self.cancel_unmatched_receives(s.id);
            }
        });
        first?;
        end
    }

    /// Cancels every receive of scope `id` that has not matched yet.
    fn cancel_unmatched_receives(&self, id: u32) {
        let mut e = self.engine();
        let mut from = 0;
        while let Some((op, resume)) = e.next_scope_op(id, from) {
            from = resume;
            e.cancel_recv(op);
        }
    }

    fn finish_scope(&self, id: u32) -> Result<()> {
        // One pass over the request table (no new operations of this scope
        // can appear: its closure has returned), allocation-free.
        let mut first = Ok(());
        // Collectives first: they may still post transfers of the scope.
        loop {
            let next = self.coll.borrow().table.of_scope(id);
            let Some(t) = next else { break };
            if let Err(e) = self.coll_wait(t) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        let mut from = 0;
        loop {
            let next = self.engine().next_scope_op(id, from);
            let Some((op, resume)) = next else { break };
            from = resume;
            if let Err(e) = self.wait_one(op, OpKind::Recv) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Drives progress once; `id`'s result if it has finished (it is then
    /// taken).
    fn test_op(&self, id: OpId) -> Option<Result<Status>> {
        let mut e = self.engine();
        e.progress();
        self.drive_collectives(&mut e);
        e.take(id).map(|r| self.here(r))
    }

    /// Drives progress until `id` finishes, under the wait policy, the
    /// no-progress timeout and peer-death checks.
    fn wait_one(&self, id: OpId, kind: OpKind) -> Result<Status> {
        {
            // Often done already (an eager send) or after one pass.
            let mut e = self.engine();
            if let Some(r) = e.take(id) {
                return self.here(r);
            }
            e.progress();
            if let Some(r) = e.take(id) {
                return self.here(r);
            }
            trace::wait_begins(&mut e, id);
        }
        let mut w = Waiter::new(&self.sh);
        let r = loop {
            {
                let mut e = self.engine();
                e.progress();
                if let Some(r) = e.take(id) {
                    break r;
                }
                self.drive_collectives(&mut e);
                if w.slow_path_due() {
                    w.answer_signal(&mut e);
                    if let Err(err) = w.check(&mut e, id, kind, self.ctx) {
                        e.withdraw(id, &err);
                        break Err(err);
                    }
                }
            }
            w.pause(1);
        };
        // A wait that failed stays published: the peer it deadlocked with
        // may not have reached its own deadline yet and names it then.
        {
            let mut e = self.engine();
            trace::wait_ends(&mut e);
            if w.published.is_some() && r.is_ok() {
                e.publish_wait(None);
            }
        }
        if let Err(e) = &r {
            self.failed(e);
        }
        self.here(r)
    }

    /// Waits for rank 0's copies started by [`Comm::local`] and reports the
    /// first that failed. A no-op on other ranks.
    ///
    /// # Errors
    /// [`Error::RankFailed`] with the first copy seen exiting with a non-zero
    /// code (128 + the signal number if it was killed); the others get
    /// `TANDEM_KILL_GRACE` to exit, then are killed.
    pub fn finish(self) -> Result<()> {
        let children = self
            .sh
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(self);
        match children {
            Some(c) => c.wait(),
            None => Ok(()),
        }
    }
}

/// A buffer registered with a communicator's RDMA connections
/// ([`Comm::register`]); derefs to the buffer. Dropping it deregisters.
#[must_use = "dropping the handle deregisters the buffer at once"]
pub struct Registered<'a> {
    comm: &'a Comm,
    buf: &'a mut [u8],
}

impl std::ops::Deref for Registered<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf
    }
}

impl std::ops::DerefMut for Registered<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf
    }
}

impl std::fmt::Debug for Registered<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("addr", &self.buf.as_ptr())
            .field("len", &self.buf.len())
            .finish()
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        // `register` pinned the buffer with every peer of the job, not
        // only with this communicator's.
        self.comm
            .engine()
            .unpin(self.buf.as_ptr() as u64, usize::MAX);
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if !self.primary {
            return;
        }
        // Stop the proxy and heartbeat threads first, so the last
        // reference to the shared state is always dropped here and never on
        // one of them.
        self.sh.proxy.stop();
        self.sh.heart.stop();
    }
}

impl Shared {
    /// The engine, locked (spinning, then yielding).
    #[inline(always)]
    fn engine(&self) -> SpinGuard<'_, Engine> {
        self.engine.lock_with(|attempt| {
            if attempt < 1000 {
                std::hint::spin_loop()
            } else {
                std::thread::yield_now()
            }
        })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.trace_at_end("at the end");
        if let Some(c) = self
            .children
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            if let Err(e) = c.wait() {
                eprintln!("tandem: {e}");
            }
        }
    }
}

/// Runs `f` on `n` threads, rank `r` with the communicator `join(r)`
/// builds; results in rank order.
fn on_threads<R: Send>(
    n: usize,
    cfg: Config,
    join: impl Fn(usize, &Config) -> Result<crate::world::bootstrap::Joined> + Sync,
    f: impl Fn(Comm) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (cfg, f, join) = (cfg.clone(), &f, &join);
                s.spawn(move || f(Comm::start(join(r, &cfg)?, cfg)?))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Panicked("rank thread panicked".into())))
            })
            .collect()
    })
}

/// Tracks one wait: spin, then yield, then park; stall timeout; peer checks.
struct Waiter<'a> {
    /// The rank's shared state (a trace asked for by signal is answered
    /// from a wait).
    sh: &'a Shared,
    /// Where the wait's polls, yields and sleeps are counted.
    counts: &'a WaitCounts,
    policy: crate::config::WaitPolicy,
    timeout: Duration,
    iter: u64,
    last_moved: usize,
    since: Option<Instant>,
    last_peer_check: Option<Instant>,
    next_check: u64,
    /// Whether this wait published itself for peers' hang reports.
    published: Option<()>,
    /// When this wait was published (it began earlier, by the spin).
    started: Option<Instant>,
    /// When the chain of waits was last followed for a cycle.
    cycle_checked: Option<Instant>,
    /// The cycle last found: its fingerprint ([`cycle_key`]), this
    /// wait's progress count then, and since when it has been the same.
    cycle: Option<(u64, usize, Instant)>,
}

/// Where a chain of waits ends, as [`follow`] found it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ChainEnd {
    /// Back at this rank: a cycle.
    Cycle,
    /// At a rank that waits for any rank (this one included).
    AnyRank,
    /// At a rank that does not wait, or whose wait this rank cannot see.
    Open,
}

/// The chain of waits from `peer` on, as far as this rank can see them
/// (the host's wait board, the records of peers on other hosts),
/// and where it ends.
pub(super) fn follow(e: &Engine, peer: usize) -> (Vec<Wait>, ChainEnd) {
    let rank = e.rank();
    let mut chain: Vec<Wait> = Vec::new();
    for (here, _) in hops(e, peer, e.nranks()) {
        if here.rank == rank || chain.iter().any(|c| c.rank == here.rank) {
            break;
        }
        chain.push(here);
        if here.peer == rank {
            return (chain, ChainEnd::Cycle);
        }
        if here.peer == ANY_SOURCE {
            return (chain, ChainEnd::AnyRank);
        }
    }
    (chain, ChainEnd::Open)
}

/// The waits met following who waits on whom from `peer`, at most `most`
/// of them: each rank's wait with its record. Ends at a rank whose wait
/// is not known here, or after a wait on any rank.
fn hops(e: &Engine, peer: usize, most: usize) -> impl Iterator<Item = (Wait, WaitRec)> + '_ {
    let mut next = peer;
    std::iter::from_fn(move || {
        if next == ANY_SOURCE {
            return None;
        }
        let cur = next;
        let w = e.peer_wait(cur)?;
        next = w.peer;
        let here = Wait {
            rank: cur,
            op: w.op,
            peer: w.peer,
            tag: w.tag,
        };
        Some((here, w))
    })
    .take(most)
}

/// Whether `a`, waiting on `b`'s rank, and `b`, waiting on `a`'s, may be
/// the two ends of one message under way (a send and the receive that
/// matches it: a long transfer, not a deadlock). Contexts are not in the
/// records: same-tag pairs count as matching, so such a cycle is never
/// reported (conservative).
fn may_match(a: &Wait, b: &Wait) -> bool {
    let sends = |w: &Wait| matches!(w.op, OpKind::Send | OpKind::Ssend);
    let pair = |s: &Wait, r: &Wait| {
        sends(s)
            && !sends(r)
            && s.peer == r.rank
            && (r.peer == s.rank || r.peer == ANY_SOURCE)
            && (r.tag == s.tag || r.tag == ANY_TAG)
    };
    pair(a, b) || pair(b, a)
}

/// Whether the cycle `ours`, `theirs[0]`, ..., back to `ours` is a
/// deadlock: no two neighbours in it may be the two ends of one message.
fn closed(ours: &Wait, theirs: &[Wait]) -> bool {
    let mut prev = ours;
    for w in theirs.iter().chain(std::iter::once(ours)) {
        if may_match(prev, w) {
            return false;
        }
        prev = w;
    }
    true
}

/// Without allocating (it runs every 100 ms of every long wait): if the
/// waits from `ours` on come back to this rank within 16 ranks, through
/// no rank that knew of a failure or had other operations pending, and
/// with no two neighbours the two ends
/// of one message ([`may_match`]), a fingerprint of that cycle (its ranks
/// and their waits' sequence numbers); else `None`.
fn cycle_key(e: &Engine, ours: &Wait) -> Option<u64> {
    let rank = e.rank();
    let mut key: u64 = 0xcbf2_9ce4_8422_2325;
    let mut prev = *ours;
    for (here, w) in hops(e, ours.peer, 16) {
        if w.failures || w.several || may_match(&prev, &here) {
            return None;
        }
        for v in [here.rank as u64, w.seq as u64] {
            key = (key ^ v).wrapping_mul(0x0100_0000_01b3);
        }
        if here.peer == rank {
            return (!may_match(&here, ours)).then_some(key);
        }
        prev = here;
    }
    None
}

/// Why an operation of this rank (`op` with `peer` and `tag` in context
/// `ctx`) has made no progress for `waited`, from what this rank can see:
///
/// * the wait records that ranks on this host publish: following who waits
///   on whom from `peer`, a cycle back to this rank is a
///   [`Error::Deadlock`] naming every operation in it; a chain that ends
///   elsewhere is named in the timeout;
/// * for a receive or probe, messages from the awaited source that arrived
///   and match no receive ("rank 1 sent tag 7 (12 bytes), which no receive
///   matches").
fn explain(e: &Engine, op: OpKind, peer: usize, tag: Tag, ctx: u16, waited: Duration) -> Error {
    let rank = e.rank();
    let ours = Wait {
        rank,
        op,
        peer,
        tag,
    };
    let (chain, end) = follow(e, peer);
    if end == ChainEnd::AnyRank || (end == ChainEnd::Cycle && closed(&ours, &chain)) {
        return Error::Deadlock {
            ours,
            theirs: chain,
            waited,
        };
    }
    let mut why = Vec::new();
    if !chain.is_empty() {
        why.push(format!("it waits for {}", crate::error::Chain(&chain)));
    }
    if matches!(op, OpKind::Recv | OpKind::Probe) {
        let src = if peer == ANY_SOURCE {
            crate::progress::ANY_SOURCE
        } else {
            peer as u32
        };
        let (msgs, n) = e.unmatched(src, ctx, 4);
        let mut told: Vec<String> = msgs
            .iter()
            .map(|m| format!("rank {} sent tag {} ({} bytes)", m.source, m.tag, m.len))
            .collect();
        if n > msgs.len() {
            told.push(format!("{} more", n - msgs.len()));
        }
        if !told.is_empty() {
            why.push(format!("{}, which no receive matches", told.join(", ")));
        }
    }
    Error::Timeout {
        op,
        peer,
        tag,
        waited,
        why: why.join("; "),
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.counts.add_polls(self.iter);
    }
}

impl<'a> Waiter<'a> {
    fn new(sh: &'a Shared) -> Self {
        let cfg = &sh.cfg;
        Self {
            sh,
            counts: &sh.waits,
            policy: cfg.wait,
            timeout: cfg.timeout,
            iter: 0,
            last_moved: 0,
            since: None,
            last_peer_check: None,
            next_check: 4096,
            published: None,
            started: None,
            cycle_checked: None,
            cycle: None,
        }
    }

    /// Publishes this wait (`op` on `peer` with `tag` in `ctx`) for the
    /// hang reports of peers, once.
    fn publish(&mut self, e: &mut Engine, op: OpKind, ctx: u16, peer: usize, tag: Tag) {
        if self.published.is_none() {
            e.publish_wait(Some((op, ctx, peer, tag)));
            self.published = Some(());
            self.started = Some(Instant::now());
        }
    }

    /// [`Error::Deadlock`] once the waits this one leads to have closed a
    /// cycle back to it and stayed the same (the same waits, and nothing
    /// moved on this rank: `moved` is its [`Engine::activity`]) for
    /// [`Config::deadlock_after`](crate::Config::deadlock_after). Followed
    /// every 100 ms; also tells peers on other hosts of this wait.
    fn early_deadlock(&mut self, e: &mut Engine, ours: Wait, moved: usize) -> Option<Error> {
        let after = self.sh.cfg.deadlock_after;
        let now = Instant::now();
        if self.published.is_none()
            || self
                .cycle_checked
                .is_some_and(|t| now.duration_since(t) < Duration::from_millis(100))
        {
            return None;
        }
        self.cycle_checked = Some(now);
        e.announce_wait();
        if after.is_zero() {
            return None;
        }
        // A cycle through a rank that knows of a failure (this one too)
        // may be one whose waits end in errors (a link broken on one side
        // only): left to the timeout, which names it too.
        let key = if e.knows_failure() || e.my_wait().is_none_or(|(w, _)| w.several) {
            None
        } else {
            cycle_key(e, &ours)
        };
        let Some(key) = key else {
            self.cycle = None;
            return None;
        };
        match self.cycle {
            Some((k, m, since)) if k == key && m == moved => {
                if now.duration_since(since) >= after {
                    let waited = self
                        .started
                        .map_or(Duration::ZERO, |t| now.duration_since(t));
                    // Named now (this allocates, once).
                    let (theirs, _) = follow(e, ours.peer);
                    return Some(Error::Deadlock {
                        ours,
                        theirs,
                        waited,
                    });
                }
            }
            _ => self.cycle = Some((key, moved, now)),
        }
        None
    }

    fn spin_phase(&self) -> bool {
        self.iter < self.policy.spin as u64
    }

    /// Writes the trace if a signal asked for one since this rank last
    /// looked ([`Comm::trace_on_signal`]).
    fn answer_signal(&self, e: &mut Engine) {
        self.sh.answer_signal(e);
    }

    /// While spinning, look at the clock only every 4096 polls.
    fn slow_path_due(&mut self) -> bool {
        if !self.spin_phase() || self.iter >= self.next_check {
            self.next_check = self.iter + 4096;
            return true;
        }
        false
    }

    /// `Some(waited)` once `moved` has not changed for the timeout.
    fn stalled(&mut self, moved: usize) -> Option<Duration> {
        let now = Instant::now();
        match self.since {
            Some(t) if moved == self.last_moved => {
                let waited = now.duration_since(t);
                (waited >= self.timeout).then_some(waited)
            }
            _ => {
                self.since = Some(now);
                self.last_moved = moved;
                None
            }
        }
    }

    fn check(&mut self, e: &mut Engine, id: OpId, kind: OpKind, ctx: u16) -> Result<()> {
        let now = Instant::now();
        // What this wait is, as reports name it.
        let what = e.info(id).map(|i| {
            let op = match (i.send, i.sync) {
                (true, true) => OpKind::Ssend,
                (true, false) => OpKind::Send,
                _ => kind,
            };
            let peer = if i.peer == crate::progress::ANY_SOURCE {
                ANY_SOURCE
            } else {
                i.peer as usize
            };
            Wait {
                rank: e.rank(),
                op,
                peer,
                tag: i.tag,
            }
        });
        if let Some(w) = what {
            // Blocked for a while: say so, for the peers' hang reports.
            self.publish(e, w.op, ctx, w.peer, w.tag);
        }
        if self
            .last_peer_check
            .is_none_or(|t| now.duration_since(t) >= Duration::from_millis(5))
        {
            self.last_peer_check = Some(now);
            e.check_peers();
            if e.in_use() > 0 {
                e.progress();
            }
        }
        let moved = e.moved(id);
        if let Some(w) = what {
            if let Some(err) = self.early_deadlock(e, w, e.activity()) {
                return Err(err);
            }
        }
        if let Some(waited) = self.stalled(moved) {
            let Some(w) = what else {
                return Ok(());
            };
            // A receive is named as one (a probe's kind is its own).
            let op = if matches!(w.op, OpKind::Send | OpKind::Ssend) {
                w.op
            } else {
                OpKind::Recv
            };
            return Err(explain(e, op, w.peer, w.tag, ctx, waited));
        }
        Ok(())
    }

    /// Called after `polls` fruitless polls.
    fn pause(&mut self, polls: u32) {
        self.iter += polls as u64;
        let p = &self.policy;
        if self.spin_phase() {
            std::hint::spin_loop();
        } else if self.iter < p.spin as u64 + p.yields as u64 || p.park.is_zero() {
            self.counts.yields.fetch_add(1, Ordering::Relaxed);
            std::thread::yield_now();
        } else {
            self.counts.sleeps.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(p.park);
        }
    }
}

/// Withdraws a scope's operations if its closure panics.
struct ScopeGuard<'c> {
    comm: &'c Comm,
    id: u32,
}

impl Drop for ScopeGuard<'_> {
    fn drop(&mut self) {
        let mut e = self.comm.engine();
        if let Ok(mut st) = self.comm.coll.try_borrow_mut() {
            st.table.abandon_scope(&mut e, self.id);
        }
        let why = Error::Panicked("request scope panicked".into());
        let mut from = 0;
        while let Some((op, resume)) = e.next_scope_op(self.id, from) {
            e.withdraw(op, &why);
            from = resume;
        }
    }
}

/// Where non-blocking operations are started; see [`Comm::scope`].
///
/// `'env` is the lifetime of the buffers (they outlive the scope), `'s`
/// that of the scope itself (requests cannot escape it).
pub struct Scope<'s, 'env: 's> {
    comm: &'env Comm,
    id: u32,
    _s: PhantomData<&'s mut &'s ()>,
    _e: PhantomData<&'env mut &'env ()>,
}

impl<'s, 'env> Scope<'s, 'env> {
    /// Starts sending `buf` to `dst`; `buf` stays borrowed until the scope
    /// ends.
    ///
    /// # Errors
    /// Refused at once, nothing posted: [`Error::InvalidTag`],
    /// [`Error::InvalidRank`], [`Error::MessageTooLarge`],
    /// [`Error::TooManyRequests`], or the error of the link to `dst` if it has
    /// failed already. Later failures come from [`Request::wait`] (see
    /// [`Comm`]).
    pub fn isend(&'s self, buf: &'env [u8], dst: usize, tag: Tag) -> Result<Request<'s>> {
        let id = self.comm.post_send(buf, dst, tag, false, self.id)?;
        Ok(Request::new(self.comm, id, OpKind::Send))
    }

    /// Starts a synchronous send (completes once the receiver matched).
    ///
    /// # Errors
    /// As [`isend`](Self::isend).
    pub fn issend(&'s self, buf: &'env [u8], dst: usize, tag: Tag) -> Result<Request<'s>> {
        let id = self.comm.post_send(buf, dst, tag, true, self.id)?;
        Ok(Request::new(self.comm, id, OpKind::Ssend))
    }

    /// Starts receiving from `src` (or [`ANY_SOURCE`]) with `tag` (or
    /// [`ANY_TAG`]) into `buf`; `buf` stays borrowed until the scope ends.
    ///
    /// # Errors
    /// Refused at once, nothing posted: [`Error::InvalidTag`],
    /// [`Error::InvalidRank`] (neither below `size()` nor [`ANY_SOURCE`]),
    /// [`Error::TooManyRequests`]. Everything else, a truncated message
    /// included, comes from [`Request::wait`].
    pub fn irecv(&'s self, buf: &'env mut [u8], src: usize, tag: Tag) -> Result<Request<'s>> {
        let id = self.comm.post_recv(buf, src, tag, self.id)?;
        Ok(Request::new(self.comm, id, OpKind::Recv))
    }

    /// The communicator.
    pub fn comm(&self) -> &'env Comm {
        self.comm
    }
}

/// The operations of a [`Comm::group`]: each call posts at once and never
/// waits; the group waits for all of them when its closure returns.
pub struct Group<'s, 'env: 's> {
    scope: &'s Scope<'s, 'env>,
}

impl<'s, 'env> Group<'s, 'env> {
    /// Adds a send of `buf` to `dst`.
    ///
    /// # Errors
    /// The refusals of [`Scope::isend`]; the send's own errors come at the end
    /// of the group.
    pub fn send(&mut self, buf: &'env [u8], dst: usize, tag: Tag) -> Result<()> {
        drop(self.scope.isend(buf, dst, tag)?);
        Ok(())
    }

    /// Adds a synchronous send of `buf` to `dst`.
    ///
    /// # Errors
    /// The refusals of [`Scope::issend`]; the send's own errors come at the end
    /// of the group.
    pub fn ssend(&mut self, buf: &'env [u8], dst: usize, tag: Tag) -> Result<()> {
        drop(self.scope.issend(buf, dst, tag)?);
        Ok(())
    }

    /// Adds a receive into `buf` from `src` with `tag` (wildcards allowed).
    ///
    /// # Errors
    /// The refusals of [`Scope::irecv`]; the receive's own errors come at the
    /// end of the group.
    pub fn recv(&mut self, buf: &'env mut [u8], src: usize, tag: Tag) -> Result<()> {
        drop(self.scope.irecv(buf, src, tag)?);
        Ok(())
    }
}

/// A pending non-blocking operation.
///
/// Dropping (or leaking) it without waiting is allowed: the operation still
/// completes, and the end of its scope waits for it and reports its error.
#[must_use = "dropping a request does not cancel it: the end of its scope waits for it"]
pub struct Request<'s> {
    comm: &'s Comm,
    id: Option<OpId>,
    kind: OpKind,
}

impl<'s> Request<'s> {
    fn new(comm: &'s Comm, id: OpId, kind: OpKind) -> Self {
        Self {
            comm,
            id: Some(id),
            kind,
        }
    }

    fn id(&self) -> Result<OpId> {
        self.id
            .ok_or_else(|| Error::InvalidArgument("request already completed".into()))
    }

    /// Waits for the operation to finish.
    ///
    /// # Errors
    /// What the operation ended with (see [`Comm`]): [`Error::PeerLost`],
    /// [`Error::ChannelBroken`] or [`Error::Protocol`] if its link failed,
    /// [`Error::Timeout`] or [`Error::Deadlock`] after the timeout without
    /// progress (the operation is then withdrawn), and for a receive
    /// [`Error::Truncated`] or [`Error::Cancelled`]. [`Error::InvalidArgument`]
    /// if [`test`](Self::test) already returned the result.
    pub fn wait(mut self) -> Result<Status> {
        let id = self.id()?;
        self.id = None;
        self.comm.wait_one(id, self.kind)
    }

    /// `Some(status)` if the operation finished (the request is then
    /// spent: further calls return an error), `None` if still pending.
    /// Drives progress once.
    ///
    /// # Errors
    /// The operation's error, as [`wait`](Self::wait) would return it, once it
    /// finished with one (the request is then spent); no timeout applies here.
    /// [`Error::InvalidArgument`] on a spent request.
    pub fn test(&mut self) -> Result<Option<Status>> {
        let id = self.id()?;
        match self.comm.test_op(id) {
            None => Ok(None),
            Some(r) => {
                self.id = None;
                r.map(Some)
            }
        }
    }

    /// Cancels a receive that has not matched a message yet (MPI's
    /// `MPI_Cancel`): returns `true` and the request is spent (waiting on
    /// it reports [`Error::Cancelled`]); `false` if a message already
    /// matched it (or it is a send) and it completes normally.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a spent request, only.
    pub fn cancel(&mut self) -> Result<bool> {
        let id = self.id()?;
        Ok(self.comm.engine().cancel_recv(id))
    }

    /// Waits until one of the pending requests in `reqs` finishes; returns
    /// its index and result, and leaves `None` in its place (MPI's
    /// `MPI_Waitany`). `None` if every entry is already spent. The result
    /// is what [`wait`](Self::wait) on that request returns; the timeout
    /// applies to the first request still pending.
    ///
    /// # Errors
    /// In the returned result: what [`wait`](Self::wait) reports for the
    /// request that finished.
    pub fn wait_any(reqs: &mut [Option<Request<'_>>]) -> Option<(usize, Result<Status>)> {
        let comm = reqs.iter().flatten().next()?.comm;
        let mut w = Waiter::new(&comm.sh);
        loop {
            {
                let mut e = comm.engine();
                e.progress();
                comm.drive_collectives(&mut e);
                for (i, slot) in reqs.iter_mut().enumerate() {
                    let Some(r) = slot else { continue };
                    let Some(id) = r.id else { continue };
                    if let Some(res) = e.take(id) {
                        // In the numbering of the request's own
                        // communicator.
                        let c = r.comm;
                        r.id = None;
                        *slot = None;
                        return Some((i, c.here(res)));
                    }
                }
                if w.slow_path_due() {
                    // The timeout applies to the first still pending.
                    let first = reqs
                        .iter()
                        .flatten()
                        .find_map(|r| r.id.map(|id| (id, r.kind)));
                    let (id, kind) = first?;
                    if let Err(err) = w.check(&mut e, id, kind, comm.ctx) {
                        let i = reqs
                            .iter()
                            .position(|r| r.as_ref().is_some_and(|r| r.id == Some(id)))
                            .expect("found above");
                        e.withdraw(id, &err);
                        reqs[i] = None;
                        return Some((i, Err(err)));
                    }
                }
            }
            w.pause(1);
        }
    }

    /// If every request in `reqs` has finished, collects them all and
    /// returns their statuses in order (or the first error); otherwise
    /// `None` and nothing is collected (MPI's `MPI_Testall`). Drives
    /// progress once.
    ///
    /// # Errors
    /// The first error among the requests, once all have finished (all are
    /// then collected); [`Error::InvalidArgument`] if one of them is spent
    /// (then nothing is collected).
    pub fn test_all(reqs: &mut [Request<'_>]) -> Result<Option<Vec<Status>>> {
        let Some(first) = reqs.first() else {
            return Ok(Some(Vec::new()));
        };
        let mut e = first.comm.engine();
        e.progress();
        first.comm.drive_collectives(&mut e);
        for r in reqs.iter() {
            if !e.takeable(r.id()?) {
                return Ok(None);
            }
        }
        let mut out = Vec::with_capacity(reqs.len());
        let mut err = None;
        for r in reqs.iter_mut() {
            let id = r.id.take().expect("checked above");
            // In the numbering of the request's own communicator.
            match r.comm.here(e.take(id).expect("takeable")) {
                Ok(s) => out.push(s),
                Err(x) => {
                    err.get_or_insert(x);
                }
            }
        }
        match err {
            Some(x) => Err(x),
            None => Ok(Some(out)),
        }
    }

    /// Waits for every request; returns their statuses in order, or the
    /// first error (after all of them finished).
    ///
    /// # Errors
    /// The first error, in order, of [`wait`](Self::wait) on each request,
    /// returned once all of them finished.
    pub fn wait_all<const N: usize>(reqs: [Request<'_>; N]) -> Result<[Status; N]> {
        let mut out = [Status {
            source: 0,
            tag: 0,
            len: 0,
        }; N];
        wait_each(reqs, |i, s| out[i] = s).map(|_| out)
    }

    /// [`wait_all`](Self::wait_all) for a dynamic number of requests.
    ///
    /// # Errors
    /// As [`wait_all`](Self::wait_all).
    pub fn wait_all_vec(reqs: Vec<Request<'_>>) -> Result<Vec<Status>> {
        let mut out = Vec::with_capacity(reqs.len());
        wait_each(reqs, |_, s| out.push(s)).map(|_| out)
    }
}

/// Waits for every request in order, handing each status to `put`; the
/// first error is returned after all of them finished.
fn wait_each<'a>(
    reqs: impl IntoIterator<Item = Request<'a>>,
    mut put: impl FnMut(usize, Status),
) -> Result<()> {
    let mut first = Ok(());
    for (i, r) in reqs.into_iter().enumerate() {
        match r.wait() {
            Ok(s) => put(i, s),
            Err(e) if first.is_ok() => first = Err(e),
            Err(_) => {}
        }
    }
    first
}

/// `r`, after storing in `got` the bytes of the receive buffer it filled:
/// the message's length, the buffer's on a truncation, 0 otherwise.
#[inline(always)]
fn filled(r: Result<Status>, got: &mut usize) -> Result<Status> {
    *got = match &r {
        Ok(st) => st.len,
        Err(Error::Truncated { got, .. }) => *got,
        Err(_) => 0,
    };
    r
}
