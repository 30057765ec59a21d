//! loom models of the paths the driver's hot loop takes, each beside a
//! broken variant that must fail:
//!
//! * `peek_then_consume`: the line ring's `peek_line` +
//!   `consume_peeked_line`, the driver's receive of a one-line message,
//!   against a writer wrapping a 2-line ring. Broken: the reader consumes
//!   a line it has not peeked yet (returning it to the writer early).
//! * `skip_drains_without_reading`: the slot ring's `try_skip` (draining a
//!   truncated stream) interleaved with `try_pop`, against a producer
//!   wrapping a 2-slot ring. Broken: the reader skips once more than was
//!   published.
//! * `lock_switches_to_shared`: a `SpinLock::new_single` used by its one
//!   thread, switched with `share()` before a second thread (spawned after,
//!   so ordered by the hand-over) takes it too. Broken: the second thread
//!   starts before `share()`, both using the single-thread protocol.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tandem_core::line_ring::{LineRing, LINE_PAYLOAD};
use tandem_core::lock::SpinLock;
use tandem_core::slot_ring::SlotRing;
use tandem_core::sync::{spin_hint, Ordering};
use tandem_verify::{check, check_broken, LineMem, SlotMem};

fn line(i: u8) -> [u8; LINE_PAYLOAD] {
    let mut b = [0u8; LINE_PAYLOAD];
    for (j, x) in b.iter_mut().enumerate() {
        *x = i.wrapping_mul(31).wrapping_add(j as u8) ^ 0x5a;
    }
    b
}

fn peek_consume_model(broken: bool) {
    const N: u8 = 3;
    let mem = Arc::new(LineMem::new(2));
    let writer = {
        let mem = mem.clone();
        thread::spawn(move || {
            let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
            let mut tx = ring.producer();
            for i in 0..N {
                while !tx.try_write(&[], &line(i)) {
                    spin_hint();
                }
            }
        })
    };
    let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
    let mut rx = ring.consumer();
    for i in 0..N {
        let mut out = [0u8; LINE_PAYLOAD];
        if broken && i == 1 {
            // Returns the next line before it was even peeked.
            rx.consume_peeked_line();
        }
        while !rx.peek_line(&mut out) {
            spin_hint();
        }
        assert_eq!(out, line(i), "line {i} is not what was written");
        rx.consume_peeked_line();
        if broken && i == 1 {
            break;
        }
    }
    writer.join().unwrap();
}

#[test]
fn peek_then_consume() {
    check("fast_paths::peek_then_consume", || {
        peek_consume_model(false)
    });
}

#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_consume_before_peek() {
    check_broken(
        "fast_paths::broken_consume_before_peek",
        &[
            "Causality violation",
            "is not what was written",
            "maximum number of branches",
        ],
        || peek_consume_model(true),
    );
}

fn skip_model(extra_skip: bool) {
    const STEPS: u64 = 2;
    const SLOT: usize = 64;
    const COUNT: u64 = 4;
    let mem = Arc::new(SlotMem::new(STEPS as usize * SLOT / 64));
    let producer = {
        let mem = mem.clone();
        thread::spawn(move || {
            let ring = SlotRing::new(&mem.ctrl, &mem.blocks, STEPS, SLOT).unwrap();
            let mut tx = ring.producer();
            for v in 0..COUNT {
                let chunk = [v as u8 + 1; SLOT];
                while !tx.try_push(&chunk) {
                    spin_hint();
                }
            }
        })
    };
    let ring = SlotRing::new(&mem.ctrl, &mem.blocks, STEPS, SLOT).unwrap();
    let mut rx = ring.consumer();
    let mut buf = [0u8; SLOT];
    // Read, skip, read, skip: the skipped chunks are drained, the read ones
    // byte-exact.
    for v in 0..COUNT {
        if v % 2 == 0 {
            while !rx.try_pop(&mut buf) {
                spin_hint();
            }
            assert_eq!(buf, [v as u8 + 1; SLOT], "chunk {v} is not what was pushed");
        } else {
            while !rx.try_skip() {
                spin_hint();
            }
        }
        if extra_skip && v == 0 {
            // Skips a step that may not have been published: the producer
            // is then told a slot is free that it has not finished with.
            let _ = rx.try_skip() || {
                mem.ctrl.head.value.store(rx.head() + 1, Ordering::Release);
                true
            };
        }
    }
    producer.join().unwrap();
    assert_eq!(mem.ctrl.head.value.load(Ordering::Relaxed), rx.head());
}

#[test]
fn skip_drains_without_reading() {
    check("fast_paths::skip_drains_without_reading", || {
        skip_model(false)
    });
}

#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_skip_past_the_producer() {
    check_broken(
        "fast_paths::broken_skip_past_the_producer",
        &[
            "Causality violation",
            "is not what was pushed",
            "maximum number of branches",
        ],
        || skip_model(true),
    );
}

fn lock_model(share_first: bool) {
    // SAFETY: in the correct model only this thread touches the lock
    // until `share()`, and the other thread is spawned after (the spawn
    // orders the switch before its first use); the broken model breaks
    // exactly that promise, which loom must then catch.
    let lock = Arc::new(unsafe { SpinLock::new_single(0u64) });
    *lock.lock_with(|_| spin_hint()) += 1;
    let start = |lock: Arc<SpinLock<u64>>| {
        thread::spawn(move || {
            *lock.lock_with(|_| thread::yield_now()) += 10;
        })
    };
    let other = if share_first {
        lock.share();
        start(lock.clone())
    } else {
        let t = start(lock.clone());
        lock.share();
        t
    };
    *lock.lock_with(|_| thread::yield_now()) += 100;
    other.join().unwrap();
    assert_eq!(*lock.lock_with(|_| spin_hint()), 111, "an update was lost");
}

#[test]
fn lock_switches_to_shared() {
    check("fast_paths::lock_switches_to_shared", || lock_model(true));
}

#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_second_thread_before_share() {
    check_broken(
        "fast_paths::broken_second_thread_before_share",
        &[
            "Causality violation",
            "an update was lost",
            "single-thread SpinLock re-entered",
            "SpinLock::share while the lock is held",
            "maximum number of branches",
        ],
        || lock_model(false),
    );
}
