//! Device memory in tandem's calls, the NCCL way, on [`cudarc`].
//!
//! What works on every machine, CUDA or not, and is tested on the CPU:
//! - [`probe()`]: what the machine offers (the driver library, its version,
//!   devices, NVRTC), as a clear [`GpuError::NoGpu`] naming what is missing
//!   where something is (never a panic: the libraries are looked for before
//!   cudarc touches them);
//! - [`path`]: which path a message between device buffers takes, by peer
//!   and size;
//! - [`pipeline`]: the staging pipeline's plan (device→host copy of chunk
//!   `k + 1` overlapping the network send of chunk `k`, through two pinned
//!   buffers);
//! - [`ipc`]: the cache of CUDA IPC handles, invalidated when a buffer is
//!   freed;
//! - [`stream`]: the protocol of stream-ordered operations (the stream
//!   held at a flag until tandem has moved the data), as a state machine;
//! - [`kernels`]: the reduction kernels' CUDA C source, which the tests
//!   build with the host's C compiler and check against tandem's CPU
//!   kernels; and the message protocol of [`send`] and [`recv`], run
//!   between real ranks with plain memory in place of the device copies.
//!
//! What needs a GPU ([`Gpu`], [`DeviceBuf`], [`send`], [`recv`], their
//! non-blocking and persistent forms in a [`scope`] ([`Scope::isend`],
//! [`Scope::irecv`], [`Scope::send_init`]), [`coll`], [`Gpu::reduce`], [`flags`]): device
//! buffers sent and received through pinned host staging, pipelined by
//! chunks (the message protocol, blocking and not, is tested on the CPU
//! between real ranks with plain memory for the copies); collectives on device
//! buffers staged through host memory; the kernels compiled by NVRTC; the
//! flag-polling handshakes. Built and tested without a GPU so far: see
//! README, "GPU buffers", for what has run where.

pub mod coll;
/// Counting allocations in the tests (the same file serves
/// `tandem-gpu-check`).
#[cfg(test)]
mod counting;
pub mod flags;
pub mod ipc;
pub mod kernels;
pub mod path;
pub mod pipeline;
mod probe;
pub mod stream;

mod device;
mod p2p;

pub use device::{DeviceBuf, Gpu};
pub use p2p::{recv, scope, send, Bind, Handle, Scope};
pub use probe::{probe, Found};

/// What can go wrong with device memory.
#[derive(Debug)]
pub enum GpuError {
    /// No GPU can be used here: `missing` says what (the driver library,
    /// a device, NVRTC) and where it was looked for.
    NoGpu {
        /// What is missing.
        missing: String,
    },
    /// A CUDA call failed.
    Cuda {
        /// What was being done.
        what: String,
        /// The driver's error.
        error: String,
    },
    /// An argument tandem cannot use (a buffer too small, a length that
    /// does not match).
    InvalidArgument(String),
    /// The message layer failed.
    Tandem(tandem_driver::Error),
}

impl std::fmt::Display for GpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoGpu { missing } => write!(f, "no GPU: {missing}"),
            Self::Cuda { what, error } => write!(f, "CUDA failed {what}: {error}"),
            Self::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Self::Tandem(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for GpuError {}

impl From<tandem_driver::Error> for GpuError {
    fn from(e: tandem_driver::Error) -> Self {
        Self::Tandem(e)
    }
}

/// `Result` with [`GpuError`].
pub type Result<T> = std::result::Result<T, GpuError>;

/// A CUDA error while doing `what`. Nothing is allocated unless the call
/// failed (the steady state of a transfer makes no allocation).
pub(crate) fn cuda_err(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError {
    cuda_err_at(move || what.to_string())
}

/// [`cuda_err`] with a description built (by `what`) only if the call
/// failed.
pub(crate) fn cuda_err_at(
    what: impl FnOnce() -> String,
) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Cuda {
        what: what(),
        error: format!("{e:?}"),
    }
}
