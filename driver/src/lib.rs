//! # tandem-driver
//!
//! Transports, progress and the [`Comm`] API of tandem, over the
//! `no_std` protocol core in `tandem-core`.
//!
//! Today the transport is shared memory between processes on one machine:
//! per directed pair of ranks a line ring (small messages: one cache line
//! for up to 40 payload bytes) and a slot ring (large messages, cut into
//! chunks and pipelined). See [`engine`] for the protocol and [`shm`] for
//! the file's life cycle.
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

mod comm;
pub mod config;
pub mod engine;
pub mod error;
pub mod launch;
pub mod shm;

pub use comm::{Comm, Group, Request, Scope, Tag, ANY_SOURCE, ANY_TAG};
pub use config::{Config, Layout, WaitPolicy};
pub use engine::{Status, TAG_UB};
pub use error::{Error, OpKind, Result};
