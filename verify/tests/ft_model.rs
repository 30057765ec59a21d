//! The fault-tolerance protocols' model checks, as a test: agreement
//! (`tandem_core::agree`) and revocation on 2 to 4 ranks, ranks crashing
//! at every step, hold every property (`tandem-verify` prints the
//! details).
#![cfg(not(loom))]

use tandem_verify::ft_model;

#[test]
fn agreement_and_revocation_hold_with_ranks_dying_at_every_step() {
    for r in ft_model::all(5_000_000) {
        println!("{}: {} states, {} terminal", r.name, r.states, r.terminals);
        assert!(r.ok(), "{}: {}", r.name, r.violation.unwrap_or_default());
    }
}
