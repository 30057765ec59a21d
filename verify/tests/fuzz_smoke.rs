//! The fuzz targets on a fixed set of pseudo-random inputs (the time-boxed
//! runs are `tandem-fuzz`, from `scripts/verify.sh`).
#![cfg(not(loom))]

use tandem_verify::fuzz;

fn inputs(n: usize, max: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut s = 0x243f_6a88_85a3_08d3u64;
    (0..n).map(move |_| {
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let len = (next() as usize) % max;
        (0..len).map(|_| next() as u8).collect()
    })
}

#[test]
fn header_target_holds_on_fixed_inputs() {
    for (i, b) in inputs(200_000, 128).enumerate() {
        fuzz::header(&b).unwrap_or_else(|e| panic!("input {i}: {e}"));
    }
}

#[test]
fn engine_target_holds_on_fixed_inputs() {
    for (i, b) in inputs(3_000, 4096).enumerate() {
        fuzz::engine(&b).unwrap_or_else(|e| panic!("input {i}: {e}"));
    }
}
