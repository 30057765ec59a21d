//! loom models of the credit window carried over line rings, and of the
//! hand-off between a user thread and a progress (proxy) thread through
//! `tandem_core::lock::SpinLock` (request completion).
//!
//! * `credit_window_never_overruns`: a sender thread may send only with a
//!   credit from its [`Credits`] (the per-peer type the protocol engine
//!   runs, built from `CreditWindow` and `CreditReturn`); the receiver (main
//!   thread) holds one buffer, returns credit through a second line ring
//!   once it has consumed a message, as the engine does (the 16-bit freed
//!   count of a header, counted from just below the wrap so the model
//!   crosses it), and checks before consuming that no further message is
//!   already waiting for it — which would be an overrun (on RDMA: receiver
//!   not ready). The `broken_*` variant ignores the window and must be
//!   caught.
//! * `request_completes_across_threads`: the user thread posts an operation
//!   under the lock and waits for it; the proxy thread completes it under
//!   the lock. The operation's state is a loom-checked cell, so any access
//!   the lock does not order (a race) fails the model, and the user must
//!   see the result the proxy wrote.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tandem_core::credit::Credits;
use tandem_core::line_ring::LineRing;
use tandem_core::sync::spin_hint;
use tandem_verify::{check, check_broken, request_model, LineMem};

const MESSAGES: u8 = 3;

/// Where both ends' counts start: the freed counts wrap at 2^16 during
/// the model.
const START: u64 = u16::MAX as u64 - 1;

/// Sender and receiver over a data ring (4 lines, room for more messages
/// than the window) and a credit ring; window of one message.
fn credit_model(respect_window: bool) {
    let data = Arc::new(LineMem::new(4));
    let credits = Arc::new(LineMem::new(4));
    let sender = {
        let (data, credits) = (data.clone(), credits.clone());
        thread::spawn(move || {
            let d = LineRing::new(&data.head, &data.lines).unwrap();
            let c = LineRing::new(&credits.head, &credits.lines).unwrap();
            let (mut tx, mut grants) = (d.producer(), c.consumer());
            let mut credits = Credits::new(1, 1, START);
            for i in 0..MESSAGES {
                while respect_window && !credits.try_take(1) {
                    let mut g = [0u8; 2];
                    if grants.peek_prefix(&mut g) && grants.try_read(2, 0, &mut []) {
                        credits
                            .apply(u16::from_le_bytes(g))
                            .expect("a freed count within what was sent");
                    }
                    spin_hint();
                }
                while !tx.try_write(&[i], &[]) {
                    spin_hint();
                }
            }
        })
    };
    let d = LineRing::new(&data.head, &data.lines).unwrap();
    let c = LineRing::new(&credits.head, &credits.lines).unwrap();
    let (mut rx, mut tx) = (d.consumer(), c.producer());
    let mut credits = Credits::new(1, 1, START);
    for i in 0..MESSAGES {
        let mut m = [0u8; 1];
        while !rx.peek_prefix(&mut m) {
            spin_hint();
        }
        assert!(rx.try_read(1, 0, &mut []));
        assert_eq!(m[0], i, "in order");
        // Our one buffer holds message i: nothing else may have arrived.
        let mut next = [0u8; 1];
        assert!(
            !rx.peek_prefix(&mut next),
            "overrun: message {} arrived while the only buffer still held {i}",
            next[0]
        );
        credits.freed();
        if credits.due() {
            let count = credits.count();
            let g = (count as u16).to_le_bytes();
            while !tx.try_write(&g, &[]) {
                spin_hint();
            }
            credits.told(count);
        }
    }
    sender.join().unwrap();
}

#[test]
fn credit_window_never_overruns() {
    check("handoff::credit_window_never_overruns", || {
        credit_model(true)
    });
}

#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_sender_ignores_the_window() {
    check_broken(
        "handoff::broken_sender_ignores_the_window",
        &["overrun"],
        || credit_model(false),
    );
}

#[test]
fn request_completes_across_threads() {
    check("handoff::request_completes_across_threads", request_model);
}
