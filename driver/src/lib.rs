//! # tandem-driver
//!
//! Transports, progress and the [`Comm`] API of tandem, over the
//! `no_std` protocol core in `tandem-core`. The crate is layered; each
//! module belongs to one layer and imports only the layers below it
//! (`tests/architecture.rs` checks the order below against the `crate::`
//! paths of every module; a name re-exported at the crate root counts as
//! pointing up):
//!
//! ```text
//! comm        Comm / Scope / Group / Request / CollRequest: the API, with
//!             no transport names
//! world       turns an environment or a thread plan into a running job:
//!             bootstrap (launcher detection, meeting by PMI-1, root or
//!             local socket, secret, parameter agreement, routing, the
//!             links to every peer), launch (tandem-run: local ranks,
//!             remote hosts via an exec command, the job file's creation)
//!             and the proxy thread
//! calibrate   which path a host's rendezvous payloads take (pulled
//!             single-copy or streamed), measured once by the creator of
//!             the host's job file and kept in it
//! coll        collectives: fixed schedules (ring, chain, recursive
//!             doubling, trees) run over progress's point-to-point
//!             operations in a context of their own; element types and
//!             reduction kernels
//! progress    drives core::proto for every transport: user buffers,
//!             post / take / withdraw, dispatch of the engine's actions,
//!             the flight recorder
//! transport   per peer: shm (line ring, eager cells, slot ring, CMA,
//!             pidfd) | tcp | rdma (over the tandem-fabric crate: the soft
//!             NIC, verbs)
//! job         the job's shared file: header, pid table, wait board and
//!             every channel's rings, created by world, used by transport
//!             and progress
//! sys         the operating-system calls that need unsafe
//! config      settings
//! error       the error type
//! ```
//!
//! ```
//! use tandem_driver::{Comm, Config, Layout};
//! // Two ranks as threads of this process (tests, examples); real jobs use
//! // `tandem-run -n 2 prog` + `Comm::from_env()`, or `Comm::local(2)`.
//! let out = Comm::threads(2, &Layout::default(), Config::default(), |comm| {
//!     let peer = 1 - comm.rank();
//!     let mut buf = vec![0u8; 1 << 20];
//!     if comm.rank() == 0 {
//!         buf.fill(7);
//!         comm.send(&buf, peer, 0)?;
//!     } else {
//!         let st = comm.recv(&mut buf, peer, 0)?;
//!         assert_eq!(st.len, 1 << 20);
//!     }
//!     Ok(buf[12345])
//! });
//! assert_eq!(*out[1].as_ref().unwrap(), 7);
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

pub mod calibrate;
pub mod coll;
mod comm;
pub mod config;
pub mod error;
pub mod job;
pub use world::launch;
mod progress;
mod sys;
pub mod transport;
mod world;

/// The `bytemuck` tandem's typed calls take [`bytemuck::Pod`] from (for
/// `#[derive(Pod, Zeroable)]` with the same version).
pub use bytemuck;
pub use coll::{reduce_local, Algorithm, Collective, Dtype, Element, ReduceOp};
pub use comm::{
    Agreeing, Agreement, CollRequest, Comm, Counters, Group, PersistentRecv, PersistentSend,
    RawCollRequest, RawRequest, Registered, Request, Scope, Tag, ANY_SOURCE, ANY_TAG,
    CONTEXT_WORDS,
};
pub use config::{
    CollConfig, Config, Layout, NetConfig, RdmaConfig, Rendezvous, TransportChoice, WaitPolicy,
    CELL_PIECE, DEFAULT_CELL_MIN, DEFAULT_DEADLOCK_AFTER, DEFAULT_EVENTS, DEFAULT_FAILURE_TIMEOUT,
};
pub use error::{Error, ErrorClass, IoError, OpKind, Result, Wait};
pub use half::{bf16, f16};
pub use progress::{Status, MARK_LEN, MAX_CONTEXTS, MAX_MESSAGE, TAG_UB};
pub use world::bootstrap::Links;
