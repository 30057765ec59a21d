//! Flag-polling handshakes between two threads: the round-trip latency of an
//! 8-byte message for three ways of telling the other side "data is here"
//! and "the slot is free again".
//!
//! * `counter_ring`: `tandem_core::slot_ring` (NCCL "Simple"), 64-byte
//!   slots; the producer publishes a monotonic `tail`, the consumer a
//!   monotonic `head`, each on its own 128-byte span; data and counters are
//!   different cache lines.
//! * `line_ring`: `tandem_core::line_ring` (NCCL "LL" idea), 8-byte
//!   messages; the sequence flag rides in the same 64-byte line as the
//!   payload and the consumer returns lines through a `head` counter that
//!   the producer reads only when its cached copy says "full".
//! * `slot_flag`: a small local ring whose 64-byte slots each carry their
//!   own `AtomicU64` flag in the same line (56 payload bytes + flag): the
//!   producer writes a free slot and sets its flag, the consumer polls that
//!   flag, reads and clears it; clearing the flag *is* the slot's return, so
//!   there is no shared counter at all.
//!
//! Each bench is a ping-pong: the measuring thread sends message `i` on ring
//! A and waits for it to come back on ring B; an echo thread polls A and
//! copies each message into B. Every ring has 8 slots or lines. One
//! iteration is one round trip (two one-way handshakes). The echo thread is
//! started before the timing (`iter_custom`) and stopped through a flag
//! after each bench, so no thread is left spinning.
//!
//! The two threads are pinned to two distinct cores (the last two the
//! process may run on, or `TANDEM_BENCH_CORES=a,b`); with a single core
//! they are not pinned and every poll yields instead of spinning.
//!
//! ```text
//! cargo bench -p tandem-benches --bench handshake            # measure
//! cargo bench -p tandem-benches --bench handshake -- --test  # smoke test: each once
//! ```
// clippy's `disallowed-types` resolves `tandem_core::sync::AtomicU64` (a
// re-export) to `core::sync::atomic::AtomicU64` and flags it although it is
// the sanctioned path; this file takes its atomics only from
// `tandem_core::sync`.
#![allow(clippy::disallowed_types)]

use std::hint;
use std::thread::{self, ScopedJoinHandle};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use tandem_core::line_ring::{Line, LineConsumer, LineProducer, LineRing};
use tandem_core::slot_ring::{PaddedCounter, SlotConsumer, SlotProducer, SlotRing, SlotRingCtrl};
use tandem_core::sync::{AtomicBool, AtomicU64, Block, Ordering, SharedCell};

/// Slots (or lines) per ring.
const STEPS: usize = 8;

/// Bytes per message.
const MSG: usize = 8;

/// The sending end of one ring, as the ping-pong loop drives it.
trait Sender {
    /// Publishes `msg`, or returns `false` if no slot is free.
    fn try_send(&mut self, msg: &[u8; MSG]) -> bool;
}

/// The receiving end of one ring.
trait Receiver {
    /// Takes the next message into `out`, or returns `false` if none is
    /// there yet.
    fn try_recv(&mut self, out: &mut [u8; MSG]) -> bool;
}

/// The memory of one ring, shared by the two threads; each thread builds its
/// own end over it.
trait RingMem: Sync {
    /// The sending end.
    type Tx<'a>: Sender
    where
        Self: 'a;
    /// The receiving end.
    type Rx<'a>: Receiver
    where
        Self: 'a;
    /// Fresh, empty ring memory, on the heap and cache-line aligned.
    fn boxed() -> Box<Self>;
    /// The sending end (exactly one per ring).
    fn tx(&self) -> Self::Tx<'_>;
    /// The receiving end (exactly one per ring).
    fn rx(&self) -> Self::Rx<'_>;
}

// ---------------------------------------------------------------------------
// counter ring: tandem_core::slot_ring
// ---------------------------------------------------------------------------

/// A slot ring of `STEPS` 64-byte slots: counters, then the slots, 128-byte
/// aligned as in a shared mapping.
#[repr(C, align(128))]
struct CounterMem {
    ctrl: SlotRingCtrl,
    blocks: [Block; STEPS],
}

// SAFETY: the blocks are only reached through one `SlotProducer` (in one
// thread) and one `SlotConsumer` (in the other), built by `tx`/`rx`; the slot
// ring protocol (Release/Acquire on tail and head) orders every access to a
// slot, which is exactly what sharing them across threads needs.
unsafe impl Sync for CounterMem {}

impl CounterMem {
    fn ring(&self) -> SlotRing<'_> {
        SlotRing::new(&self.ctrl, &self.blocks, STEPS as u64, 64).expect("valid slot ring layout")
    }
}

impl RingMem for CounterMem {
    type Tx<'a> = SlotProducer<'a>;
    type Rx<'a> = SlotConsumer<'a>;
    fn boxed() -> Box<Self> {
        Box::new(Self {
            ctrl: SlotRingCtrl::default(),
            blocks: std::array::from_fn(|_| Block::default()),
        })
    }
    fn tx(&self) -> SlotProducer<'_> {
        self.ring().producer()
    }
    fn rx(&self) -> SlotConsumer<'_> {
        self.ring().consumer()
    }
}

impl Sender for SlotProducer<'_> {
    #[inline(always)]
    fn try_send(&mut self, msg: &[u8; MSG]) -> bool {
        self.try_push(msg)
    }
}

impl Receiver for SlotConsumer<'_> {
    #[inline(always)]
    fn try_recv(&mut self, out: &mut [u8; MSG]) -> bool {
        self.try_pop(out)
    }
}

// ---------------------------------------------------------------------------
// line ring: tandem_core::line_ring
// ---------------------------------------------------------------------------

/// A line ring of `STEPS` lines: the head counter, then the lines.
#[repr(C, align(128))]
struct LineMem {
    head: PaddedCounter,
    lines: [Line; STEPS],
}

// SAFETY: as for `CounterMem`: one `LineProducer` and one `LineConsumer`,
// and the line ring protocol (Release/Acquire on each line's flag and on
// head) orders every access to a line's payload.
unsafe impl Sync for LineMem {}

impl LineMem {
    fn ring(&self) -> LineRing<'_> {
        LineRing::new(&self.head, &self.lines).expect("valid line ring layout")
    }
}

impl RingMem for LineMem {
    type Tx<'a> = LineProducer<'a>;
    type Rx<'a> = LineConsumer<'a>;
    fn boxed() -> Box<Self> {
        Box::new(Self {
            head: PaddedCounter::default(),
            lines: std::array::from_fn(|_| Line::default()),
        })
    }
    fn tx(&self) -> LineProducer<'_> {
        self.ring().producer()
    }
    fn rx(&self) -> LineConsumer<'_> {
        self.ring().consumer()
    }
}

impl Sender for LineProducer<'_> {
    #[inline(always)]
    fn try_send(&mut self, msg: &[u8; MSG]) -> bool {
        self.try_write(&[], msg)
    }
}

impl Receiver for LineConsumer<'_> {
    #[inline(always)]
    fn try_recv(&mut self, out: &mut [u8; MSG]) -> bool {
        self.try_read(0, MSG, out)
    }
}

// ---------------------------------------------------------------------------
// one flag per slot: a local ring, the flag set by the producer and cleared
// by the consumer
// ---------------------------------------------------------------------------

/// One 64-byte slot: 56 payload bytes and the slot's own flag
/// (0 = free, 1 = full).
#[repr(C, align(64))]
struct FlagSlot {
    data: SharedCell<[u8; 56]>,
    flag: AtomicU64,
}

/// `STEPS` flagged slots.
#[repr(C, align(128))]
struct FlagMem {
    slots: [FlagSlot; STEPS],
}

// SAFETY: one `FlagTx` and one `FlagRx`; a slot's payload is written only
// while its flag reads 0 (Acquire, after the consumer's Release clear) and
// read only while it reads 1 (Acquire, after the producer's Release set), so
// the two never touch a payload at the same time.
unsafe impl Sync for FlagMem {}

/// Producer end of a [`FlagMem`] ring.
struct FlagTx<'a> {
    slots: &'a [FlagSlot; STEPS],
    next: usize,
}

/// Consumer end of a [`FlagMem`] ring.
struct FlagRx<'a> {
    slots: &'a [FlagSlot; STEPS],
    next: usize,
}

impl RingMem for FlagMem {
    type Tx<'a> = FlagTx<'a>;
    type Rx<'a> = FlagRx<'a>;
    fn boxed() -> Box<Self> {
        let slot = || FlagSlot {
            data: SharedCell::new([0; 56]),
            flag: AtomicU64::new(0),
        };
        Box::new(Self {
            slots: std::array::from_fn(|_| slot()),
        })
    }
    fn tx(&self) -> FlagTx<'_> {
        FlagTx {
            slots: &self.slots,
            next: 0,
        }
    }
    fn rx(&self) -> FlagRx<'_> {
        FlagRx {
            slots: &self.slots,
            next: 0,
        }
    }
}

impl Sender for FlagTx<'_> {
    #[inline(always)]
    fn try_send(&mut self, msg: &[u8; MSG]) -> bool {
        let slot = &self.slots[self.next % STEPS];
        if slot.flag.load(Ordering::Acquire) != 0 {
            return false;
        }
        // SAFETY: the flag reads 0, so the consumer has cleared it after its
        // last read of this payload (Release/Acquire) and will not read it
        // again until the flag below is set.
        slot.data
            .with_mut(|p| unsafe { (&mut *p)[..MSG].copy_from_slice(msg) });
        slot.flag.store(1, Ordering::Release);
        self.next += 1;
        true
    }
}

impl Receiver for FlagRx<'_> {
    #[inline(always)]
    fn try_recv(&mut self, out: &mut [u8; MSG]) -> bool {
        let slot = &self.slots[self.next % STEPS];
        if slot.flag.load(Ordering::Acquire) == 0 {
            return false;
        }
        // SAFETY: the flag reads 1, so the producer finished writing the
        // payload (Release/Acquire) and will not write it again until the
        // flag is cleared below.
        slot.data
            .with(|p| out.copy_from_slice(unsafe { &(&*p)[..MSG] }));
        slot.flag.store(0, Ordering::Release);
        self.next += 1;
        true
    }
}

// ---------------------------------------------------------------------------
// threads, pinning, waiting
// ---------------------------------------------------------------------------

/// Where the two threads run and how they wait.
#[derive(Clone, Copy)]
struct Placement {
    /// Cores for (measuring thread, echo thread), if pinned.
    cores: Option<(core_affinity::CoreId, core_affinity::CoreId)>,
}

impl Placement {
    /// Two distinct cores from `TANDEM_BENCH_CORES=a,b`, else the last two
    /// this process may run on; none if there is only one.
    fn detect() -> Self {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        let from_env = std::env::var("TANDEM_BENCH_CORES").ok().and_then(|v| {
            let (a, b) = v.split_once(',')?;
            let (a, b) = (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            );
            (a != b).then_some((
                core_affinity::CoreId { id: a },
                core_affinity::CoreId { id: b },
            ))
        });
        let last_two = match ids.as_slice() {
            [.., a, b] => Some((*a, *b)),
            _ => None,
        };
        let cores = from_env.or(last_two);
        match cores {
            Some((a, b)) => eprintln!(
                "handshake: measuring thread on core {}, echo thread on core {}",
                a.id, b.id
            ),
            None => {
                eprintln!("handshake: only one core available: threads not pinned, polls yield")
            }
        }
        Self { cores }
    }

    fn pin_main(self) {
        if let Some((a, _)) = self.cores {
            if !core_affinity::set_for_current(a) {
                eprintln!("handshake: could not pin to core {}", a.id);
            }
        }
    }

    fn pin_echo(self) {
        if let Some((_, b)) = self.cores {
            if !core_affinity::set_for_current(b) {
                eprintln!("handshake: could not pin to core {}", b.id);
            }
        }
    }

    /// One pause between polls: a spin hint when each thread has its own
    /// core, a yield when they share one.
    #[inline(always)]
    fn pause(self) {
        if self.cores.is_some() {
            hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }
}

/// Polls `ready` until it returns `true` (then returns `true`), pausing
/// between polls; every 2^16 polls asks `give_up` and returns `false` if it
/// says so.
#[inline(always)]
fn wait(
    mut ready: impl FnMut() -> bool,
    place: Placement,
    mut give_up: impl FnMut() -> bool,
) -> bool {
    let mut polls: u32 = 0;
    loop {
        if ready() {
            return true;
        }
        place.pause();
        polls = polls.wrapping_add(1);
        if polls & 0xffff == 0 && give_up() {
            return false;
        }
    }
}

/// Sets the stop flag when dropped, so the echo thread also stops when the
/// measuring thread unwinds.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The echo thread: copies every message from `rx` to `tx` until `stop`.
fn echo<A: Sender, B: Receiver>(mut rx: B, mut tx: A, stop: &AtomicBool, place: Placement) {
    let stopped = || stop.load(Ordering::Acquire);
    let mut buf = [0u8; MSG];
    loop {
        if !wait(|| rx.try_recv(&mut buf), place, stopped) {
            return;
        }
        if !wait(|| tx.try_send(&buf), place, stopped) {
            return;
        }
    }
}

/// Benches the round trip of an 8-byte message over two rings of type `R`.
fn pingpong<R: RingMem>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, place: Placement) {
    let (ping, pong) = (R::boxed(), R::boxed());
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let _stop_guard = StopOnDrop(&stop);
        let echo_thread: ScopedJoinHandle<'_, ()> = s.spawn(|| {
            place.pin_echo();
            echo(ping.rx(), pong.tx(), &stop, place);
        });
        let (mut tx, mut rx) = (ping.tx(), pong.rx());
        let echo_gone = || echo_thread.is_finished();
        let mut seq = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut buf = [0u8; MSG];
                let start = Instant::now();
                for _ in 0..iters {
                    let msg = seq.to_le_bytes();
                    seq += 1;
                    assert!(
                        wait(|| tx.try_send(&msg), place, echo_gone),
                        "echo thread stopped"
                    );
                    assert!(
                        wait(|| rx.try_recv(&mut buf), place, echo_gone),
                        "echo thread stopped"
                    );
                    assert_eq!(buf, msg, "echo returned the wrong message");
                }
                start.elapsed()
            })
        });
        // `_stop_guard` stops the echo thread here (or on unwind); the
        // scope then joins it.
    });
}

fn handshakes(c: &mut Criterion) {
    let place = Placement::detect();
    place.pin_main();
    let mut group = c.benchmark_group("handshake_pingpong_8B");
    pingpong::<CounterMem>(&mut group, "counter_ring", place);
    pingpong::<LineMem>(&mut group, "line_ring", place);
    pingpong::<FlagMem>(&mut group, "slot_flag", place);
    group.finish();
}

/// The criterion group (in a private module: the macro's `pub fn` takes no
/// doc comment).
mod group {
    use super::*;

    criterion_group! {
        name = benches;
        config = Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(2));
        targets = handshakes
    }
}

criterion_main!(group::benches);
