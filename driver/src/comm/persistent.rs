//! Persistent requests: a send or a receive bound once to a buffer, a peer
//! and a tag, then started many times (MPI's `MPI_Send_init`,
//! `MPI_Recv_init` and `MPI_Start`).
//!
//! Binding does the argument work once: the rank and the tag are checked
//! when the request is made, not at every start. A start is an ordinary
//! send or receive as far as matching goes, so MPI's ordering holds against
//! every other operation on the communicator: a started persistent receive
//! takes messages in the order they were sent, after receives posted before
//! it and before receives posted after it, and a persistent send is
//! non-overtaking with the sender's other sends to the same peer and tag.
//!
//! The blocking forms, [`PersistentSend::send`] and
//! [`PersistentRecv::recv`] (a start and its wait in one call), take the
//! same shortcuts as [`Comm::send`] and [`Comm::recv`]: an eager message
//! goes straight into the link, and a receive with nothing posted ahead of
//! it polls the link without recording an operation. [`start`] followed by
//! [`wait`] posts the operation, as MPI's `MPI_Start` does.
//!
//! [`start`]: PersistentRecv::start
//! [`wait`]: PersistentRecv::wait

use super::{Comm, Scope, Tag};
use crate::error::{Error, OpKind, Result};
use crate::progress::{OpId, Status};
use std::marker::PhantomData;

/// Where a persistent request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not started (or waited for since).
    Idle,
    /// Started and already finished (an eager send that went out at once);
    /// its wait returns at once.
    Finished,
    /// Started: the engine's operation.
    Posted(OpId),
}

fn misuse(what: &str) -> Error {
    Error::InvalidArgument(what.into())
}

/// A send bound to a buffer, a destination and a tag, started many times
/// (MPI's `MPI_Send_init`); made by [`Scope::send_init`].
///
/// Between starts the buffer may be rewritten through
/// [`buf_mut`](Self::buf_mut). A request dropped while started still
/// completes: the end of its scope waits for it, as for a [`Request`].
///
/// [`Request`]: crate::Request
///
/// ```
/// use tandem_driver::{Comm, Config, Layout};
/// let out = Comm::threads(2, &Layout::default(), Config::default(), |comm| {
///     let peer = 1 - comm.rank();
///     let mut out = [0u8; 8];
///     let mut back = [0u8; 8];
///     comm.scope(|s| {
///         let mut tx = s.send_init(&mut out, peer, 7)?;
///         let mut rx = s.recv_init(&mut back, peer, 7)?;
///         for i in 0..100u64 {
///             if comm.rank() == 0 {
///                 tx.buf_mut().unwrap().copy_from_slice(&i.to_le_bytes());
///                 tx.send()?;
///                 rx.recv()?;
///             } else {
///                 rx.recv()?;
///                 tx.buf_mut().unwrap().copy_from_slice(rx.data().unwrap());
///                 tx.send()?;
///             }
///         }
///         Ok::<_, tandem_driver::Error>(u64::from_le_bytes(*rx.data().unwrap().first_chunk().unwrap()))
///     })?
/// });
/// assert_eq!(*out[0].as_ref().unwrap(), 99);
/// ```
#[must_use = "a persistent send does nothing until it is started"]
pub struct PersistentSend<'s, 'env> {
    comm: &'env Comm,
    scope: u32,
    buf: &'env mut [u8],
    dst: usize,
    tag: Tag,
    state: State,
    _s: PhantomData<&'s ()>,
}

/// A receive bound to a buffer, a source (or [`ANY_SOURCE`]) and a tag (or
/// [`ANY_TAG`]), started many times (MPI's `MPI_Recv_init`); made by
/// [`Scope::recv_init`].
///
/// Between starts the received message is read through
/// [`data`](Self::data). A request dropped while started still completes:
/// the end of its scope waits for it.
///
/// [`ANY_SOURCE`]: crate::ANY_SOURCE
/// [`ANY_TAG`]: crate::ANY_TAG
#[must_use = "a persistent receive does nothing until it is started"]
pub struct PersistentRecv<'s, 'env> {
    comm: &'env Comm,
    scope: u32,
    buf: &'env mut [u8],
    src: usize,
    tag: Tag,
    state: State,
    /// Bytes the last message delivered.
    len: usize,
    _s: PhantomData<&'s ()>,
}

impl<'s, 'env> Scope<'s, 'env> {
    /// A persistent send of `buf` to `dst` with `tag`, not started yet.
    ///
    /// # Errors
    /// [`Error::InvalidRank`] for `dst` not below `size()`,
    /// [`Error::InvalidTag`] for a tag above [`TAG_UB`](crate::TAG_UB)
    /// (or [`ANY_TAG`](crate::ANY_TAG)). The length is checked at each
    /// start.
    pub fn send_init(
        &'s self,
        buf: &'env mut [u8],
        dst: usize,
        tag: Tag,
    ) -> Result<PersistentSend<'s, 'env>> {
        self.comm.check_send(dst, tag)?;
        Ok(PersistentSend {
            comm: self.comm,
            scope: self.id,
            buf,
            dst,
            tag,
            state: State::Idle,
            _s: PhantomData,
        })
    }

    /// A persistent receive into `buf` from `src` (or
    /// [`ANY_SOURCE`](crate::ANY_SOURCE)) with `tag` (or
    /// [`ANY_TAG`](crate::ANY_TAG)), not started yet.
    ///
    /// # Errors
    /// [`Error::InvalidRank`] for `src` neither below `size()` nor
    /// [`ANY_SOURCE`](crate::ANY_SOURCE), [`Error::InvalidTag`] for a tag
    /// above [`TAG_UB`](crate::TAG_UB) other than
    /// [`ANY_TAG`](crate::ANY_TAG).
    pub fn recv_init(
        &'s self,
        buf: &'env mut [u8],
        src: usize,
        tag: Tag,
    ) -> Result<PersistentRecv<'s, 'env>> {
        Comm::check_recv_tag(tag)?;
        self.comm.source(src)?;
        Ok(PersistentRecv {
            comm: self.comm,
            scope: self.id,
            buf,
            src,
            tag,
            state: State::Idle,
            len: 0,
            _s: PhantomData,
        })
    }
}

impl PersistentSend<'_, '_> {
    /// Starts the send (MPI's `MPI_Start`). An eager message that the
    /// receiver has credit for goes out at once; anything else is posted
    /// and progresses in later calls.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is started already; when posting,
    /// [`Error::MessageTooLarge`], [`Error::TooManyRequests`], or the error
    /// of the link to the destination if it has failed already (see
    /// [`Comm`]). The send's later errors come from [`wait`](Self::wait).
    pub fn start(&mut self) -> Result<()> {
        if self.state != State::Idle {
            return Err(misuse("persistent send started twice; wait for it first"));
        }
        let c = self.comm;
        if c.engine()
            .try_send_now(self.buf, c.world(self.dst), c.ctx, self.tag)
        {
            self.state = State::Finished;
            return Ok(());
        }
        let id = c.post_send(self.buf, self.dst, self.tag, false, self.scope)?;
        self.state = State::Posted(id);
        Ok(())
    }

    /// Waits for the started send to finish; the request is then idle and
    /// may be started again.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is not started; otherwise the
    /// send's errors, as [`Request::wait`](crate::Request::wait) reports
    /// them.
    pub fn wait(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => Err(misuse("wait on a persistent send that was not started")),
            State::Finished => Ok(()),
            State::Posted(id) => self.comm.wait_one(id, OpKind::Send).map(|_| ()),
        }
    }

    /// `true` (and the request is idle again) if the started send has
    /// finished, `false` if it is still pending; drives progress once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is not started; the send's error
    /// once it finished with one (the request is then idle). No timeout
    /// applies here.
    pub fn test(&mut self) -> Result<bool> {
        match self.state {
            State::Idle => Err(misuse("test on a persistent send that was not started")),
            State::Finished => {
                self.state = State::Idle;
                Ok(true)
            }
            State::Posted(id) => match self.comm.test_op(id) {
                None => Ok(false),
                Some(r) => {
                    self.state = State::Idle;
                    r.map(|_| true)
                }
            },
        }
    }

    /// Starts the send and waits for it: [`Comm::send`]'s blocking
    /// semantics, with the arguments checked once at binding.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is started already; otherwise those
    /// of [`Comm::send`] after its rank and tag checks.
    #[inline(always)]
    pub fn send(&mut self) -> Result<()> {
        if self.state != State::Idle {
            return Err(misuse("persistent send started twice; wait for it first"));
        }
        self.comm.send_valid_tag(self.buf, self.dst, self.tag)
    }

    /// The buffer, to rewrite between starts; `None` while started.
    pub fn buf_mut(&mut self) -> Option<&mut [u8]> {
        (self.state == State::Idle).then_some(&mut *self.buf)
    }

    /// The buffer.
    pub fn buf(&self) -> &[u8] {
        self.buf
    }

    /// Whether it is started and not yet waited for.
    pub fn is_active(&self) -> bool {
        self.state != State::Idle
    }
}

impl PersistentRecv<'_, '_> {
    /// Starts the receive (MPI's `MPI_Start`): it is posted now and takes
    /// the first matching message in MPI's order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is started already;
    /// [`Error::TooManyRequests`] if the operation table is full. The
    /// receive's own errors come from [`wait`](Self::wait).
    pub fn start(&mut self) -> Result<()> {
        if self.state != State::Idle {
            return Err(misuse(
                "persistent receive started twice; wait for it first",
            ));
        }
        let id = self
            .comm
            .post_recv(self.buf, self.src, self.tag, self.scope)?;
        self.state = State::Posted(id);
        Ok(())
    }

    /// Waits for the started receive; the request is then idle and its
    /// message readable through [`data`](Self::data). A message longer than
    /// the buffer fills it and fails with [`Error::Truncated`], as
    /// [`Comm::recv`] does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is not started; otherwise the
    /// receive's errors, as [`Request::wait`](crate::Request::wait) reports
    /// them ([`Error::Truncated`] included).
    pub fn wait(&mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Posted(id) => self.finished(self.comm.wait_one(id, OpKind::Recv)),
            _ => Err(misuse("wait on a persistent receive that was not started")),
        }
    }

    /// `Some(status)` (and the request is idle again) if the started
    /// receive has finished, `None` if it is still pending; drives progress
    /// once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is not started; the receive's error
    /// once it finished with one (the request is then idle). No timeout
    /// applies here.
    pub fn test(&mut self) -> Result<Option<Status>> {
        let State::Posted(id) = self.state else {
            return Err(misuse("test on a persistent receive that was not started"));
        };
        match self.comm.test_op(id) {
            None => Ok(None),
            Some(r) => {
                self.state = State::Idle;
                self.finished(r).map(Some)
            }
        }
    }

    /// Starts the receive and waits for it: [`Comm::recv`]'s blocking
    /// semantics (and its shortcut: with no receive posted ahead, the link
    /// is polled without recording an operation), with the arguments
    /// checked once at binding.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it is started already; otherwise those
    /// of [`Comm::recv`] after its rank and tag checks.
    #[inline(always)]
    pub fn recv(&mut self) -> Result<Status> {
        if self.state != State::Idle {
            return Err(misuse(
                "persistent receive started twice; wait for it first",
            ));
        }
        self.comm
            .recv_counted(self.buf, self.src, self.tag, &mut self.len)
    }

    /// Records how much of the buffer the last message filled.
    #[inline(always)]
    fn finished(&mut self, r: Result<Status>) -> Result<Status> {
        super::filled(r, &mut self.len)
    }

    /// The last message received (the first `len` bytes of the buffer);
    /// `None` while started.
    pub fn data(&self) -> Option<&[u8]> {
        (self.state == State::Idle).then(|| &self.buf[..self.len])
    }

    /// The whole buffer, to prepare between starts; `None` while started.
    pub fn buf_mut(&mut self) -> Option<&mut [u8]> {
        (self.state == State::Idle).then_some(&mut *self.buf)
    }

    /// Whether it is started and not yet waited for.
    pub fn is_active(&self) -> bool {
        self.state != State::Idle
    }
}
