//! # tandem-core
//!
//! The protocol core of tandem: `#![no_std]`, no `alloc`, no I/O, no clock.
//! Everything here is a plain data structure driven by method calls, so the
//! same code runs over a shared-memory mapping, a registered RDMA region, or
//! loom's model-checked memory (`--cfg loom`, see `tandem-verify`).
//!
//! * [`proto`]: the point-to-point protocol engine (MPI matching with
//!   wildcards, sequence numbers and hold-back, eager with credits,
//!   rendezvous, synchronous sends), sans-IO over caller-provided storage.
//! * [`slot_ring`]: NCCL "Simple"-style ring of `steps` slots with monotonic
//!   head/tail counters; the consumer's head is the credit return.
//! * [`line_ring`]: NCCL "LL"-style ring of 64-byte lines that each carry
//!   their own sequence flag, so a small message costs one cache line.
//! * [`agree`]: the order of a fault-tolerant agreement (ULFM's
//!   `MPIX_Comm_agree`) as a state machine.
//! * [`credit`]: the monotonic credit window later protocols build on.
//! * [`wire`]: the fixed-size wire header, validated on decode.
//! * [`lock`]: the test-and-set lock a user thread and a proxy thread share.
//! * [`sync`]: the only place atomics and shared cells come from.
//! * `harness` (core's tests, and the `harness` feature): engines joined by
//!   in-memory wires, the one driver of the engine for its unit tests, the
//!   fuzzer and the model check; test tooling that allocates.
//! * [`mutation`]: deliberately broken variants for `tandem-verify`'s
//!   mutation checks (compiled in only with the `mutants` feature).
//!
//! Memory the core does not own (a mapping shared with another process) is
//! reached through [`line_ring::LineRing`] and [`slot_ring::SlotRing`]
//! views, whose unsafe constructors check size and alignment once.
#![cfg_attr(not(loom), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod agree;
pub mod credit;
#[cfg(any(test, feature = "harness"))]
pub mod harness;
pub mod line_ring;
pub mod lock;
pub mod mutation;
pub mod proto;
pub mod rng;
pub mod slot_ring;
pub mod sync;
pub mod wire;

/// The size of a cache line as tandem lays memory out (x86-64, most Arm).
pub const CACHE_LINE: usize = 64;

/// Counters that two agents write are kept this far apart (two lines, so the
/// adjacent-line prefetcher does not drag a neighbour's counter along).
pub const COUNTER_PAD: usize = 128;
