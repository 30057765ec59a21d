//! Every deliberately broken variant of the lock-free structures is caught
//! by a loom model (`RUSTFLAGS="--cfg loom" cargo test -p tandem-verify
//! --features mutants`). One test only: the mutant switch is process-wide.
#![cfg(all(loom, feature = "mutants"))]

use loom::sync::Arc;
use loom::thread;
use tandem_core::line_ring::LineRing;
use tandem_core::mutation::{set, Mutant};
use tandem_core::slot_ring::SlotRing;
use tandem_core::sync::spin_hint;
use tandem_verify::{check, request_model, LineMem, SlotMem};

/// Two one-line messages through a two-line ring, checked byte-exact.
fn line_model() {
    let mem = Arc::new(LineMem::new(2));
    let w = {
        let mem = mem.clone();
        thread::spawn(move || {
            let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
            let mut tx = ring.producer();
            for i in 0..2u8 {
                while !tx.try_write(&[i, i ^ 0x5a], &[]) {
                    spin_hint();
                }
            }
        })
    };
    let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
    let mut rx = ring.consumer();
    for i in 0..2u8 {
        let mut m = [0u8; 2];
        while !rx.peek_prefix(&mut m) {
            spin_hint();
        }
        assert!(rx.try_read(2, 0, &mut []));
        assert_eq!(m, [i, i ^ 0x5a], "message {i} byte-exact");
    }
    w.join().unwrap();
}

/// Three one-block values through a two-step slot ring, byte-exact.
fn slot_model() {
    let mem = Arc::new(SlotMem::new(2));
    let p = {
        let mem = mem.clone();
        thread::spawn(move || {
            let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 2, 64).unwrap();
            let mut tx = ring.producer();
            for i in 0..3u8 {
                while !tx.try_push(&[i; 64]) {
                    spin_hint();
                }
            }
        })
    };
    let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 2, 64).unwrap();
    let mut rx = ring.consumer();
    for i in 0..3u8 {
        let mut b = [0u8; 64];
        while !rx.try_pop(&mut b) {
            spin_hint();
        }
        assert_eq!(b, [i; 64], "value {i} byte-exact");
    }
    p.join().unwrap();
}

#[test]
fn every_ring_and_lock_mutant_is_caught_by_loom() {
    let models: [(Mutant, &str, fn()); 3] = [
        (Mutant::RelaxedFlagPublish, "line ring", line_model),
        (Mutant::SlotHeadOffByOne, "slot ring", slot_model),
        (
            Mutant::LockReleaseRelaxed,
            "request completion",
            request_model,
        ),
    ];
    for (m, name, model) in models {
        // The correct code passes the very same model.
        check(name, model);
        set(Some(m));
        let r = std::panic::catch_unwind(|| check(name, model));
        set(None);
        let why = match r {
            Ok(e) => panic!(
                "{m:?} survived {} executions of the {name} model",
                e.executions
            ),
            Err(p) => p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        };
        println!(
            "{m:?}: caught by the loom {name} model: {}",
            why.lines().next().unwrap_or("")
        );
    }
}
