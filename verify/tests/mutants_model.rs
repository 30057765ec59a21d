//! Every deliberately broken variant of the protocol engine is caught by
//! the exhaustive model check (`cargo test -p tandem-verify --features
//! mutants`). One test only: the mutant switch is process-wide.
#![cfg(all(not(loom), feature = "mutants"))]

use tandem_core::mutation::{set, Mutant};
use tandem_verify::model::{check, suite};

const MAX_STATES: u64 = 5_000_000;

#[test]
fn every_protocol_mutant_is_caught_by_the_model_check() {
    let specs = suite();
    for s in &specs {
        let r = check(s, MAX_STATES);
        assert!(r.ok(), "correct engine fails {}: {:?}", s.name, r.violation);
    }
    for m in [
        Mutant::SkipCreditCheck,
        Mutant::SeqWrap,
        Mutant::HoldBackBypass,
        Mutant::CreditReturnLost,
        Mutant::FastRecvSeqStuck,
    ] {
        set(Some(m));
        let caught = specs
            .iter()
            .find_map(|s| check(s, MAX_STATES).violation.map(|v| (s.name.clone(), v)));
        set(None);
        let (spec, why) = caught.unwrap_or_else(|| panic!("{m:?} was not caught"));
        println!("{m:?}: caught by \"{spec}\": {why}");
    }
}
