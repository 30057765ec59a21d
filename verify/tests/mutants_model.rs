//! Every deliberately broken variant of the protocol engine is caught by
//! the exhaustive model check (`cargo test -p tandem-verify --features
//! mutants`). One test only: the mutant switch is process-wide.
#![cfg(all(not(loom), feature = "mutants"))]

use tandem_verify::model::{catch, check, suite, PROTOCOL_MUTANTS};

const MAX_STATES: u64 = 5_000_000;

#[test]
fn every_protocol_mutant_is_caught_by_the_model_check() {
    let specs = suite();
    for s in &specs {
        let r = check(s, MAX_STATES);
        assert!(r.ok(), "correct engine fails {}: {:?}", s.name, r.violation);
    }
    for m in PROTOCOL_MUTANTS {
        let r = catch(m, &specs, MAX_STATES).unwrap_or_else(|| panic!("{m:?} was not caught"));
        println!(
            "{m:?}: caught by \"{}\": {}",
            r.name,
            r.violation.unwrap_or_default()
        );
    }
}
