//! Every deliberately broken variant of the protocol engine is caught by
//! the exhaustive model check (hand-written specs and generated programs) (`cargo test -p tandem-verify --features
//! mutants`). One test only: the mutant switch is process-wide.
#![cfg(all(not(loom), feature = "mutants"))]

use tandem_verify::model::{catch, check, enumerated_specs, random_specs, suite, PROTOCOL_MUTANTS};

const MAX_STATES: u64 = 5_000_000;

#[test]
fn every_protocol_mutant_is_caught_by_the_model_check() {
    let specs = suite();
    for s in &specs {
        let r = check(s, MAX_STATES);
        assert!(r.ok(), "correct engine fails {}: {:?}", s.name, r.violation);
    }
    // The newer mutants (cancel, withdraw, probe, peer death, credit
    // wrap) are caught by the generated programs.
    let mut all = specs.clone();
    all.extend(enumerated_specs(3));
    all.extend(random_specs(1, 100));
    for m in PROTOCOL_MUTANTS {
        let r = catch(m, &all, MAX_STATES).unwrap_or_else(|| panic!("{m:?} was not caught"));
        println!(
            "{m:?}: caught by \"{}\": {}",
            r.name,
            r.violation.unwrap_or_default()
        );
    }
}
