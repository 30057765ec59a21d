//! Device buffers sent and received: through pinned staging, pipelined by
//! chunks ([`crate::pipeline`]), the plans executed step by step.

use crate::device::{DeviceBuf, Gpu};
use crate::path::{choose, Limits, Peer};
use crate::pipeline::{self, buffer, range, Step};
use crate::{GpuError, Result};
use tandem_driver::{Comm, Error, Tag};

/// Whether `TANDEM_DEBUG` asks for the paths to be printed.
/// (Read once: no allocation per message.)
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
    let len = buf.len();
    if say_paths() {
        eprintln!(
            "tandem-gpu[{}]: {len} B to rank {dst}: {}",
            comm.rank(),
            choose(peer_of(comm, dst), len, &l)
        );
    }
    let chunk = l.chunk;
    let m = pipeline::messages(len, chunk);
    let mut st = gpu.staging_pair(chunk)?;
    let out = (|| {
        for step in pipeline::sender_steps(m) {
            match step {
                Step::StartCopy(k) => {
                    let r = range(len, chunk, k);
                    if !r.is_empty() {
                        let src = gpu.addr(buf, r.start);
                        st[buffer(k)].start_download(gpu.stream(), src, r.len())?;
                    }
                }
                Step::WaitCopy(k) => st[buffer(k)].wait()?,
                Step::Send(k) => {
                    let n = range(len, chunk, k).len();
                    let bytes = st[buffer(k)].bytes(n)?;
                    comm.send(bytes, dst, tag)?;
                }
                other => unreachable!("a receiver's step in a sender's plan: {other:?}"),
            }
        }
        Ok(())
    })();
    gpu.give_back(st);
    out
}

/// Receives a device buffer's message from rank `src` (or
/// [`tandem_driver::ANY_SOURCE`]) with `tag` (or [`tandem_driver::ANY_TAG`])
/// into `buf`, as [`send`]
/// sent it: the chunks arrive into pinned staging and their host→device
/// copies overlap the arrival of the next. Returns the message's length
/// and its source and tag; `buf` holds the data when it returns.
///
/// # Errors
/// [`GpuError::Tandem`] with [`Error::Truncated`] for a message longer
/// than `buf` (every chunk is still taken, the part that fits is in
/// `buf`), or as [`Comm::recv`] fails; [`GpuError::InvalidArgument`] for a
/// chunk longer than this rank's (a sender with another chunk size);
/// [`GpuError::Cuda`] if a copy fails.
pub fn recv(
    comm: &Comm,
    gpu: &Gpu,
    buf: &mut DeviceBuf,
    src: usize,
    tag: Tag,
) -> Result<tandem_driver::Status> {
    let chunk = Limits::default().chunk;
    let cap = buf.len();
    let mut st = gpu.staging_pair(chunk)?;
    let out = (|| {
        let (mut from, mut with) = (src, tag);
        let mut total = 0usize;
        let mut k = 0usize;
        loop {
            let mut last = false;
            let mut got = 0usize;
            for step in pipeline::receiver_steps_for(k) {
                match step {
                    Step::WaitUpload(j) => st[buffer(j)].wait()?,
                    Step::Recv(k) => {
                        let bytes = st[buffer(k)].bytes(chunk)?;
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
                        last = got < chunk;
                    }
                    Step::StartUpload(_) => {
                        let fits = got.min(cap.saturating_sub(total));
                        if fits > 0 {
                            let dst = gpu.addr(buf, total);
                            st[buffer(k)].start_upload(gpu.stream(), dst, fits)?;
                        }
                        total += got;
                    }
                    other => unreachable!("a sender's step in a receiver's plan: {other:?}"),
                }
            }
            if last {
                break;
            }
            k += 1;
        }
        for s in st.iter() {
            s.wait()?;
        }
        if total > cap {
            return Err(GpuError::Tandem(Error::Truncated {
                needed: total,
                got: cap,
                source: from,
                tag: with,
            }));
        }
        Ok(tandem_driver::Status {
            source: from,
            tag: with,
            len: total,
        })
    })();
    gpu.give_back(st);
    out
}
