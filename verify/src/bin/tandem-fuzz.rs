//! `tandem-fuzz`: runs the fuzz targets of `tandem_verify::fuzz` on
//! pseudo-random inputs for a time box, on stable Rust.
//!
//! ```text
//! tandem-fuzz [--secs N] [--seed S] [--target header|engine|all]
//! ```
//!
//! Inputs are random byte strings (lengths spread over 0..4 KiB) from a
//! seeded generator, so a failure is reproduced by its seed and input
//! number, which the tool prints with the input in hex. (This is random,
//! not coverage-guided, fuzzing; the targets have libFuzzer's signature
//! for `cargo fuzz` where a nightly exists.) Exits non-zero on the first
//! failure.

#[cfg(loom)]
fn main() {
    eprintln!("tandem-fuzz: build without --cfg loom");
}

#[cfg(not(loom))]
fn main() {
    real::main()
}

#[cfg(not(loom))]
mod real {
    use std::time::{Duration, Instant};
    use tandem_verify::fuzz;

    /// A fuzz target.
    type Target = fn(&[u8]) -> fuzz::FuzzResult;

    use tandem_verify::SplitMix as Rng;

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        let get = |k: &str| {
            args.iter()
                .position(|a| a == k)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        let secs: f64 = get("--secs").and_then(|s| s.parse().ok()).unwrap_or(10.0);
        let seed: u64 = get("--seed").and_then(|s| s.parse().ok()).unwrap_or(1);
        let which = get("--target").unwrap_or_else(|| "all".into());
        let targets: Vec<(&str, Target)> = vec![("header", fuzz::header), ("engine", fuzz::engine)];
        if let Some(hex) = get("--input") {
            // Replay one input (TANDEM_FUZZ_TRACE=1 prints the engine calls).
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0))
                .collect();
            let f = if which == "header" {
                fuzz::header
            } else {
                fuzz::engine
            };
            match f(&bytes) {
                Ok(()) => println!("passes"),
                Err(e) => {
                    println!("FAILED: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        #[cfg(feature = "mutants")]
        if args.iter().any(|a| a == "--mutants") {
            return mutants(secs, seed);
        }
        let mut failed = false;
        for (name, f) in targets
            .into_iter()
            .filter(|(n, _)| which == "all" || which == *n)
        {
            let mut rng = Rng(seed ^ name.len() as u64);
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let mut execs = 0u64;
            let mut buf = Vec::with_capacity(4096);
            while Instant::now() < end {
                let len = match rng.next_u64() % 4 {
                    0 => rng.next_u64() % 64,
                    1 => rng.next_u64() % 512,
                    _ => rng.next_u64() % 4096,
                } as usize;
                buf.clear();
                while buf.len() < len {
                    buf.extend_from_slice(&rng.next_u64().to_le_bytes());
                }
                buf.truncate(len);
                execs += 1;
                if let Err(e) = f(&buf) {
                    let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
                    println!(
                        "fuzz {name}: FAILED at input {execs} (seed {seed}): {e}\n  input: {hex}"
                    );
                    failed = true;
                    break;
                }
            }
            if !failed {
                println!(
                    "fuzz {name}: {execs} executions in {secs:.0} s, no failure (seed {seed})"
                );
            }
        }
        if failed {
            std::process::exit(1);
        }
    }

    /// Runs the engine target against each protocol-engine mutant (for at most
    /// `secs` each) and reports which it caught.
    #[cfg(feature = "mutants")]
    fn mutants(secs: f64, seed: u64) {
        use tandem_core::mutation::{set, Mutant};
        let proto = [
            Mutant::SkipCreditCheck,
            Mutant::SeqWrap,
            Mutant::CreditReturnLost,
            Mutant::HoldBackBypass,
            Mutant::FastRecvSeqStuck,
        ];
        for m in proto {
            set(Some(m));
            let mut rng = Rng(seed);
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let mut execs = 0u64;
            let mut caught = None;
            while Instant::now() < end && caught.is_none() {
                let len = (rng.next_u64() % 4096) as usize;
                let mut buf = Vec::with_capacity(len + 8);
                while buf.len() < len {
                    buf.extend_from_slice(&rng.next_u64().to_le_bytes());
                }
                buf.truncate(len);
                execs += 1;
                if let Err(e) = fuzz::engine(&buf) {
                    caught = Some(e);
                }
            }
            match caught {
                Some(e) => println!(
                    "fuzz mutant {m:?}: CAUGHT after {execs} inputs: {}",
                    &e[..e.len().min(140)]
                ),
                None => println!("fuzz mutant {m:?}: not caught in {execs} inputs"),
            }
        }
        set(None);
    }
}
