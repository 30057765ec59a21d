//! loom models of `tandem_core::line_ring::LineRing`.
//!
//! A writer thread and a reader (the model's main thread) share one ring.
//! Each message is a 4-byte prefix carrying the payload length, then the
//! payload, exactly as the driver frames messages. The line payloads are
//! `SharedCell`s, race-checked by loom under `--cfg loom`: a line rewritten
//! before the reader is done with it, or read before its flag published it,
//! makes loom panic with "Causality violation". A message that is lost
//! (overwritten before it is read) leaves the reader waiting forever for its
//! sequence number, which loom reports as exceeding its branch limit; the
//! byte-exact checks catch stale, torn, reordered or duplicated messages.
//!
//! The `broken_*` models misuse the ring or weaken its rule on purpose and
//! must fail, which shows the checks are not vacuous.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tandem_core::line_ring::{lines_for, LineRing, LINE_PAYLOAD};
use tandem_core::sync::{spin_hint, AtomicU64, Ordering, SharedCell};
use tandem_verify::{check, check_broken, LineMem};

/// Prefix bytes per message (the payload length, `u32` little-endian).
const PREFIX: usize = 4;

/// The payload of message `i`, `len` bytes, distinct per message and
/// position.
fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| {
            (i as u8)
                .wrapping_mul(101)
                .wrapping_add(j as u8)
                .wrapping_mul(7)
                ^ 0x3c
        })
        .collect()
}

/// How reads are done in [`spsc`].
#[derive(Clone, Copy)]
enum Read {
    /// Read the whole payload.
    Whole,
    /// Read only the first `n` payload bytes (a truncated receive), which
    /// must still consume the whole message.
    Truncated(usize),
}

/// A writer thread sends messages with the payload lengths in `lens` through
/// a ring of `lines` lines; the main thread reads them. Checks: each message
/// arrives exactly once, in order, byte-exact, race-free; nothing is left
/// over; both ends agree on how many lines went through.
fn spsc(lines: usize, lens: &'static [usize], read: Read) {
    let mem = Arc::new(LineMem::new(lines));
    let total_lines: u64 = lens.iter().map(|&l| lines_for(PREFIX + l) as u64).sum();

    let writer = {
        let mem = mem.clone();
        thread::spawn(move || {
            let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
            let mut tx = ring.producer();
            for (i, &len) in lens.iter().enumerate() {
                let prefix = (len as u32).to_le_bytes();
                let payload = body(i, len);
                while !tx.try_write(&prefix, &payload) {
                    spin_hint();
                }
            }
            tx.tail()
        })
    };

    let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
    let mut rx = ring.consumer();
    for (i, &want_len) in lens.iter().enumerate() {
        let mut prefix = [0u8; PREFIX];
        while !rx.peek_prefix(&mut prefix) {
            spin_hint();
        }
        let len = u32::from_le_bytes(prefix) as usize;
        assert_eq!(
            len, want_len,
            "message {i}: wrong length prefix (stale or reordered line)"
        );
        let keep = match read {
            Read::Whole => len,
            Read::Truncated(n) => n.min(len),
        };
        let mut buf = vec![0u8; keep];
        while !rx.try_read(PREFIX, len, &mut buf) {
            spin_hint();
        }
        assert_eq!(buf, body(i, len)[..keep], "message {i} is not byte-exact");
    }
    let written = writer.join().unwrap();

    let mut prefix = [0u8; PREFIX];
    assert!(!rx.peek_prefix(&mut prefix), "a message arrived twice");
    assert_eq!(written, total_lines);
    assert_eq!(rx.tail(), total_lines);
    assert_eq!(mem.head.value.load(Ordering::Relaxed), total_lines);
}

/// 1-line messages (the largest payload that fits a line, the smallest, and
/// one in between) through a 2-line ring: the third reuses the first's line.
#[test]
fn one_line_messages_wrap() {
    const LENS: &[usize] = &[8, LINE_PAYLOAD - PREFIX, 1];
    check("line_ring::one_line_messages_wrap", || {
        spsc(2, LENS, Read::Whole)
    });
}

/// A 2-line message straddling the wrap of a 2-line ring (its lines are
/// slots 1 then 0), between two 1-line messages; the 2-line message needs
/// the whole ring free before it may be written.
#[test]
fn two_line_message_straddles_wrap() {
    const LENS: &[usize] = &[20, 100, LINE_PAYLOAD - PREFIX];
    check("line_ring::two_line_message_straddles_wrap", || {
        spsc(2, LENS, Read::Whole)
    });
}

/// 1-line and 2-line messages mixed in a 4-line ring: lines 0, 1-2, 3-4
/// (straddling the wrap), 5.
#[test]
fn mixed_messages_four_lines() {
    const LENS: &[usize] = &[10, LINE_PAYLOAD - PREFIX + 1, 2 * LINE_PAYLOAD - PREFIX, 0];
    check("line_ring::mixed_messages_four_lines", || {
        spsc(4, LENS, Read::Whole)
    });
}

/// A truncated receive of a 2-line message consumes both lines: the next
/// message, in the line the truncated one started in, arrives intact.
#[test]
fn truncated_read_consumes_whole_message() {
    const LENS: &[usize] = &[100, 30];
    check("line_ring::truncated_read_consumes_whole_message", || {
        spsc(2, LENS, Read::Truncated(10))
    });
}

// ---------------------------------------------------------------------------
// Broken uses: each must fail, or the checks above prove nothing.
// ---------------------------------------------------------------------------

/// The reader returns a message's lines (stores `head`) *before* reading the
/// payload, in a 1-line ring: the writer may then rewrite the line while it
/// is read (a race) or before it is read (the message is lost and the
/// reader waits forever for it).
#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_reader_returns_lines_before_reading() {
    let accepted = ["Causality violation", "maximum number of branches"];
    check_broken(
        "line_ring::broken_reader_returns_lines_before_reading",
        &accepted,
        || {
            const LENS: [usize; 2] = [8, 30];
            let mem = Arc::new(LineMem::new(1));
            let writer = {
                let mem = mem.clone();
                thread::spawn(move || {
                    let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
                    let mut tx = ring.producer();
                    for (i, len) in LENS.into_iter().enumerate() {
                        while !tx.try_write(&(len as u32).to_le_bytes(), &body(i, len)) {
                            spin_hint();
                        }
                    }
                })
            };
            let ring = LineRing::new(&mem.head, &mem.lines).unwrap();
            let mut rx = ring.consumer();
            for (i, len) in LENS.into_iter().enumerate() {
                let mut prefix = [0u8; PREFIX];
                while !rx.peek_prefix(&mut prefix) {
                    spin_hint();
                }
                mem.head.value.store(rx.tail() + 1, Ordering::Release); // too early
                let mut buf = vec![0u8; len];
                while !rx.try_read(PREFIX, len, &mut buf) {
                    spin_hint();
                }
                assert_eq!(buf, body(i, len));
            }
            writer.join().unwrap();
        },
    );
}

/// A local one-line copy of the line-ring rule with the reader's check
/// weakened from "flag == seq + 1" to "flag != 0": the flag left by the
/// previous lap then looks ready, and the reader takes a stale line or races
/// the writer rewriting it. This is the bug the sequence flag exists to
/// prevent; the model must catch it.
#[test]
#[should_panic(expected = "broken variant caught")]
fn broken_stale_flag_from_previous_lap() {
    let accepted = ["Causality violation", "stale line"];
    check_broken(
        "line_ring::broken_stale_flag_from_previous_lap",
        &accepted,
        || {
            struct OneLine {
                head: AtomicU64,
                data: SharedCell<[u8; 8]>,
                flag: AtomicU64,
            }
            // SAFETY: the payload is a loom-checked cell; loom runs threads one
            // at a time and reports every unordered access, which is the point.
            unsafe impl Sync for OneLine {}

            let mem = Arc::new(OneLine {
                head: AtomicU64::new(0),
                data: SharedCell::new([0; 8]),
                flag: AtomicU64::new(0),
            });
            let writer = {
                let mem = mem.clone();
                thread::spawn(move || {
                    for seq in 0..2u64 {
                        while mem.head.load(Ordering::Acquire) < seq {
                            spin_hint();
                        }
                        // SAFETY: the pointer is valid; loom checks the access.
                        mem.data
                            .with_mut(|p| unsafe { *p = (seq + 100).to_le_bytes() });
                        mem.flag.store(seq + 1, Ordering::Release);
                    }
                })
            };
            for seq in 0..2u64 {
                while mem.flag.load(Ordering::Acquire) == 0 {
                    // BUG: should wait for `flag == seq + 1`
                    spin_hint();
                }
                // SAFETY: the pointer is valid; loom checks the access.
                let v = u64::from_le_bytes(mem.data.with(|p| unsafe { *p }));
                assert_eq!(
                    v,
                    seq + 100,
                    "stale line: read lap {} data for seq {seq}",
                    v.wrapping_sub(100)
                );
                mem.head.store(seq + 1, Ordering::Release);
            }
            writer.join().unwrap();
        },
    );
}
