//! The exhaustive model check of the protocol engine, as a test: every
//! spec of the suite holds every property (`tandem-verify` prints the
//! details).
#![cfg(not(loom))]

use tandem_verify::model::{check, suite};

#[test]
fn every_spec_holds_every_property() {
    for s in suite() {
        let r = check(&s, 5_000_000);
        println!(
            "{}: {} states, {} transitions, {:.2?}",
            r.name, r.states, r.transitions, r.elapsed
        );
        assert!(r.ok(), "{}: {:?}", r.name, r.violation);
    }
}
