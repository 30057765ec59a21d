//! `tandem-verify`: runs the exhaustive model check of the protocol engine
//! over every spec of [`tandem_verify::model::suite`] and prints what was
//! explored and which properties held. Built with `--features mutants`, it
//! then switches on each deliberately broken variant of the protocol engine
//! and shows which check catches it (`--no-mutants` skips that part). The
//! loom models of the lock-free structures run separately, under
//! `--cfg loom` (see `scripts/verify.sh`, which runs both).
//!
//! Exits non-zero if a property fails or a broken variant goes unnoticed.

#[cfg(loom)]
fn main() {
    eprintln!("tandem-verify: build without --cfg loom (the loom models run with cargo test)");
}

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    real::main()
}

#[cfg(not(loom))]
mod real {
    use std::process::ExitCode;
    use std::time::Instant;
    use tandem_verify::model::{
        check, enumerated_specs, program_text, random_specs, suite, Report,
    };

    /// No spec comes near this; a run that does means the model blew up.
    const MAX_STATES: u64 = 5_000_000;

    fn line(r: &Report) -> String {
        let verdict = match (&r.violation, &r.deadlock) {
            (Some(v), _) => format!("VIOLATION: {v}"),
            (None, Some(d)) => format!("deadlock found as expected: {d}"),
            (None, None) => "all properties held".to_string(),
        };
        format!(
            "  {:<58} {:>9} {:>10} {:>7} {:>8.2?}  {verdict}",
            r.name, r.states, r.transitions, r.terminals, r.elapsed
        )
    }

    pub fn main() -> ExitCode {
        let mutants = !std::env::args().any(|a| a == "--no-mutants");
        let start = Instant::now();
        println!("tandem-verify: exhaustive model check of tandem_core::proto::Engine");
        println!(
            "  {:<58} {:>9} {:>10} {:>7} {:>8}  result",
            "spec", "states", "transitions", "ends", "time"
        );
        let specs = suite();
        let mut failed = 0;
        let (mut states, mut transitions) = (0, 0);
        for s in &specs {
            let r = check(s, MAX_STATES);
            println!("{}", line(&r));
            states += r.states;
            transitions += r.transitions;
            failed += !r.ok() as usize;
        }
        println!(
            "  total: {} specs, {states} states, {transitions} transitions, {:.2?}; properties: \
             receiver never overrun (credits, entries), control messages within the reserve, engine audit (no entry or buffer reused while held), \
             no pull from a finished send, byte-exact delivery, exactly once, non-overtaking, \
             termination (deadlocks only where expected, named)",
            specs.len(),
            start.elapsed()
        );
        failed += generated();
        failed += fault_tolerance();
        if mutants {
            // The hand-written specs first, then the generated programs.
            let mut all = specs.clone();
            all.extend(enumerated_specs(arg("--steps", 3) as usize));
            all.extend(random_specs(
                arg("--seed", 1),
                arg("--random", 600) as usize,
            ));
            failed += mutation_table(&all);
        }
        if failed > 0 {
            println!("tandem-verify: {failed} FAILED");
            return ExitCode::FAILURE;
        }
        println!(
            "tandem-verify: all checks passed in {:.2?}",
            start.elapsed()
        );
        ExitCode::SUCCESS
    }

    /// The fault-tolerance protocols' model checks (agreement, revocation;
    /// ranks crashing at every step); returns the number that failed.
    fn fault_tolerance() -> usize {
        use tandem_verify::ft_model;
        println!("fault tolerance: agreement (tandem_core::agree) and revocation, ranks crashing at every step:");
        let mut failed = 0;
        for r in ft_model::all(MAX_STATES) {
            println!(
                "  {:<24} {:>9} states {:>7} ends  {}",
                r.name,
                r.states,
                r.terminals,
                r.violation.as_deref().unwrap_or("ok")
            );
            failed += !r.ok() as usize;
        }
        println!(
            "  properties: every survivor decides, all decide the same flags and failed set, \
             every survivor's flags counted, only crashed ranks failed; a revocation seen by one survivor is seen by all"
        );
        failed
    }

    /// The value after `--name` on the command line, or `default`.
    fn arg(name: &str, default: u64) -> u64 {
        let args: Vec<String> = std::env::args().collect();
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| {
                v.parse().unwrap_or_else(|_| {
                    eprintln!("tandem-verify: {name} wants a number, got {v:?}");
                    std::process::exit(2)
                })
            })
    }

    /// Checks generated programs: every program of up to `--steps` (3)
    /// operations over the small grammar, and `--random` (600) random ones
    /// from `--seed` (1); returns the number that failed (the first few
    /// are printed with their programs).
    fn generated() -> usize {
        let steps = arg("--steps", 3) as usize;
        let count = arg("--random", 600) as usize;
        let seed = arg("--seed", 1);
        let mut failed = 0;
        for (what, specs) in [
            (
                format!(
                    "checks of every program of up to {steps} operations (FIFO and reordering)"
                ),
                enumerated_specs(steps),
            ),
            (
                format!("random programs, seed {seed}"),
                random_specs(seed, count),
            ),
        ] {
            let start = Instant::now();
            let (mut states, mut transitions, mut worst) = (0u64, 0u64, 0u64);
            let mut bad = 0;
            for s in &specs {
                let r = check(s, MAX_STATES);
                states += r.states;
                transitions += r.transitions;
                worst = worst.max(r.states);
                if let Some(v) = &r.violation {
                    bad += 1;
                    if bad <= 3 {
                        println!(
                            "  {}: VIOLATION: {v}\n    program: {}",
                            s.name,
                            program_text(s)
                        );
                    }
                }
            }
            println!(
                "  generated: {} {what}: {states} states, {transitions} transitions (largest {worst}), {bad} violations, {:.2?}",
                specs.len(),
                start.elapsed()
            );
            failed += bad;
        }
        failed
    }

    #[cfg(feature = "mutants")]
    fn mutation_table(specs: &[tandem_verify::model::Spec]) -> usize {
        println!("mutation check (protocol engine mutants; ring and lock mutants: loom, see scripts/verify.sh):");
        let mut survived = 0;
        for m in tandem_verify::model::PROTOCOL_MUTANTS {
            let caught = tandem_verify::model::catch(m, specs, MAX_STATES)
                .map(|r| (r.name, r.violation.unwrap_or_default(), r.states));
            match caught {
                Some((spec, v, states)) => {
                    println!("  {m:?}: CAUGHT by \"{spec}\" after {states} states: {v}")
                }
                None => {
                    survived += 1;
                    println!("  {m:?}: NOT CAUGHT")
                }
            }
        }
        for m in tandem_verify::ft_model::AGREE_MUTANTS {
            match tandem_verify::ft_model::catch(m, MAX_STATES) {
                Some(r) => println!(
                    "  {m:?}: CAUGHT by \"{}\" after {} states: {}",
                    r.name,
                    r.states,
                    r.violation.unwrap_or_default().lines().next().unwrap_or("")
                ),
                None => {
                    survived += 1;
                    println!("  {m:?}: NOT CAUGHT")
                }
            }
        }
        survived
    }

    #[cfg(not(feature = "mutants"))]
    fn mutation_table(_: &[tandem_verify::model::Spec]) -> usize {
        println!("mutation check skipped: build with --features mutants");
        0
    }
}
