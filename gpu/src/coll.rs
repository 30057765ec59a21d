//! Collectives on device buffers, staged: each rank's device data is
//! copied into pinned host memory, tandem's collective runs there (its
//! algorithms and its CPU reduction kernels, so the result is the one the
//! host collectives give, bit for bit), and the result is copied back.
//! Every rank must call with device buffers or every rank with host ones
//! for a given collective: they are the same collective on the wire.
//! (On-device reduction with NVRTC kernels is not built yet.)

use crate::device::{DeviceBuf, Gpu, Staging};
use crate::{GpuError, Result};
use tandem_driver::bytemuck;
use tandem_driver::{Comm, Element, ReduceOp};

/// The elements of type `T` in `buf`.
fn elements<T: Element>(what: &str, buf: &DeviceBuf) -> Result<usize> {
    let size = std::mem::size_of::<T>();
    if buf.len() % size != 0 {
        return Err(GpuError::InvalidArgument(format!(
            "{what}: a device buffer of {} bytes is not a whole number of {}-byte elements",
            buf.len(),
            size
        )));
    }
    Ok(buf.len() / size)
}

/// A buffer's data in pinned host memory, returned to the pool on drop.
struct Host<'g> {
    gpu: &'g Gpu,
    st: Option<Staging>,
    len: usize,
}

impl<'g> Host<'g> {
    /// Room for `len` bytes.
    fn new(gpu: &'g Gpu, len: usize) -> Result<Self> {
        Ok(Self {
            gpu,
            st: Some(gpu.staging(len)?),
            len,
        })
    }

    /// `buf`'s bytes, copied down.
    fn of(gpu: &'g Gpu, buf: &DeviceBuf) -> Result<Self> {
        let mut h = Self::new(gpu, buf.len())?;
        if !buf.is_empty() {
            let st = h.staging();
            gpu.reading(buf, 0, |src| {
                st.start_download(gpu.stream(), src, buf.len())
            })?;
        }
        Ok(h)
    }

    fn staging(&mut self) -> &mut Staging {
        self.st.as_mut().expect("held until drop")
    }

    /// The data as elements of `T` (waits for the copy down).
    fn elems<T: Element>(&mut self) -> Result<&mut [T]> {
        let n = self.len;
        let bytes = self.staging().bytes(n)?;
        bytemuck::try_cast_slice_mut(bytes)
            .map_err(|e| GpuError::InvalidArgument(format!("staging memory as elements: {e:?}")))
    }

    /// Copies the data up into `buf` and waits.
    fn to(&mut self, buf: &mut DeviceBuf) -> Result<()> {
        let n = self.len.min(buf.len());
        if n > 0 {
            let gpu = self.gpu;
            let st = self.staging();
            gpu.writing(buf, 0, |dst| st.start_upload(gpu.stream(), dst, n))?;
        }
        self.staging().wait()
    }
}

impl Drop for Host<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.st.take() {
            self.gpu.give_back([s]);
        }
    }
}

/// The shape most collectives share: `send` and `recv` of whole `T`s
/// staged down, `f` run on the host copies, the result staged up.
fn staged<T: Element>(
    what: &str,
    gpu: &Gpu,
    send: &DeviceBuf,
    recv: &mut DeviceBuf,
    f: impl FnOnce(&[T], &mut [T]) -> tandem_driver::Result<()>,
) -> Result<()> {
    elements::<T>(what, send)?;
    elements::<T>(what, recv)?;
    let mut s = Host::of(gpu, send)?;
    let mut r = Host::new(gpu, recv.len())?;
    f(s.elems()?, r.elems()?)?;
    r.to(recv)
}

/// Every rank's `send` combined element by element with `op` into every rank's
/// `recv` (device buffers of `T`s; [`Comm::allreduce`]).
///
/// # Errors
/// As [`Comm::allreduce`]; [`GpuError::InvalidArgument`] for a buffer
/// that is not whole `T`s; [`GpuError::Cuda`] if a copy fails.
pub fn allreduce<T: Element>(
    comm: &Comm,
    gpu: &Gpu,
    send: &DeviceBuf,
    recv: &mut DeviceBuf,
    op: ReduceOp,
) -> Result<()> {
    staged::<T>("allreduce", gpu, send, recv, |s, r| {
        comm.allreduce(s, r, op)
    })
}

/// [`allreduce`] in place.
///
/// # Errors
/// As [`allreduce`].
pub fn allreduce_in_place<T: Element>(
    comm: &Comm,
    gpu: &Gpu,
    buf: &mut DeviceBuf,
    op: ReduceOp,
) -> Result<()> {
    elements::<T>("allreduce", buf)?;
    let mut h = Host::of(gpu, buf)?;
    comm.allreduce_in_place::<T>(h.elems()?, op)?;
    h.to(buf)
}

/// Every rank's `send` combined with `op` into `root`'s `recv`
/// ([`Comm::reduce`]; elsewhere `recv` is not touched and may be empty).
///
/// # Errors
/// As [`Comm::reduce`] and [`allreduce`].
pub fn reduce<T: Element>(
    comm: &Comm,
    gpu: &Gpu,
    send: &DeviceBuf,
    recv: &mut DeviceBuf,
    op: ReduceOp,
    root: usize,
) -> Result<()> {
    elements::<T>("reduce", send)?;
    elements::<T>("reduce", recv)?;
    let mut s = Host::of(gpu, send)?;
    let mut r = Host::new(gpu, recv.len())?;
    comm.reduce::<T>(s.elems()?, r.elems()?, op, root)?;
    if comm.rank() == root {
        r.to(recv)?;
    }
    Ok(())
}

/// `root`'s `buf` into every rank's `buf` ([`Comm::broadcast`]).
///
/// # Errors
/// As [`Comm::broadcast`] and [`allreduce`].
pub fn broadcast<T: Element>(
    comm: &Comm,
    gpu: &Gpu,
    buf: &mut DeviceBuf,
    root: usize,
) -> Result<()> {
    elements::<T>("broadcast", buf)?;
    let mut h = if comm.rank() == root {
        Host::of(gpu, buf)?
    } else {
        Host::new(gpu, buf.len())?
    };
    comm.broadcast::<T>(h.elems()?, root)?;
    if comm.rank() != root {
        h.to(buf)?;
    }
    Ok(())
}

/// Every rank's `send` into block `rank` of every rank's `recv`
/// ([`Comm::allgather`]).
///
/// # Errors
/// As [`Comm::allgather`] and [`allreduce`].
pub fn allgather<T: Element>(
    comm: &Comm,
    gpu: &Gpu,
    send: &DeviceBuf,
    recv: &mut DeviceBuf,
) -> Result<()> {
    staged::<T>("allgather", gpu, send, recv, |s, r| comm.allgather(s, r))
}

/// `send`'s blocks combined with `op`, block `rank` into `recv`
/// ([`Comm::reduce_scatter`]).
///
/// # Errors
/// As [`Comm::reduce_scatter`] and [`allreduce`].
pub fn reduce_scatter<T: Element>(
    comm: &Comm,
    gpu: &Gpu,
    send: &DeviceBuf,
    recv: &mut DeviceBuf,
    op: ReduceOp,
) -> Result<()> {
    staged::<T>("reduce_scatter", gpu, send, recv, |s, r| {
        comm.reduce_scatter(s, r, op)
    })
}

/// Block `j` of `send` to rank `j`, into block `i` of its `recv` from rank
/// `i` ([`Comm::alltoall`]).
///
/// # Errors
/// As [`Comm::alltoall`] and [`allreduce`].
pub fn alltoall<T: Element>(
    comm: &Comm,
    gpu: &Gpu,
    send: &DeviceBuf,
    recv: &mut DeviceBuf,
) -> Result<()> {
    staged::<T>("alltoall", gpu, send, recv, |s, r| comm.alltoall(s, r))
}
