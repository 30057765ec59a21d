//! Every deliberately broken variant of the agreement machine is caught
//! by the fault-tolerance model check (`cargo test -p tandem-verify
//! --features mutants`). One test only: the mutant switch is process-wide.
#![cfg(all(not(loom), feature = "mutants"))]

use tandem_verify::ft_model::{all, catch, AGREE_MUTANTS};

#[test]
fn every_agreement_mutant_is_caught() {
    for r in all(5_000_000) {
        assert!(
            r.ok(),
            "correct machine fails {}: {:?}",
            r.name,
            r.violation
        );
    }
    for m in AGREE_MUTANTS {
        let r = catch(m, 5_000_000).unwrap_or_else(|| panic!("{m:?} was not caught"));
        println!(
            "{m:?}: caught by \"{}\": {}",
            r.name,
            r.violation.unwrap_or_default()
        );
    }
}
