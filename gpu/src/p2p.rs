//! Device buffers sent and received: through pinned staging, pipelined by
//! chunks ([`crate::pipeline`]), the plans executed step by step. The
//! execution is written over [`Copies`], what moves a chunk between the
//! buffer and staging: the device's copies here, plain memory in the
//! tests, so the message protocol (chunks, the short last one, wildcards,
//! truncation) is tested between real ranks on the CPU.

use crate::device::{DeviceBuf, Gpu, Staging};
use crate::path::{choose, Limits, Peer};
use crate::pipeline::{self, buffer, range};
use crate::{GpuError, Result};
use std::cell::RefCell;
use tandem_driver::{Comm, Error, RawRequest, Status, Tag, ANY_SOURCE, ANY_TAG};

/// Whether `TANDEM_DEBUG` asks for the paths to be printed (read once:
/// no allocation per message).
fn say_paths() -> bool {
    static SAY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SAY.get_or_init(|| {
        matches!(
            std::env::var("TANDEM_DEBUG").as_deref(),
            Ok("INFO" | "info" | "DEBUG" | "debug" | "TRACE" | "trace")
        )
    })
}

/// Where rank `r` is from this rank's side, for the path's choice.
fn peer_of(comm: &Comm, r: usize) -> Peer {
    match comm.route(r) {
        Ok(tandem_driver::transport::Route::Shm) => Peer::SameHost,
        _ => Peer::OtherHost,
    }
}

/// What moves chunks between a transfer's buffer and its two staging
/// buffers.
pub(crate) trait Copies {
    /// A staging buffer.
    type Buf;
    /// Two staging buffers of at least `chunk` bytes.
    fn pair(&self, chunk: usize) -> Result<[Self::Buf; 2]>;
    /// Returns them.
    fn put_back(&self, b: [Self::Buf; 2]);
    /// Starts copying `n` bytes at `at` of the buffer sent into `b`.
    fn down(&self, b: &mut Self::Buf, at: usize, n: usize) -> Result<()>;
    /// Starts copying the first `n` bytes of `b` to `at` of the buffer
    /// received into.
    fn up(&mut self, b: &mut Self::Buf, at: usize, n: usize) -> Result<()>;
    /// Waits for the copies into or out of `b`.
    fn wait(&self, b: &Self::Buf) -> Result<()>;
    /// Whether the copies into or out of `b` are done (without waiting).
    fn ready(&self, b: &Self::Buf) -> Result<bool>;
    /// The first `n` bytes of `b`, for the CPU (after its copies).
    fn bytes<'b>(&self, b: &'b mut Self::Buf, n: usize) -> Result<&'b mut [u8]>;
}

impl<T: Copies + ?Sized> Copies for &mut T {
    type Buf = T::Buf;
    fn pair(&self, chunk: usize) -> Result<[Self::Buf; 2]> {
        (**self).pair(chunk)
    }
    fn put_back(&self, b: [Self::Buf; 2]) {
        (**self).put_back(b)
    }
    fn down(&self, b: &mut Self::Buf, at: usize, n: usize) -> Result<()> {
        (**self).down(b, at, n)
    }
    fn up(&mut self, b: &mut Self::Buf, at: usize, n: usize) -> Result<()> {
        (**self).up(b, at, n)
    }
    fn wait(&self, b: &Self::Buf) -> Result<()> {
        (**self).wait(b)
    }
    fn ready(&self, b: &Self::Buf) -> Result<bool> {
        (**self).ready(b)
    }
    fn bytes<'b>(&self, b: &'b mut Self::Buf, n: usize) -> Result<&'b mut [u8]> {
        (**self).bytes(b, n)
    }
}

/// A transfer in flight, as [`InFlight`] knows it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: u64,
    send: bool,
    ctx: u16,
    /// The peer and tag: a send's destination, a receive's pattern (its
    /// source and tag once its first chunk named them).
    peer: usize,
    tag: Tag,
}

/// Whether a receive pattern and a peer and tag (a pattern, or what a
/// first chunk named) can meet.
fn overlap(a: (usize, Tag), b: (usize, Tag)) -> bool {
    let any = |x: usize, y: usize, w: usize| x == w || y == w || x == y;
    any(a.0, b.0, ANY_SOURCE) && (a.1 == b.1 || a.1 == ANY_TAG || b.1 == ANY_TAG)
}

/// The device transfers of a rank in flight at once, which must not be
/// confused: their chunks are plain messages, so two sends to one
/// destination with one tag would interleave theirs, and two receives
/// that can match the same messages would take each other's. Such a
/// second transfer is refused while the first is in flight, with an
/// error that names both (start it after the first completed, or give it
/// another tag).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    /// The next transfer's number, and the transfers in flight.
    active: std::sync::Mutex<(u64, Vec<Entry>)>,
}

impl InFlight {
    /// Admits a transfer, or says which one in flight it would be confused
    /// with.
    fn admit(&self, send: bool, ctx: u16, peer: usize, tag: Tag) -> Result<u64> {
        let mut guard = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let (next, a) = &mut *guard;
        let clash = a.iter().find(|e| {
            e.send == send
                && e.ctx == ctx
                && if send {
                    (e.peer, e.tag) == (peer, tag)
                } else {
                    overlap((e.peer, e.tag), (peer, tag))
                }
        });
        if let Some(e) = clash {
            let (what, dir) = if send {
                ("send", "to")
            } else {
                ("receive", "from")
            };
            let name = |p: usize, t: Tag| {
                let p = if p == ANY_SOURCE {
                    "any rank".to_string()
                } else {
                    format!("rank {p}")
                };
                let t = if t == ANY_TAG {
                    "any tag".to_string()
                } else {
                    format!("tag {t}")
                };
                format!("{p}, {t}")
            };
            return Err(GpuError::InvalidArgument(format!(
                "a device {what} {dir} {} while one {dir} {} is in flight: their chunks would be \
                 confused (start it once that one completed, or use another tag)",
                name(peer, tag),
                name(e.peer, e.tag)
            )));
        }
        let id = *next;
        *next += 1;
        a.push(Entry {
            id,
            send,
            ctx,
            peer,
            tag,
        });
        Ok(id)
    }

    /// A receive's first chunk came from `peer` with `tag`: it can only be
    /// confused with transfers of those now.
    fn pin(&self, id: u64, peer: usize, tag: Tag) {
        let mut a = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = a.1.iter_mut().find(|e| e.id == id) {
            (e.peer, e.tag) = (peer, tag);
        }
    }

    /// The transfer is over.
    fn end(&self, id: u64) {
        let mut a = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = a.1.iter().position(|e| e.id == id) {
            a.1.swap_remove(k);
        }
    }
}

/// What a transfer is doing.
#[derive(Debug)]
enum Side {
    /// Sending `len` bytes to `dst` in `m` messages: `copied` of them
    /// staged (their copies started), `sent` posted.
    Send {
        len: usize,
        dst: usize,
        m: usize,
        copied: usize,
        sent: usize,
    },
    /// Receiving into `cap` bytes from `from` with `with` (wildcards until
    /// the first chunk names them): message `k` is the next, `total`
    /// bytes arrived so far, `last` once a short message ended it.
    Recv {
        cap: usize,
        from: usize,
        with: Tag,
        k: usize,
        total: usize,
        last: bool,
    },
}

/// A pipelined transfer in flight, stepped by [`Flight::poll`]: the
/// non-blocking form of the plans of [`crate::pipeline`]. A sender
/// stages chunk `k + 1` while chunk `k` is on its way (each staging buffer
/// is refilled once the send from it completed); a receiver posts message
/// `k + 1` only after message `k` arrived whole (a short one is the last,
/// and a receive posted past it would take the next transfer's first
/// chunk), its upload running while the next arrives.
pub(crate) struct Flight<'a, C: Copies> {
    comm: &'a Comm,
    /// Where it is registered, and as what.
    flying: &'a InFlight,
    id: u64,
    c: C,
    st: Option<[C::Buf; 2]>,
    chunk: usize,
    tag: Tag,
    side: Side,
    /// The message in flight through each staging buffer.
    req: [Option<RawRequest>; 2],
    /// The outcome, once there is one.
    out: Option<Result<Status>>,
    /// Steps taken so far (a waiter's evidence of progress).
    steps: u64,
}

/// A started flight, or why it could not start with what it was given
/// back.
type Started<'a, C> = std::result::Result<Flight<'a, C>, (GpuError, C)>;

impl<'a, C: Copies> Flight<'a, C> {
    /// Starts sending `len` bytes through `c` in messages of `chunk`
    /// bytes (the last shorter) to `dst` with `tag`.
    #[cfg(test)]
    pub(crate) fn send(
        comm: &'a Comm,
        flying: &'a InFlight,
        c: C,
        len: usize,
        chunk: usize,
        dst: usize,
        tag: Tag,
    ) -> Result<Self> {
        Self::send_or_back(comm, flying, c, len, chunk, dst, tag).map_err(|(e, _)| e)
    }

    /// [`send`](Self::send), giving `c` back with the error if it fails.
    pub(crate) fn send_or_back(
        comm: &'a Comm,
        flying: &'a InFlight,
        c: C,
        len: usize,
        chunk: usize,
        dst: usize,
        tag: Tag,
    ) -> Started<'a, C> {
        let side = Side::Send {
            len,
            dst,
            m: pipeline::messages(len, chunk.max(1)),
            copied: 0,
            sent: 0,
        };
        Self::start(comm, flying, c, chunk, tag, side)
    }

    /// Starts receiving what [`Flight::send`] sends, into a buffer of
    /// `cap` bytes through `c`.
    #[cfg(test)]
    pub(crate) fn recv(
        comm: &'a Comm,
        flying: &'a InFlight,
        c: C,
        cap: usize,
        chunk: usize,
        src: usize,
        tag: Tag,
    ) -> Result<Self> {
        Self::recv_or_back(comm, flying, c, cap, chunk, src, tag).map_err(|(e, _)| e)
    }

    /// [`recv`](Self::recv), giving `c` back with the error if it fails.
    pub(crate) fn recv_or_back(
        comm: &'a Comm,
        flying: &'a InFlight,
        c: C,
        cap: usize,
        chunk: usize,
        src: usize,
        tag: Tag,
    ) -> Started<'a, C> {
        let side = Side::Recv {
            cap,
            from: src,
            with: tag,
            k: 0,
            total: 0,
            last: false,
        };
        Self::start(comm, flying, c, chunk, tag, side)
    }

    fn start(
        comm: &'a Comm,
        flying: &'a InFlight,
        c: C,
        chunk: usize,
        tag: Tag,
        side: Side,
    ) -> Started<'a, C> {
        if chunk == 0 {
            return Err((GpuError::InvalidArgument("a chunk of 0 bytes".into()), c));
        }
        let (send, peer) = match side {
            Side::Send { dst, .. } => (true, dst),
            Side::Recv { from, .. } => (false, from),
        };
        let id = match flying.admit(send, comm.context(), peer, tag) {
            Ok(id) => id,
            Err(e) => return Err((e, c)),
        };
        let st = match c.pair(chunk) {
            Ok(st) => st,
            Err(e) => {
                flying.end(id);
                return Err((e, c));
            }
        };
        let mut f = Self {
            comm,
            flying,
            id,
            c,
            st: Some(st),
            chunk,
            tag,
            side,
            req: [None, None],
            out: None,
            steps: 0,
        };
        f.poll(false);
        Ok(f)
    }

    /// Moves the transfer on as far as it goes without waiting (`block`:
    /// waiting, under tandem's wait policy and timeout, until it is done);
    /// its outcome once it has one.
    pub(crate) fn poll(&mut self, block: bool) -> Option<&Result<Status>> {
        while self.out.is_none() {
            match self.step(block) {
                Ok(true) => self.steps += 1,
                Ok(false) if block => {
                    if let Err(e) = self.wait_something() {
                        self.fail(e);
                    }
                }
                Ok(false) => break,
                Err(e) => self.fail(e),
            }
        }
        if self.out.is_some() {
            self.release();
        }
        self.out.as_ref()
    }

    /// Gives back what an ended transfer held: its staging buffers (once
    /// their copies are done; no message uses them any more) and its place
    /// among the transfers in flight, so that a transfer of the same peer
    /// and tag may start at once.
    fn release(&mut self) {
        if let Some(st) = self.st.take() {
            for b in st.iter() {
                let _ = self.c.wait(b);
            }
            self.c.put_back(st);
        }
        self.flying.end(self.id);
    }

    /// Waits for the transfer and gives its outcome.
    pub(crate) fn wait(mut self) -> Result<Status> {
        self.poll(true);
        self.out
            .take()
            .expect("a blocking poll ends with an outcome")
    }

    /// The outcome `e`: what is in flight is drained first (the staging
    /// buffers go back only when no message uses them).
    fn fail(&mut self, e: GpuError) {
        self.drain();
        self.out = Some(Err(e));
    }

    /// Ends every message in flight: a receive not matched yet is
    /// cancelled; a send, or a receive already matched, is waited for.
    fn drain(&mut self) {
        for r in self.req.iter_mut().filter_map(Option::take) {
            self.comm.cancel_raw(&r);
            let _ = self.comm.wait_raw(r);
        }
    }

    /// One step; `false` when nothing could move without waiting.
    fn step(&mut self, block: bool) -> Result<bool> {
        let Self {
            comm,
            c,
            st,
            chunk,
            tag,
            side,
            req,
            ..
        } = self;
        let st = st.as_mut().expect("held until drop");
        let chunk = *chunk;
        match side {
            Side::Send {
                len,
                dst,
                m,
                copied,
                sent,
            } => {
                // Stage the next chunk into a buffer no send uses.
                if *copied < *m && *copied < *sent + pipeline::BUFFERS {
                    let i = buffer(*copied);
                    if req[i].is_none() {
                        let r = range(*len, chunk, *copied);
                        if !r.is_empty() {
                            c.down(&mut st[i], r.start, r.len())?;
                        }
                        *copied += 1;
                        return Ok(true);
                    }
                }
                // Send the oldest staged chunk once its copy is done.
                if *sent < *copied {
                    let i = buffer(*sent);
                    if req[i].is_none() && (block || c.ready(&st[i])?) {
                        let n = range(*len, chunk, *sent).len();
                        let p = c.bytes(&mut st[i], n)?.as_ptr();
                        // SAFETY: the n staged bytes at `p` are neither
                        // written (no copy into buffer i starts while
                        // req[i] is set) nor freed (`drain` runs before the
                        // buffers go back) until the request is spent.
                        let r = unsafe { comm.isend_raw(p, n, *dst, *tag, false) }?;
                        req[i] = Some(r);
                        *sent += 1;
                        return Ok(true);
                    }
                }
                if *sent == *m && req.iter().all(Option::is_none) {
                    self.out = Some(Ok(Status {
                        source: *dst,
                        tag: *tag,
                        len: *len,
                    }));
                    return Ok(true);
                }
            }
            Side::Recv {
                cap,
                from,
                with,
                k,
                total,
                last,
            } => {
                let i = buffer(*k);
                if !*last && req[i].is_none() {
                    // Receive the next message once the upload from its
                    // buffer (two messages ago) is done.
                    if !(block || c.ready(&st[i])?) {
                        return Ok(false);
                    }
                    let p = c.bytes(&mut st[i], chunk)?.as_mut_ptr();
                    // SAFETY: the chunk bytes at `p` are left to the engine
                    // (no copy touches buffer i while req[i] is set; `drain`
                    // runs before the buffers go back) until the request is
                    // spent.
                    let r = unsafe { comm.irecv_raw(p, chunk, *from, *with) }?;
                    req[i] = Some(r);
                    return Ok(true);
                }
                if *last {
                    // The last message arrived: done once the uploads are.
                    for b in st.iter() {
                        if !(block || c.ready(b)?) {
                            return Ok(false);
                        }
                        c.wait(b)?;
                    }
                    self.out = Some(if *total > *cap {
                        Err(GpuError::Tandem(Error::Truncated {
                            needed: *total,
                            got: *cap,
                            source: *from,
                            tag: *with,
                        }))
                    } else {
                        Ok(Status {
                            source: *from,
                            tag: *with,
                            len: *total,
                        })
                    });
                    return Ok(true);
                }
            }
        }
        // Collect what finished.
        let mut moved = false;
        for i in 0..pipeline::BUFFERS {
            if let Some(r) = self.req[i].take() {
                match self.comm.test_raw(r) {
                    Ok(done) => {
                        self.completed(i, done)?;
                        moved = true;
                    }
                    Err(r) => self.req[i] = Some(r),
                }
            }
        }
        Ok(moved)
    }

    /// The message through staging buffer `i` finished with `done`.
    fn completed(&mut self, i: usize, done: tandem_driver::Result<Status>) -> Result<()> {
        let chunk = self.chunk;
        match &mut self.side {
            Side::Send { .. } => {
                done?;
            }
            Side::Recv {
                cap,
                from,
                with,
                k,
                total,
                last,
            } => {
                let s = done.map_err(|e| match e {
                    Error::Truncated { needed, source, .. } => GpuError::InvalidArgument(format!(
                        "a chunk of {needed} bytes from rank {source}, longer than this \
                         rank's {chunk}-byte chunk (ranks must stage alike)"
                    )),
                    e => GpuError::Tandem(e),
                })?;
                // The rest of the message comes from the same rank, with
                // the same tag.
                if *k == 0 {
                    self.flying.pin(self.id, s.source, s.tag);
                }
                (*from, *with) = (s.source, s.tag);
                let fits = s.len.min(cap.saturating_sub(*total));
                if fits > 0 {
                    let st = self.st.as_mut().expect("held until drop");
                    self.c.up(&mut st[i], *total, fits)?;
                }
                *total += s.len;
                if s.len < chunk {
                    *last = true;
                } else {
                    *k += 1;
                }
            }
        }
        Ok(())
    }

    /// Nothing could move: waits for the oldest message in flight (under
    /// tandem's wait policy and timeout), or else for the staging copies.
    fn wait_something(&mut self) -> Result<()> {
        let oldest = match &self.side {
            Side::Send { sent, .. } => (1..=pipeline::BUFFERS)
                .rev()
                .filter_map(|d| sent.checked_sub(d))
                .map(buffer)
                .find(|&i| self.req[i].is_some()),
            Side::Recv { k, .. } => Some(buffer(*k)).filter(|&i| self.req[i].is_some()),
        };
        if let Some(i) = oldest {
            let r = self.req[i].take().expect("found above");
            let done = self.comm.wait_raw(r);
            return self.completed(i, done);
        }
        let st = self.st.as_ref().expect("held until drop");
        for b in st.iter() {
            self.c.wait(b)?;
        }
        Ok(())
    }
}

impl<C: Copies> Drop for Flight<'_, C> {
    fn drop(&mut self) {
        // An unfinished transfer (dropped, or failed) still has messages
        // using its staging buffers: end them before the buffers go back.
        self.drain();
        self.release();
    }
}

#[cfg(test)]
thread_local! {
    /// The test ranks' transfers in flight (each rank is a thread), kept
    /// like a `Gpu`'s: made once.
    static FLYING: InFlight = InFlight::default();
}

/// Sends `len` bytes through `c` in messages of `chunk` bytes (the last
/// shorter) to `dst` with `tag`, and waits.
#[cfg(test)]
pub(crate) fn send_chunks<C: Copies>(
    comm: &Comm,
    c: C,
    len: usize,
    chunk: usize,
    dst: usize,
    tag: Tag,
) -> Result<()> {
    FLYING.with(|flying| {
        let f = Flight::send(comm, flying, c, len, chunk, dst, tag)?;
        f.wait().map(|_| ())
    })
}

/// Receives what [`send_chunks`] sent into a buffer of `cap` bytes through
/// `c`, and waits.
#[cfg(test)]
pub(crate) fn recv_chunks<C: Copies>(
    comm: &Comm,
    c: C,
    cap: usize,
    chunk: usize,
    src: usize,
    tag: Tag,
) -> Result<Status> {
    FLYING.with(|flying| {
        let f = Flight::recv(comm, flying, c, cap, chunk, src, tag)?;
        f.wait()
    })
}

/// [`Copies`] between a device buffer and pinned staging, on tandem's
/// stream.
struct Device<'a> {
    gpu: &'a Gpu,
    from: Option<&'a DeviceBuf>,
    into: Option<&'a mut DeviceBuf>,
}

impl Copies for Device<'_> {
    type Buf = Staging;

    fn pair(&self, chunk: usize) -> Result<[Staging; 2]> {
        self.gpu.staging_pair(chunk)
    }

    fn put_back(&self, b: [Staging; 2]) {
        self.gpu.give_back(b);
    }

    fn down(&self, b: &mut Staging, at: usize, n: usize) -> Result<()> {
        let buf = self.from.expect("a sending transfer");
        let stream = self.gpu.stream();
        self.gpu
            .reading(buf, at, |src| b.start_download(stream, src, n))
    }

    fn up(&mut self, b: &mut Staging, at: usize, n: usize) -> Result<()> {
        let gpu = self.gpu;
        let buf = self.into.as_deref_mut().expect("a receiving transfer");
        gpu.writing(buf, at, |dst| b.start_upload(gpu.stream(), dst, n))
    }

    fn wait(&self, b: &Staging) -> Result<()> {
        b.wait()
    }

    fn ready(&self, b: &Staging) -> Result<bool> {
        b.ready()
    }

    fn bytes<'b>(&self, b: &'b mut Staging, n: usize) -> Result<&'b mut [u8]> {
        b.bytes(n)
    }
}

/// Flights moved on together: waiting for one moves every other one too,
/// as an MPI progress engine would (a transfer of chunks moves only when
/// something polls it: a receive posts its next chunk only after the last
/// one arrived, a send refills a staging buffer only after the send from
/// it completed).
pub(crate) struct Flights<'env, C: Copies> {
    comm: &'env Comm,
    all: RefCell<Vec<Option<Flight<'env, C>>>>,
}

/// A transfer in flight in a [`Scope`]: spent by [`Scope::wait`] or a
/// [`Scope::test`] that finds it done. Dropped unspent, the transfer is
/// still finished by the scope's end.
#[derive(Debug)]
#[must_use = "a transfer is waited for or tested (else the scope's end waits for it)"]
pub struct Handle(usize);

impl<'env, C: Copies> Flights<'env, C> {
    pub(crate) fn new(comm: &'env Comm) -> Self {
        Self {
            comm,
            all: RefCell::new(Vec::new()),
        }
    }

    /// Adds a flight (in the first free place).
    pub(crate) fn add(&self, f: Flight<'env, C>) -> Handle {
        let mut all = self.all.borrow_mut();
        match all.iter().position(Option::is_none) {
            Some(i) => {
                all[i] = Some(f);
                Handle(i)
            }
            None => {
                all.push(Some(f));
                Handle(all.len() - 1)
            }
        }
    }

    /// Moves every flight on once; the steps they took.
    fn pump(&self) -> u64 {
        let mut all = self.all.borrow_mut();
        let mut steps = 0;
        for f in all.iter_mut().flatten() {
            let before = f.steps;
            f.poll(false);
            steps += f.steps - before;
        }
        steps
    }

    /// Whether `h`'s flight has an outcome (`None`: `h` names none here).
    fn done(&self, h: &Handle) -> Option<bool> {
        self.all
            .borrow()
            .get(h.0)?
            .as_ref()
            .map(|f| f.out.is_some())
    }

    /// The error for a handle that names no flight of these.
    fn foreign() -> GpuError {
        GpuError::InvalidArgument("a handle of another scope".into())
    }

    /// Takes `h`'s finished flight out.
    fn take(&self, h: Handle) -> Flight<'env, C> {
        self.all.borrow_mut()[h.0]
            .take()
            .expect("a handle names a flight until it is spent")
    }

    /// Moves every flight on once: `h`'s flight's outcome and the flight if
    /// it finished, else `h` back.
    #[allow(clippy::type_complexity)]
    pub(crate) fn test(
        &self,
        h: Handle,
    ) -> std::result::Result<std::result::Result<Flight<'env, C>, GpuError>, Handle> {
        self.pump();
        match self.done(&h) {
            Some(true) => Ok(Ok(self.take(h))),
            Some(false) => Err(h),
            None => Ok(Err(Self::foreign())),
        }
    }

    /// Moves every flight on until `h`'s is done; gives up (an error of
    /// tandem's timeout) after the communicator's timeout without any
    /// flight taking a step.
    pub(crate) fn wait(&self, h: Handle) -> std::result::Result<Flight<'env, C>, GpuError> {
        let limit = self.comm.config().timeout;
        let mut quiet = std::time::Instant::now();
        let mut idle = 0u32;
        loop {
            if self.pump() > 0 {
                quiet = std::time::Instant::now();
                idle = 0;
            }
            match self.done(&h) {
                Some(true) => return Ok(self.take(h)),
                Some(false) => {}
                None => return Err(Self::foreign()),
            }
            idle += 1;
            if idle < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
                if quiet.elapsed() > limit {
                    // The flight fails (what it has in flight is ended)
                    // and is handed out, so that what it held goes back.
                    let mut f = self.take(h);
                    let (op, peer, tag) = match f.side {
                        Side::Send { dst, .. } => (tandem_driver::OpKind::Send, dst, f.tag),
                        Side::Recv { from, with, .. } => (tandem_driver::OpKind::Recv, from, with),
                    };
                    f.fail(GpuError::Tandem(Error::Timeout {
                        op,
                        peer,
                        tag,
                        waited: quiet.elapsed(),
                        why: "a device transfer took no step (nor did any other of its scope)"
                            .into(),
                    }));
                    f.release();
                    return Ok(f);
                }
            }
        }
    }

    /// Waits for every flight; the first error.
    pub(crate) fn wait_all(&self) -> Result<()> {
        let mut first = Ok(());
        let n = self.all.borrow().len();
        for i in 0..n {
            if self.all.borrow()[i].is_some() {
                let r = self
                    .wait(Handle(i))
                    .and_then(|mut f| f.out.take().expect("a finished flight has its outcome"));
                if first.is_ok() {
                    first = r.map(|_| ());
                }
            }
        }
        first
    }
}

/// A device buffer bound once for transfers started many times
/// ([`Scope::send_init`], [`Scope::recv_init`]).
#[derive(Debug)]
enum Bound<'env> {
    Send(&'env DeviceBuf),
    Recv(&'env mut DeviceBuf),
}

/// A persistent binding of a [`Scope`] ([`Scope::send_init`],
/// [`Scope::recv_init`]), started by [`Scope::start`].
#[derive(Debug, Clone, Copy)]
pub struct Bind(usize);

/// Non-blocking transfers of device buffers ([`scope`]): started at once,
/// moved on together whenever one is tested or waited for, and all done
/// when the scope ends. Two transfers that could be confused (sends to one
/// rank with one tag, receives that could match the same messages) may not
/// be in flight at once: the second is refused with an error naming the
/// first.
pub struct Scope<'env> {
    gpu: &'env Gpu,
    flights: Flights<'env, Device<'env>>,
    /// Persistent bindings: the buffer, or `None` while a start is in
    /// flight (with the handle's place, to give it back).
    bound: RefCell<Vec<(Option<Bound<'env>>, usize, Tag)>>,
    /// Which binding each flight came from.
    origin: RefCell<Vec<Option<usize>>>,
    /// Invariance in `'env`: a buffer given to the scope outlives it.
    _env: std::marker::PhantomData<&'env mut &'env ()>,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field(
                "flights",
                &self.flights.all.borrow().iter().flatten().count(),
            )
            .finish()
    }
}

/// Runs `f` with a [`Scope`] for non-blocking transfers of device buffers
/// on `comm` and `gpu`, then finishes every transfer still in flight.
///
/// # Errors
/// The first error of a transfer `f` left unfinished (`f`'s own result is
/// returned inside).
pub fn scope<'env, R>(
    comm: &'env Comm,
    gpu: &'env Gpu,
    f: impl FnOnce(&Scope<'env>) -> R,
) -> Result<R> {
    let s = Scope {
        gpu,
        flights: Flights::new(comm),
        bound: RefCell::new(Vec::new()),
        origin: RefCell::new(Vec::new()),
        _env: std::marker::PhantomData,
    };
    let r = f(&s);
    s.flights.wait_all()?;
    Ok(r)
}

impl<'env> Scope<'env> {
    fn add(&self, f: Flight<'env, Device<'env>>, from: Option<usize>) -> Handle {
        let h = self.flights.add(f);
        let mut o = self.origin.borrow_mut();
        if o.len() <= h.0 {
            o.resize(h.0 + 1, None);
        }
        o[h.0] = from;
        h
    }

    /// Starts sending the whole of `buf` to rank `dst` with `tag` (as
    /// [`send`] does, not waiting).
    ///
    /// # Errors
    /// As [`send`], for what fails at the start;
    /// [`GpuError::InvalidArgument`] for a send to `dst` with `tag` while
    /// another is in flight.
    pub fn isend(&self, buf: &'env DeviceBuf, dst: usize, tag: Tag) -> Result<Handle> {
        let f = flight_send(self.flights.comm, self.gpu, buf, dst, tag).map_err(|(e, _)| e)?;
        Ok(self.add(f, None))
    }

    /// Starts receiving into `buf` from rank `src` (or
    /// [`tandem_driver::ANY_SOURCE`]) with `tag` (or
    /// [`tandem_driver::ANY_TAG`]), as [`recv`] does, not waiting.
    ///
    /// # Errors
    /// As [`recv`], for what fails at the start;
    /// [`GpuError::InvalidArgument`] for a receive that could match the
    /// messages of another in flight.
    pub fn irecv(&self, buf: &'env mut DeviceBuf, src: usize, tag: Tag) -> Result<Handle> {
        let f = flight_recv(self.flights.comm, self.gpu, buf, src, tag).map_err(|(e, _)| e)?;
        Ok(self.add(f, None))
    }

    /// Moves every transfer of the scope on once; `h`'s outcome if it is
    /// done (a send's status names its destination, tag and length), else
    /// `h` back.
    ///
    /// # Errors
    /// In the inner result: as [`wait`](Self::wait).
    pub fn test(&self, h: Handle) -> std::result::Result<Result<Status>, Handle> {
        let i = h.0;
        Ok(self.flights.test(h)?.and_then(|f| self.finish(i, f)))
    }

    /// Moves every transfer of the scope on until `h`'s is done.
    ///
    /// # Errors
    /// As [`send`] or [`recv`]; [`tandem_driver::Error::Timeout`] after the
    /// communicator's timeout without any transfer of the scope moving
    /// (the transfer is then left for the scope's end).
    pub fn wait(&self, h: Handle) -> Result<Status> {
        let i = h.0;
        let f = self.flights.wait(h)?;
        self.finish(i, f)
    }

    /// A finished flight's outcome; the persistent binding it came from
    /// gets its buffer back.
    fn finish(&self, i: usize, mut f: Flight<'env, Device<'env>>) -> Result<Status> {
        let out = f.out.take().expect("a finished flight has its outcome");
        if let Some(b) = self.origin.borrow_mut()[i].take() {
            let buf = match (f.c.from.take(), f.c.into.take()) {
                (Some(s), _) => Some(Bound::Send(s)),
                (_, Some(r)) => Some(Bound::Recv(r)),
                _ => None,
            };
            self.bound.borrow_mut()[b].0 = buf;
        }
        out
    }

    /// Binds a send of `buf` to `dst` with `tag`, to be started (many
    /// times) by [`start`](Self::start).
    ///
    /// # Errors
    /// [`Error::InvalidRank`] for a `dst` that is not a rank.
    pub fn send_init(&self, buf: &'env DeviceBuf, dst: usize, tag: Tag) -> Result<Bind> {
        self.bind(Bound::Send(buf), dst, tag)
    }

    /// Binds a receive into `buf` from `src` with `tag`, to be started
    /// (many times) by [`start`](Self::start).
    ///
    /// # Errors
    /// As [`send_init`](Self::send_init).
    pub fn recv_init(&self, buf: &'env mut DeviceBuf, src: usize, tag: Tag) -> Result<Bind> {
        self.bind(Bound::Recv(buf), src, tag)
    }

    fn bind(&self, b: Bound<'env>, peer: usize, tag: Tag) -> Result<Bind> {
        let comm = self.flights.comm;
        let any = matches!(b, Bound::Recv(_)) && peer == ANY_SOURCE;
        if peer >= comm.size() && !any {
            return Err(GpuError::Tandem(Error::InvalidRank {
                rank: peer,
                size: comm.size(),
            }));
        }
        let mut bound = self.bound.borrow_mut();
        bound.push((Some(b), peer, tag));
        Ok(Bind(bound.len() - 1))
    }

    /// Starts a bound transfer.
    ///
    /// # Errors
    /// [`GpuError::InvalidArgument`] while its previous start is in flight;
    /// as [`isend`](Self::isend) or [`irecv`](Self::irecv).
    pub fn start(&self, b: Bind) -> Result<Handle> {
        let (buf, peer, tag) = {
            let mut bound = self.bound.borrow_mut();
            let (slot, peer, tag) = &mut bound[b.0];
            let Some(buf) = slot.take() else {
                return Err(GpuError::InvalidArgument(
                    "a persistent transfer started again before its last start completed".into(),
                ));
            };
            (buf, *peer, *tag)
        };
        let comm = self.flights.comm;
        let f = match buf {
            Bound::Send(buf) => flight_send(comm, self.gpu, buf, peer, tag),
            Bound::Recv(buf) => flight_recv(comm, self.gpu, buf, peer, tag),
        };
        match f {
            Ok(f) => Ok(self.add(f, Some(b.0))),
            Err((e, mut c)) => {
                // Refused or failed: the binding keeps its buffer.
                self.bound.borrow_mut()[b.0].0 = match (c.from.take(), c.into.take()) {
                    (Some(s), _) => Some(Bound::Send(s)),
                    (_, Some(r)) => Some(Bound::Recv(r)),
                    _ => None,
                };
                Err(e)
            }
        }
    }
}

/// A send flight of a device buffer.
fn flight_send<'a>(
    comm: &'a Comm,
    gpu: &'a Gpu,
    buf: &'a DeviceBuf,
    dst: usize,
    tag: Tag,
) -> Started<'a, Device<'a>> {
    let l = Limits::default();
    say_path(comm, buf.len(), dst, &l);
    let c = Device {
        gpu,
        from: Some(buf),
        into: None,
    };
    Flight::send_or_back(comm, &gpu.in_flight, c, buf.len(), l.chunk, dst, tag)
}

/// A receive flight into a device buffer.
fn flight_recv<'a>(
    comm: &'a Comm,
    gpu: &'a Gpu,
    buf: &'a mut DeviceBuf,
    src: usize,
    tag: Tag,
) -> Started<'a, Device<'a>> {
    let l = Limits::default();
    let cap = buf.len();
    let c = Device {
        gpu,
        from: None,
        into: Some(buf),
    };
    Flight::recv_or_back(comm, &gpu.in_flight, c, cap, l.chunk, src, tag)
}

/// Prints the path of a transfer where `TANDEM_DEBUG` asks for it.
fn say_path(comm: &Comm, len: usize, peer: usize, l: &Limits) {
    if say_paths() {
        eprintln!(
            "tandem-gpu[{}]: {len} B with rank {peer}: {}",
            comm.rank(),
            choose(peer_of(comm, peer), len, l)
        );
    }
}

/// Sends the whole of `buf` (device memory of `gpu`) to rank `dst` with
/// `tag`: staged through pinned host memory, in chunks whose device→host
/// copies overlap the sends. Returns once `buf` may be reused. A receiver
/// takes it with [`recv`] (or [`Scope::irecv`]); a send that could be
/// confused with one in flight (the same destination and tag) is refused.
///
/// # Errors
/// [`GpuError::Tandem`] as [`Comm::send`] fails; [`GpuError::InvalidArgument`]
/// for a send refused as above; [`GpuError::Cuda`] if a
/// copy fails.
pub fn send(comm: &Comm, gpu: &Gpu, buf: &DeviceBuf, dst: usize, tag: Tag) -> Result<()> {
    flight_send(comm, gpu, buf, dst, tag)
        .map_err(|(e, _)| e)?
        .wait()
        .map(|_| ())
}

/// Receives a device buffer's message from rank `src` (or
/// [`tandem_driver::ANY_SOURCE`]) with `tag` (or [`tandem_driver::ANY_TAG`])
/// into `buf`, as [`send`] sent it: the chunks arrive into pinned staging
/// and their host→device copies overlap the arrival of the next. Returns
/// the message's length, source and tag; `buf` holds the data when it
/// returns.
///
/// # Errors
/// [`GpuError::Tandem`] with [`Error::Truncated`] for a message longer
/// than `buf` (every chunk is still taken, the part that fits is in
/// `buf`), or as [`Comm::recv`] fails; [`GpuError::InvalidArgument`] for a
/// chunk longer than this rank's (a sender with another chunk size);
/// [`GpuError::Cuda`] if a copy fails.
pub fn recv(comm: &Comm, gpu: &Gpu, buf: &mut DeviceBuf, src: usize, tag: Tag) -> Result<Status> {
    flight_recv(comm, gpu, buf, src, tag)
        .map_err(|(e, _)| e)?
        .wait()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_driver::{Config, Layout, ANY_SOURCE, ANY_TAG};

    /// [`Copies`] in plain memory, counting the copies; its staging
    /// buffers are made at the first transfer and reused after, as the
    /// GPU's pool does.
    struct Host {
        from: Vec<u8>,
        into: Vec<u8>,
        downs: std::cell::Cell<usize>,
        spare: std::cell::RefCell<Option<[Vec<u8>; 2]>>,
    }

    impl Host {
        fn new(from: Vec<u8>, cap: usize) -> Self {
            Self {
                from,
                into: vec![0; cap],
                downs: Default::default(),
                spare: Default::default(),
            }
        }
        fn sending(from: Vec<u8>) -> Self {
            Self::new(from, 0)
        }
        fn receiving(cap: usize) -> Self {
            Self::new(Vec::new(), cap)
        }
    }

    impl Copies for Host {
        type Buf = Vec<u8>;
        fn pair(&self, chunk: usize) -> Result<[Vec<u8>; 2]> {
            let spare = self.spare.borrow_mut().take();
            Ok(spare.unwrap_or_else(|| [vec![0; chunk], vec![0; chunk]]))
        }
        fn put_back(&self, b: [Vec<u8>; 2]) {
            *self.spare.borrow_mut() = Some(b);
        }
        fn down(&self, b: &mut Vec<u8>, at: usize, n: usize) -> Result<()> {
            self.downs.set(self.downs.get() + 1);
            b[..n].copy_from_slice(&self.from[at..at + n]);
            Ok(())
        }
        fn up(&mut self, b: &mut Vec<u8>, at: usize, n: usize) -> Result<()> {
            self.into[at..at + n].copy_from_slice(&b[..n]);
            Ok(())
        }
        fn wait(&self, _: &Vec<u8>) -> Result<()> {
            Ok(())
        }
        fn ready(&self, _: &Vec<u8>) -> Result<bool> {
            Ok(true)
        }
        fn bytes<'b>(&self, b: &'b mut Vec<u8>, n: usize) -> Result<&'b mut [u8]> {
            Ok(&mut b[..n])
        }
    }

    fn data(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13) ^ salt)
            .collect()
    }

    /// Runs `f` on `n` ranks in threads; panics with the first failure.
    fn ranks<R: Send>(n: usize, f: impl Fn(&Comm) -> Result<R> + Sync) -> Vec<R> {
        Comm::threads(n, &Layout::default(), Config::default(), |c| Ok(f(&c)))
            .into_iter()
            .enumerate()
            .map(|(r, o)| {
                o.unwrap_or_else(|e| panic!("rank {r}: {e}"))
                    .unwrap_or_else(|e| panic!("rank {r}: {e}"))
            })
            .collect()
    }

    #[test]
    fn every_length_arrives_whole_in_chunks_between_ranks() {
        const CHUNK: usize = 16;
        ranks(2, |c| {
            for len in [0usize, 1, 15, 16, 17, 32, 33, 100] {
                if c.rank() == 0 {
                    let mut h = Host::sending(data(len, 1));
                    send_chunks(c, &mut h, len, CHUNK, 1, 4)?;
                    assert_eq!(h.downs.get(), len.div_ceil(CHUNK), "copies of {len} B");
                } else {
                    // A larger buffer: the short last chunk ends it.
                    let mut h = Host::receiving(len + 40);
                    let st = recv_chunks(c, &mut h, len + 40, CHUNK, 0, 4)?;
                    assert_eq!((st.len, st.source, st.tag), (len, 0, 4));
                    assert_eq!(&h.into[..len], &data(len, 1)[..], "{len} B");
                    assert!(
                        h.into[len..].iter().all(|&b| b == 0),
                        "nothing past the message"
                    );
                }
            }
            Ok(())
        });
    }

    #[test]
    fn a_wildcard_receive_keeps_to_the_first_chunk_s_sender_and_tag() {
        const CHUNK: usize = 8;
        ranks(3, |c| {
            match c.rank() {
                r @ (0 | 1) => {
                    // Both send multi-chunk messages to rank 2 at once.
                    let mut h = Host::sending(data(50, r as u8));
                    send_chunks(c, &mut h, 50, CHUNK, 2, 10 + r as u32)?;
                }
                _ => {
                    for _ in 0..2 {
                        let mut h = Host::receiving(64);
                        let st = recv_chunks(c, &mut h, 64, CHUNK, ANY_SOURCE, ANY_TAG)?;
                        assert_eq!(st.len, 50);
                        assert_eq!(st.tag, 10 + st.source as u32);
                        assert_eq!(&h.into[..50], &data(50, st.source as u8)[..]);
                    }
                }
            }
            Ok(())
        });
    }

    #[test]
    fn a_message_too_long_is_truncated_and_the_next_arrives_intact() {
        const CHUNK: usize = 8;
        ranks(2, |c| {
            if c.rank() == 0 {
                for (len, salt) in [(40usize, 1u8), (12, 2)] {
                    let mut h = Host::sending(data(len, salt));
                    send_chunks(c, &mut h, len, CHUNK, 1, 3)?;
                }
            } else {
                let mut h = Host::receiving(20);
                match recv_chunks(c, &mut h, 20, CHUNK, 0, 3) {
                    Err(GpuError::Tandem(Error::Truncated {
                        needed: 40,
                        got: 20,
                        source: 0,
                        tag: 3,
                    })) => {}
                    other => panic!("expected a truncation, got {other:?}"),
                }
                assert_eq!(&h.into[..], &data(40, 1)[..20], "what fits is there");
                let mut h = Host::receiving(12);
                let st = recv_chunks(c, &mut h, 12, CHUNK, 0, 3)?;
                assert_eq!((st.len, &h.into[..]), (12, &data(12, 2)[..]));
            }
            Ok(())
        });
    }

    #[test]
    fn a_sender_with_a_larger_chunk_is_named() {
        let out = ranks(2, |c| {
            if c.rank() == 0 {
                // Eager messages: the sender finishes whatever rank 1 does.
                let mut h = Host::sending(data(64, 0));
                send_chunks(c, &mut h, 64, 32, 1, 1)?;
                Ok(None)
            } else {
                let mut h = Host::receiving(64);
                Ok(Some(recv_chunks(c, &mut h, 64, 16, 0, 1).map(|s| s.len)))
            }
        });
        match &out[1] {
            Some(Err(GpuError::InvalidArgument(m))) => {
                assert!(
                    m.contains("32 bytes from rank 0") && m.contains("16-byte chunk"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_receiver_that_dies_mid_transfer_is_an_error_not_a_hang() {
        const CHUNK: usize = 64 << 10;
        let out = Comm::threads_on(
            2,
            tandem_driver::Links::Tcp,
            &Layout::default(),
            Config::default(),
            |c| {
                if c.rank() == 1 {
                    // Takes the first chunk by hand, then its process
                    // "dies": the connection closes.
                    let mut first = vec![0u8; CHUNK];
                    c.recv(&mut first, 0, 2)?;
                    drop(c);
                    return Ok(None);
                }
                let t = std::time::Instant::now();
                let mut h = Host::sending(data(4 * CHUNK + 5, 3));
                let r = send_chunks(&c, &mut h, 4 * CHUNK + 5, CHUNK, 1, 2);
                Ok(Some((r.map_err(|e| e.to_string()), t.elapsed())))
            },
        );
        let mut out = out.into_iter();
        let (r, took) = out.next().unwrap().unwrap().expect("rank 0 reports");
        let e = r.expect_err("the receiver is gone");
        assert!(e.contains("rank 1"), "{e}");
        assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    }

    /// Polls every one of `fs` each round until all have an outcome,
    /// failing after 20 s instead of hanging. (Every one: a round that
    /// stopped at the first unfinished send would never step the receive
    /// whose next post that send's peer waits for.)
    fn poll_all<C: Copies>(fs: &mut [Flight<'_, C>]) {
        let t = std::time::Instant::now();
        loop {
            let mut pending = false;
            for f in fs.iter_mut() {
                pending |= f.poll(false).is_none();
            }
            if !pending {
                break;
            }
            assert!(t.elapsed().as_secs() < 20, "transfers stuck");
            std::hint::spin_loop();
        }
    }

    #[test]
    fn both_ranks_start_sending_first_and_neither_blocks() {
        // Rendezvous-sized chunks: a blocking send here would wait for a
        // receive the peer has not posted yet.
        const CHUNK: usize = 64 << 10;
        let len = 3 * CHUNK + 5;
        ranks(2, |c| {
            let (me, peer) = (c.rank(), 1 - c.rank());
            let mut out = Host::sending(data(len, me as u8));
            let mut inn = Host::receiving(len);
            FLYING.with(|fl| {
                let mut fs = [
                    Flight::send(c, fl, &mut out, len, CHUNK, peer, 3)?,
                    Flight::recv(c, fl, &mut inn, len, CHUNK, peer, 3)?,
                ];
                poll_all(&mut fs);
                let [s, r] = fs;
                s.wait()?;
                assert_eq!(r.wait()?.len, len);
                Ok::<_, GpuError>(())
            })?;
            assert_eq!(inn.into, data(len, peer as u8));
            Ok(())
        });
    }

    #[test]
    fn waiting_for_the_send_moves_the_receive_of_the_same_flights() {
        // Both ranks start a send, then a receive, then wait for the send
        // first: the peer's send of chunk 2 needs this rank's receive to
        // post its chunk 2, which only a poll of that receive does.
        const CHUNK: usize = 64 << 10;
        let len = 5 * CHUNK + 9;
        ranks(2, |c| {
            let (me, peer) = (c.rank(), 1 - c.rank());
            let mut out = Host::sending(data(len, me as u8));
            let mut inn = Host::receiving(len);
            FLYING.with(|fl| {
                let fs = Flights::new(c);
                let a = fs.add(Flight::send(c, fl, &mut out, len, CHUNK, peer, 3)?);
                let b = fs.add(Flight::recv(c, fl, &mut inn, len, CHUNK, peer, 3)?);
                fs.wait(a)?.wait()?;
                assert_eq!(fs.wait(b)?.wait()?.len, len);
                fs.wait_all()
            })?;
            assert_eq!(inn.into, data(len, peer as u8));
            Ok(())
        });
    }

    #[test]
    fn a_flight_nobody_answers_ends_in_an_error_naming_its_peer() {
        const CHUNK: usize = 64 << 10;
        let cfg = Config::default().timeout(std::time::Duration::from_millis(300));
        let out = Comm::threads(2, &Layout::default(), cfg, |c| {
            if c.rank() == 1 {
                // Never receives: waits in a barrier, which rank 0 joins
                // only after its send failed (the engine sees the cycle).
                let _ = c.barrier();
                return Ok(None);
            }
            let mut h = Host::sending(data(3 * CHUNK, 1));
            let r = FLYING.with(|fl| {
                let fs = Flights::new(&c);
                let a = fs.add(Flight::send(&c, fl, &mut h, 3 * CHUNK, CHUNK, 1, 4)?);
                fs.wait(a)?.wait().map(|_| ())
            });
            let _ = c.barrier();
            Ok(Some(r.map_err(|e| e.to_string())))
        });
        let r = out
            .into_iter()
            .next()
            .unwrap()
            .unwrap()
            .expect("rank 0 reports");
        let e = r.expect_err("nobody receives");
        assert!(e.contains("rank 1"), "{e}");
    }

    #[test]
    fn a_finished_transfer_not_yet_waited_for_blocks_no_other() {
        const CHUNK: usize = 16 << 10;
        let len = 2 * CHUNK + 1;
        ranks(2, |c| {
            let (mut a, mut b) = (Host::new(data(len, 1), len), Host::new(data(len, 2), len));
            FLYING.with(|fl| {
                let fs = Flights::new(c);
                fn make<'a>(
                    c: &'a Comm,
                    fl: &'a InFlight,
                    h: &'a mut Host,
                    len: usize,
                ) -> Result<Flight<'a, &'a mut Host>> {
                    let peer = 1 - c.rank();
                    match c.rank() {
                        0 => Flight::send(c, fl, h, len, CHUNK, peer, 5),
                        _ => Flight::recv(c, fl, h, len, CHUNK, peer, 5),
                    }
                }
                let first = fs.add(make(c, fl, &mut a, len)?);
                // Moved on until done, its handle not yet spent.
                while fs.done(&first) != Some(true) {
                    fs.pump();
                }
                let second = fs.add(make(c, fl, &mut b, len)?);
                fs.wait(second)?.wait()?;
                fs.wait(first)?.wait()?;
                Ok::<_, GpuError>(())
            })?;
            if c.rank() == 1 {
                assert_eq!(a.into, data(len, 1));
                assert_eq!(b.into, data(len, 2));
            }
            Ok(())
        });
    }

    #[test]
    fn a_window_of_transfers_with_distinct_tags_arrives_whole() {
        const CHUNK: usize = 16 << 10;
        let len = 2 * CHUNK + 77;
        ranks(2, |c| {
            let peer = 1 - c.rank();
            let mut hosts: Vec<Host> = (0..4)
                .map(|k| {
                    if c.rank() == 0 {
                        Host::sending(data(len, k))
                    } else {
                        Host::receiving(len)
                    }
                })
                .collect();
            FLYING.with(|fl| {
                let mut fs = hosts
                    .iter_mut()
                    .enumerate()
                    .map(|(k, h)| {
                        let tag = 10 + k as u32;
                        if c.rank() == 0 {
                            Flight::send(c, fl, h, len, CHUNK, peer, tag)
                        } else {
                            Flight::recv(c, fl, h, len, CHUNK, peer, tag)
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                poll_all(&mut fs);
                for f in fs {
                    f.wait()?;
                }
                Ok::<_, GpuError>(())
            })?;
            if c.rank() == 1 {
                for (k, h) in hosts.iter().enumerate() {
                    assert_eq!(h.into, data(len, k as u8), "transfer {k}");
                }
            }
            Ok(())
        });
    }

    #[test]
    fn a_transfer_that_would_be_confused_with_one_in_flight_is_refused() {
        const CHUNK: usize = 16 << 10;
        let len = 3 * CHUNK;
        ranks(2, |c| {
            let peer = 1 - c.rank();
            let refused = |r: Result<Flight<'_, &mut Host>>| match r {
                Err(GpuError::InvalidArgument(m)) => assert!(m.contains("in flight"), "{m}"),
                Ok(_) => panic!("admitted"),
                Err(e) => panic!("{e}"),
            };
            FLYING.with(|fl| {
                if c.rank() == 0 {
                    let (mut a, mut b, mut d) = (
                        Host::sending(data(len, 1)),
                        Host::sending(data(len, 2)),
                        Host::sending(data(len, 3)),
                    );
                    let first = Flight::send(c, fl, &mut a, len, CHUNK, peer, 5)?;
                    refused(Flight::send(c, fl, &mut b, len, CHUNK, peer, 5));
                    let other = Flight::send(c, fl, &mut d, len, CHUNK, peer, 6)?;
                    first.wait()?;
                    other.wait()?;
                    // The first one done, the same tag may go again.
                    Flight::send(c, fl, &mut b, len, CHUNK, peer, 5)?.wait()?;
                } else {
                    let (mut x, mut y, mut z) = (
                        Host::receiving(len),
                        Host::receiving(len),
                        Host::receiving(len),
                    );
                    let first = Flight::recv(c, fl, &mut x, len, CHUNK, peer, 5)?;
                    // A wildcard could take the first one's chunks.
                    refused(Flight::recv(c, fl, &mut y, len, CHUNK, ANY_SOURCE, 5));
                    refused(Flight::recv(c, fl, &mut y, len, CHUNK, peer, ANY_TAG));
                    let other = Flight::recv(c, fl, &mut z, len, CHUNK, peer, 6)?;
                    first.wait()?;
                    other.wait()?;
                    Flight::recv(c, fl, &mut y, len, CHUNK, ANY_SOURCE, 5)?.wait()?;
                    assert_eq!(x.into, data(len, 1));
                    assert_eq!(z.into, data(len, 3));
                    assert_eq!(y.into, data(len, 2));
                }
                Ok::<_, GpuError>(())
            })
        });
    }

    #[test]
    fn a_receive_dropped_before_it_matched_takes_nothing() {
        const CHUNK: usize = 16 << 10;
        let len = 2 * CHUNK + 3;
        ranks(2, |c| {
            let peer = 1 - c.rank();
            if c.rank() == 1 {
                let mut early = Host::receiving(len);
                FLYING.with(|fl| {
                    let f = Flight::recv(c, fl, &mut early, len, CHUNK, peer, 9)?;
                    drop(f);
                    Ok::<_, GpuError>(())
                })?;
                c.barrier()?;
                let mut h = Host::receiving(len);
                let st = recv_chunks(c, &mut h, len, CHUNK, peer, 9)?;
                assert_eq!((st.len, &h.into), (len, &data(len, 4)));
                assert!(
                    early.into.iter().all(|&b| b == 0),
                    "the dropped one got nothing"
                );
            } else {
                c.barrier()?;
                send_chunks(c, &mut Host::sending(data(len, 4)), len, CHUNK, peer, 9)?;
            }
            Ok(())
        });
    }

    use crate::counting;

    #[test]
    fn transfers_in_steady_state_allocate_nothing() {
        const CHUNK: usize = 8 << 10;
        let len = 5 * CHUNK + 100;
        ranks(2, |c| {
            let peer = 1 - c.rank();
            let mut p = Host::new(data(len, c.rank() as u8), len);
            let round = |p: &mut Host| -> Result<()> {
                if c.rank() == 0 {
                    send_chunks(c, &mut *p, len, CHUNK, peer, 7)?;
                    recv_chunks(c, &mut *p, len, CHUNK, peer, 7)?;
                } else {
                    recv_chunks(c, &mut *p, len, CHUNK, peer, 7)?;
                    send_chunks(c, &mut *p, len, CHUNK, peer, 7)?;
                }
                Ok(())
            };
            for _ in 0..20 {
                round(&mut p)?;
            }
            let before = counting::mine();
            for _ in 0..200 {
                round(&mut p)?;
            }
            let n = counting::mine() - before;
            assert_eq!(n, 0, "rank {}: {n} allocations in 200 rounds", c.rank());
            assert_eq!(p.into, data(len, peer as u8));
            Ok(())
        });
    }
}
