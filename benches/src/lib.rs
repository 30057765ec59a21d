//! Shared pieces of tandem's benchmarks: the machine's raw limits measured
//! in the same run as tandem itself, statistics and size parsing, plots
//! of a sweep.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod c2c;
pub mod collperf;
pub mod plot;
pub mod stats;
pub mod tcp_floor;
