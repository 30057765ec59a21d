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

/// Generated programs (every program of up to three operations over the
/// grammar, and 100 random ones) hold every property; `tandem-verify`
/// checks 600 random programs.
#[test]
fn generated_programs_hold_every_property() {
    use tandem_verify::model::{enumerated_specs, program_text, random_specs};
    let mut specs = enumerated_specs(3);
    specs.extend(random_specs(7, 100));
    let mut states = 0;
    for s in &specs {
        let r = check(s, 5_000_000);
        states += r.states;
        assert!(
            r.ok(),
            "{}: {:?}\n  program: {}",
            s.name,
            r.violation,
            program_text(s)
        );
    }
    println!("{} generated programs, {states} states", specs.len());
}

/// The random programs use every kind of step the model has, so the
/// transitions for cancel, withdraw, probe and death are all exercised.
#[test]
fn random_programs_use_every_step_kind() {
    use tandem_verify::model::{random_specs, Step};
    let specs = random_specs(1, 600);
    let count = |f: &dyn Fn(&Step) -> bool| {
        specs
            .iter()
            .filter(|s| s.programs.iter().flatten().any(f))
            .count()
    };
    let kinds = [
        ("cancel", count(&|s| matches!(s, Step::Cancel { .. }))),
        ("withdraw", count(&|s| matches!(s, Step::Abandon { .. }))),
        ("probe", count(&|s| matches!(s, Step::Probe { .. }))),
        ("death", count(&|s| matches!(s, Step::Die))),
        (
            "context 1",
            count(&|s| matches!(s, Step::Send { ctx: 1, .. })),
        ),
        (
            "3 ranks",
            specs.iter().filter(|s| s.programs.len() == 3).count(),
        ),
        ("reordering", specs.iter().filter(|s| s.reorder).count()),
        (
            "near 2^16",
            specs.iter().filter(|s| s.seq_start > 60000).count(),
        ),
        ("credits 3", specs.iter().filter(|s| s.credits == 3).count()),
    ];
    for (what, n) in kinds {
        assert!(n >= 20, "only {n} of 600 random programs have a {what}");
    }
}
