//! Device buffers sent and received: through pinned staging, pipelined by
//! chunks ([`crate::pipeline`]), the plans executed step by step. The
//! execution is written over [`Copies`], what moves a chunk between the
//! buffer and staging: the device's copies here, plain memory in the
//! tests, so the message protocol (chunks, the short last one, wildcards,
//! truncation) is tested between real ranks on the CPU.

use crate::device::{DeviceBuf, Gpu, Staging};
use crate::path::{choose, Limits, Peer};
use crate::pipeline::{self, buffer, range, Step};
use crate::{GpuError, Result};
use tandem_driver::{Comm, Error, Status, Tag};

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
    /// The first `n` bytes of `b`, for the CPU (after its copies).
    fn bytes<'b>(&self, b: &'b mut Self::Buf, n: usize) -> Result<&'b mut [u8]>;
}

/// Sends `len` bytes through `c` in messages of `chunk` bytes (the last
/// shorter) to `dst` with `tag`.
pub(crate) fn send_chunks<C: Copies>(
    comm: &Comm,
    c: &C,
    len: usize,
    chunk: usize,
    dst: usize,
    tag: Tag,
) -> Result<()> {
    let m = pipeline::messages(len, chunk);
    let mut st = c.pair(chunk)?;
    let out = (|| {
        for step in pipeline::sender_steps(m) {
            match step {
                Step::StartCopy(k) => {
                    let r = range(len, chunk, k);
                    if !r.is_empty() {
                        c.down(&mut st[buffer(k)], r.start, r.len())?;
                    }
                }
                Step::WaitCopy(k) => c.wait(&st[buffer(k)])?,
                Step::Send(k) => {
                    let n = range(len, chunk, k).len();
                    let bytes = c.bytes(&mut st[buffer(k)], n)?;
                    comm.send(bytes, dst, tag)?;
                }
                other => unreachable!("a receiver's step in a sender's plan: {other:?}"),
            }
        }
        Ok(())
    })();
    c.put_back(st);
    out
}

/// Receives what [`send_chunks`] sent, into a buffer of `cap` bytes
/// through `c`.
pub(crate) fn recv_chunks<C: Copies>(
    comm: &Comm,
    c: &mut C,
    cap: usize,
    chunk: usize,
    src: usize,
    tag: Tag,
) -> Result<Status> {
    let mut st = c.pair(chunk)?;
    let out = (|| {
        let (mut from, mut with) = (src, tag);
        let mut total = 0usize;
        let mut k = 0usize;
        loop {
            let mut got = 0usize;
            for step in pipeline::receiver_steps_for(k) {
                match step {
                    Step::WaitUpload(j) => c.wait(&st[buffer(j)])?,
                    Step::Recv(k) => {
                        let bytes = c.bytes(&mut st[buffer(k)], chunk)?;
                        let s = comm.recv(bytes, from, with).map_err(|e| match e {
                            Error::Truncated { needed, .. } => GpuError::InvalidArgument(format!(
                                "a chunk of {needed} bytes from rank {from}, longer than this \
                                 rank's {chunk}-byte chunk (ranks must stage alike)"
                            )),
                            e => GpuError::Tandem(e),
                        })?;
                        // The rest of the message comes from the same rank,
                        // with the same tag.
                        (from, with) = (s.source, s.tag);
                        got = s.len;
                    }
                    Step::StartUpload(_) => {
                        let fits = got.min(cap.saturating_sub(total));
                        if fits > 0 {
                            c.up(&mut st[buffer(k)], total, fits)?;
                        }
                        total += got;
                    }
                    other => unreachable!("a sender's step in a receiver's plan: {other:?}"),
                }
            }
            if got < chunk {
                break;
            }
            k += 1;
        }
        for b in st.iter() {
            c.wait(b)?;
        }
        if total > cap {
            return Err(GpuError::Tandem(Error::Truncated {
                needed: total,
                got: cap,
                source: from,
                tag: with,
            }));
        }
        Ok(Status {
            source: from,
            tag: with,
            len: total,
        })
    })();
    c.put_back(st);
    out
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

    fn bytes<'b>(&self, b: &'b mut Staging, n: usize) -> Result<&'b mut [u8]> {
        b.bytes(n)
    }
}

/// Sends the whole of `buf` (device memory of `gpu`) to rank `dst` with
/// `tag`: staged through pinned host memory, in chunks whose device→host
/// copies overlap the sends. Returns once `buf` may be reused. A receiver
/// takes it with [`recv`]; messages of device buffers with the same source
/// and tag must not be sent from several threads at once (their chunks
/// would interleave).
///
/// # Errors
/// [`GpuError::Tandem`] as [`Comm::send`] fails; [`GpuError::Cuda`] if a
/// copy fails.
pub fn send(comm: &Comm, gpu: &Gpu, buf: &DeviceBuf, dst: usize, tag: Tag) -> Result<()> {
    let l = Limits::default();
    if say_paths() {
        eprintln!(
            "tandem-gpu[{}]: {} B to rank {dst}: {}",
            comm.rank(),
            buf.len(),
            choose(peer_of(comm, dst), buf.len(), &l)
        );
    }
    let c = Device {
        gpu,
        from: Some(buf),
        into: None,
    };
    send_chunks(comm, &c, buf.len(), l.chunk, dst, tag)
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
    let cap = buf.len();
    let mut c = Device {
        gpu,
        from: None,
        into: Some(buf),
    };
    recv_chunks(comm, &mut c, cap, Limits::default().chunk, src, tag)
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
                    let h = Host::sending(data(len, 1));
                    send_chunks(c, &h, len, CHUNK, 1, 4)?;
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
                    let h = Host::sending(data(50, r as u8));
                    send_chunks(c, &h, 50, CHUNK, 2, 10 + r as u32)?;
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
                    let h = Host::sending(data(len, salt));
                    send_chunks(c, &h, len, CHUNK, 1, 3)?;
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
                let h = Host::sending(data(64, 0));
                send_chunks(c, &h, 64, 32, 1, 1)?;
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
                let h = Host::sending(data(4 * CHUNK + 5, 3));
                let r = send_chunks(&c, &h, 4 * CHUNK + 5, CHUNK, 1, 2);
                Ok(Some((r.map_err(|e| e.to_string()), t.elapsed())))
            },
        );
        let mut out = out.into_iter();
        let (r, took) = out.next().unwrap().unwrap().expect("rank 0 reports");
        let e = r.expect_err("the receiver is gone");
        assert!(e.contains("rank 1"), "{e}");
        assert!(took < std::time::Duration::from_secs(20), "{took:?}");
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
                    send_chunks(c, p, len, CHUNK, peer, 7)?;
                    recv_chunks(c, p, len, CHUNK, peer, 7)?;
                } else {
                    recv_chunks(c, p, len, CHUNK, peer, 7)?;
                    send_chunks(c, p, len, CHUNK, peer, 7)?;
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
