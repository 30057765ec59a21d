//! tandem benches
