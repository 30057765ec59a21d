//! loom models of `tandem_core::slot_ring::SlotRing`.
//!
//! A producer thread and a consumer (the model's main thread) share one ring.
//! The payload blocks are `SharedCell`s, which under `--cfg loom` are loom's
//! race-checked cells: any access to a slot that the ring protocol does not
//! order against the other side's access to the same slot (an overwrite
//! before the consumer has read it, a read before the producer has
//! published it) makes loom panic with "Causality violation".
//!
//! The `broken_*` models misuse the ring on purpose and must fail, which
//! shows the checks above are not vacuous.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tandem_core::slot_ring::SlotRing;
use tandem_core::sync::{copy_from_blocks, copy_to_blocks, spin_hint, Ordering};
use tandem_verify::{check, check_broken, SlotMem};

/// The bytes that carry value `v` in a chunk of `len` bytes (`len >= 8`):
/// `v` little-endian, then a fill that depends on `v` and the position, so a
/// torn, stale or shifted chunk never decodes cleanly.
fn pattern(v: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[..8].copy_from_slice(&v.to_le_bytes());
    for (i, x) in b.iter_mut().enumerate().skip(8) {
        *x = (v as u8).wrapping_mul(37).wrapping_add(i as u8) ^ 0x5a;
    }
    b
}

/// The value a chunk carries; panics if its bytes are not exactly
/// `pattern(value, len)`.
fn decode(b: &[u8]) -> u64 {
    let v = u64::from_le_bytes(b[..8].try_into().unwrap());
    assert_eq!(
        b,
        &pattern(v, b.len())[..],
        "chunk of value {v} is not byte-exact"
    );
    v
}

/// One producer thread pushes `count` chunks of `len` bytes into a ring of
/// `steps` slots of `slot_bytes`; the main thread pops them. Checks: every
/// value arrives exactly once, in order, byte-exact; the consumer never sees
/// more than `steps` published-but-unconsumed steps; the counters end equal.
fn spsc(steps: u64, slot_bytes: usize, count: u64, len: usize) {
    let mem = Arc::new(SlotMem::new(steps as usize * slot_bytes / 64));

    let producer = {
        let mem = mem.clone();
        thread::spawn(move || {
            let ring = SlotRing::new(&mem.ctrl, &mem.blocks, steps, slot_bytes).unwrap();
            let mut tx = ring.producer();
            for v in 0..count {
                let chunk = pattern(v, len);
                while !tx.try_push(&chunk) {
                    spin_hint();
                }
            }
            tx.tail()
        })
    };

    let ring = SlotRing::new(&mem.ctrl, &mem.blocks, steps, slot_bytes).unwrap();
    let mut rx = ring.consumer();
    let mut buf = vec![0u8; len];
    let mut got = Vec::new();
    for _ in 0..count {
        while !rx.try_pop(&mut buf) {
            spin_hint();
        }
        got.push(decode(&buf));
        // The producer published tail = t only after it saw head >= t - steps,
        // and our head only grows: so it can never be more than `steps` ahead.
        let tail = mem.ctrl.tail.value.load(Ordering::Acquire);
        assert!(
            tail <= rx.head() + steps,
            "producer is {} steps ahead of the consumer's head {} (ring has {steps})",
            tail - rx.head(),
            rx.head()
        );
    }
    let tail = producer.join().unwrap();

    assert_eq!(
        got,
        (0..count).collect::<Vec<_>>(),
        "lost, duplicated or reordered"
    );
    assert!(!rx.try_pop(&mut buf), "a value arrived twice");
    assert_eq!(tail, count);
    assert_eq!(rx.head(), count);
    assert_eq!(mem.ctrl.tail.value.load(Ordering::Relaxed), count);
    assert_eq!(mem.ctrl.head.value.load(Ordering::Relaxed), count);
}

/// Two slots, four full 64-byte values: the ring wraps twice, so slot reuse
/// after wrap-around is checked in every interleaving.
#[test]
fn wraps_exactly_once_in_order() {
    check("slot_ring::wraps_exactly_once_in_order", || {
        spsc(2, 64, 4, 64)
    });
}

/// One slot, three values: every push reuses the slot the consumer is about
/// to read, so a slot overwritten before it is consumed would race on every
/// step; also checks the consumer never sees the producer more than one
/// step ahead.
#[test]
fn slot_never_overwritten_before_consumed() {
    check("slot_ring::slot_never_overwritten_before_consumed", || {
        spsc(1, 64, 3, 64)
    });
}

/// Two slots of two blocks each (128 bytes), 100-byte chunks: the slot
/// index arithmetic for multi-block slots and partial chunks.
#[test]
fn multi_block_slots_wrap() {
    check("slot_ring::multi_block_slots_wrap", || spsc(2, 128, 3, 100));
}

/// Shared memory's eager cells: messages of one or two slots, each padded
/// to a cell of two slots, in a ring of two cells. The consumer reads each
/// slot as soon as it is published (the first slot of a two-slot message
/// before the second is written) and returns the whole cell in one step;
/// every message starts a cell. With `pads` false the producer forgets the
/// padding (the broken variant).
fn padded_cells(pads: bool) {
    // Slots per message, in order.
    const MSGS: [u64; 3] = [1, 2, 1];
    let pad_of = |i: u64, k: u64| if i + 1 == k { 2 - k } else { 0 };
    let mem = Arc::new(SlotMem::new(4));
    let producer = {
        let mem = mem.clone();
        thread::spawn(move || {
            let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 4, 64).unwrap();
            let mut tx = ring.producer();
            let mut v = 0;
            for k in MSGS {
                while !tx.has_free(2) {
                    spin_hint();
                }
                for i in 0..k {
                    let pad = if pads { pad_of(i, k) } else { 0 };
                    assert!(tx.try_push_padded(&pattern(v, 64), pad), "room was checked");
                    v += 1;
                }
            }
        })
    };
    let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 4, 64).unwrap();
    let mut rx = ring.consumer();
    let mut buf = [0u8; 64];
    let mut v = 0;
    for k in MSGS {
        assert_eq!(rx.head() % 2, 0, "a message starts a cell");
        // Each slot read as soon as it is published, the cell returned once.
        for i in 0..k {
            while !rx.try_read_ahead(i, &mut buf) {
                spin_hint();
            }
            assert_eq!(decode(&buf), v, "a slot out of place");
            v += 1;
        }
        assert!(rx.try_release(2), "the cell is published whole");
    }
    producer.join().unwrap();
    assert_eq!(rx.head(), 6);
}

#[test]
fn padded_cells_stay_aligned() {
    check("slot_ring::padded_cells_stay_aligned", || {
        padded_cells(true)
    });
}

// ---------------------------------------------------------------------------
// Broken uses: each must fail, or the checks above prove nothing.
// ---------------------------------------------------------------------------

/// The consumer reads slot 0 without waiting for the producer's tail: loom
/// must report the read racing the producer's write.
#[test]
#[should_panic(expected = "Causality violation")]
fn broken_consumer_reads_without_waiting_for_tail() {
    check(
        "slot_ring::broken_consumer_reads_without_waiting_for_tail",
        || {
            let mem = Arc::new(SlotMem::new(2));
            let producer = {
                let mem = mem.clone();
                thread::spawn(move || {
                    let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 2, 64).unwrap();
                    assert!(ring.producer().try_push(&pattern(7, 64)));
                })
            };
            let mut buf = [0u8; 64];
            copy_from_blocks(&mem.blocks[..1], &mut buf);
            producer.join().unwrap();
        },
    );
}

/// The consumer sees the tail with a `Relaxed` load instead of `Acquire`:
/// it knows the step is published but has no happens-before edge to the
/// producer's write, and loom must report the race.
#[test]
#[should_panic(expected = "Causality violation")]
fn broken_consumer_relaxed_tail() {
    check("slot_ring::broken_consumer_relaxed_tail", || {
        let mem = Arc::new(SlotMem::new(2));
        let producer = {
            let mem = mem.clone();
            thread::spawn(move || {
                let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 2, 64).unwrap();
                assert!(ring.producer().try_push(&pattern(7, 64)));
            })
        };
        while mem.ctrl.tail.value.load(Ordering::Relaxed) == 0 {
            spin_hint();
        }
        let mut buf = [0u8; 64];
        copy_from_blocks(&mem.blocks[..1], &mut buf);
        assert_eq!(decode(&buf), 7);
        producer.join().unwrap();
    });
}

/// The consumer returns the slot (stores `head`) *before* reading it, in a
/// one-slot ring: the producer may then overwrite the slot while it is
/// read, which loom must report.
#[test]
#[should_panic(expected = "Causality violation")]
fn broken_consumer_returns_slot_before_reading() {
    check(
        "slot_ring::broken_consumer_returns_slot_before_reading",
        || {
            let mem = Arc::new(SlotMem::new(1));
            let producer = {
                let mem = mem.clone();
                thread::spawn(move || {
                    let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 1, 64).unwrap();
                    let mut tx = ring.producer();
                    for v in 0..2 {
                        while !tx.try_push(&pattern(v, 64)) {
                            spin_hint();
                        }
                    }
                })
            };
            let mut buf = [0u8; 64];
            for v in 0..2u64 {
                while mem.ctrl.tail.value.load(Ordering::Acquire) <= v {
                    spin_hint();
                }
                mem.ctrl.head.value.store(v + 1, Ordering::Release); // too early
                copy_from_blocks(&mem.blocks[..1], &mut buf);
                assert_eq!(decode(&buf), v);
            }
            producer.join().unwrap();
        },
    );
}

/// A producer that ignores the consumer's head (no credit check) in a
/// one-slot ring: it overwrites a slot before it is consumed. The model must
/// catch it, as a race on the slot or as a lost value / a producer more
/// than `steps` ahead, whichever interleaving loom reaches first.
#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_producer_ignores_head() {
    let accepted = [
        "Causality violation",
        "overwritten before it was consumed",
        "more than one step ahead",
    ];
    check_broken("slot_ring::broken_producer_ignores_head", &accepted, || {
        let mem = Arc::new(SlotMem::new(1));
        let producer = {
            let mem = mem.clone();
            thread::spawn(move || {
                for v in 0..2u64 {
                    copy_to_blocks(&mem.blocks[..1], &pattern(v, 64));
                    mem.ctrl.tail.value.store(v + 1, Ordering::Release);
                }
            })
        };
        let ring = SlotRing::new(&mem.ctrl, &mem.blocks, 1, 64).unwrap();
        let mut rx = ring.consumer();
        let mut buf = [0u8; 64];
        for v in 0..2u64 {
            while !rx.try_pop(&mut buf) {
                spin_hint();
            }
            assert_eq!(decode(&buf), v, "value overwritten before it was consumed");
            let tail = mem.ctrl.tail.value.load(Ordering::Acquire);
            assert!(tail <= rx.head() + 1, "producer more than one step ahead");
        }
        producer.join().unwrap();
    });
}

/// A producer that forgets the padding: the consumer, expecting it, skips
/// slots that were never written, or takes the next message's slot as
/// padding. The model must catch it.
#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_producer_forgets_the_padding() {
    let accepted = [
        "Causality violation",
        "a slot out of place",
        "the cell is published whole",
        "is not byte-exact",
        "deadlock",
    ];
    check_broken(
        "slot_ring::broken_producer_forgets_the_padding",
        &accepted,
        || padded_cells(false),
    );
}
