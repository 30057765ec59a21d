//! Point-to-point conformance suite, modeled on what MPICH's
//! `test/mpi/pt2pt` checks: floods without loss, wildcard ordering, probe,
//! size mismatches, synchronous sends, many messages in flight, cancel,
//! communicator isolation, truncation, exchanges that must not deadlock and
//! the multi-request completion calls.
//!
//! Every scenario runs under every configuration of [`cases`]: the eager
//! limit forced down to 0 and 1 bytes (nearly everything rendezvous), the
//! default, and 32 KiB (nearly everything eager), with one credit per peer
//! in some, and rendezvous both single-copy (cross-memory attach) and
//! streamed through the slot ring. Ranks are threads (`Comm::threads_on`),
//! and every configuration runs once per transport: shared memory, TCP
//! between every pair, a mixed job (two pretend hosts: shared memory
//! within each, TCP between them), and RDMA over the soft RC NIC with
//! rendezvous by RDMA WRITE and by RDMA READ, where `rnr_retry = 0` makes
//! any receiver-not-ready fail the run (`TANDEM_CONFORMANCE_LINKS=soft-rdma`
//! runs only the named transports).

mod common;
use common::pattern;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use tandem_core::sync::{AtomicBool, Ordering};
use tandem_driver::{
    Comm, Config, Error, Layout, Links, Request, Result, Status, Tag, WaitPolicy, ANY_SOURCE,
    ANY_TAG, TAG_UB,
};

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// One configuration a scenario runs under.
struct Case {
    name: &'static str,
    layout: Layout,
    cma: bool,
}

impl Case {
    fn eager(&self) -> usize {
        self.layout.eager_limit as usize
    }
}

/// Set in the ranks that `across_hosts` starts: a scenario then runs once
/// in this process, as one rank of a launched job.
const PROCESS_MODE: &str = "TANDEM_CONFORMANCE_PROCESS";

/// The no-progress timeout of the scenarios (a hang fails in this time).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The configurations every scenario runs under.
fn cases() -> Vec<Case> {
    let d = Layout::default();
    let big_eager = Layout {
        eager_limit: 32 << 10,
        lines: 4096,
        ..d
    };
    vec![
        Case {
            name: "eager=0 cma",
            layout: Layout {
                eager_limit: 0,
                ..d
            },
            cma: true,
        },
        Case {
            name: "eager=0 stream",
            layout: Layout {
                eager_limit: 0,
                ..d
            },
            cma: false,
        },
        Case {
            name: "eager=1 credits=1 stream small-slots",
            layout: Layout {
                eager_limit: 1,
                credits: 1,
                slot_steps: 4,
                slot_bytes: 8192,
                ..d
            },
            cma: false,
        },
        Case {
            name: "default cma",
            layout: d,
            cma: true,
        },
        Case {
            name: "default stream",
            layout: d,
            cma: false,
        },
        Case {
            name: "default credits=1 cma",
            layout: Layout { credits: 1, ..d },
            cma: true,
        },
        Case {
            name: "no cells (eager payloads all in lines)",
            layout: Layout { cells: 0, ..d },
            cma: false,
        },
        Case {
            name: "one cell from 64 B, credits=4",
            layout: Layout {
                cells: 1,
                cell_min: 64,
                credits: 4,
                ..d
            },
            cma: false,
        },
        Case {
            name: "eager=32K cma",
            layout: big_eager,
            cma: true,
        },
        Case {
            name: "eager=32K stream",
            layout: big_eager,
            cma: false,
        },
    ]
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic)".to_string()
    }
}

/// Runs `f` on `n` ranks (threads) under every configuration of
/// [`cases`]; fails the test if any rank returned an error or panicked.
fn run_all(test: &str, n: usize, f: impl Fn(&Comm, &Case) -> Result<()> + Sync) {
    run_cases(test, n, cases(), TIMEOUT, f)
}

/// Runs `f` on `n` ranks under each of `cases` with the no-progress
/// `timeout`; after all of them, fails the test naming every failing
/// configuration and each failing rank's error.
fn run_cases(
    test: &str,
    n: usize,
    cases: Vec<Case>,
    timeout: Duration,
    f: impl Fn(&Comm, &Case) -> Result<()> + Sync,
) {
    if std::env::var_os(PROCESS_MODE).is_some() {
        // A rank of a job started by `across_hosts`: run once, here.
        let comm = Comm::from_env().expect("join the job");
        assert_eq!(comm.size(), n, "{test} needs {n} ranks");
        let case = Case {
            name: "default, from the environment",
            layout: Layout::from_env().expect("layout"),
            cma: false,
        };
        if let Err(e) = f(&comm, &case) {
            panic!("{test}: rank {}: {e}", comm.rank());
        }
        return;
    }
    let total = Instant::now();
    let mut failures = Vec::new();
    let mut runs = 0;
    let only = std::env::var("TANDEM_CONFORMANCE_LINKS").unwrap_or_default();
    let transports: Vec<(&str, Links)> = [
        ("shm", Links::Shm),
        ("tcp", Links::Tcp),
        ("shm+tcp", Links::Mixed { hosts: 2 }),
        ("soft-rdma", Links::Soft),
        ("soft-rdma-read", Links::SoftRead),
    ]
    .into_iter()
    .filter(|(name, _)| only.is_empty() || only.split(',').any(|o| o == *name))
    .collect();
    let rnr_before = tandem_fabric::soft::rnr_events_total();
    for (case, (tname, links)) in cases
        .iter()
        .flat_map(|c| transports.iter().map(move |t| (c, t)))
    {
        // Cross-memory attach is a shared-memory feature: once is enough.
        if case.cma && *links != Links::Shm {
            continue;
        }
        runs += 1;
        if let Err(e) = case.layout.validate() {
            panic!("{test}: configuration [{}] is invalid: {e}", case.name);
        }
        let cfg = Config::default()
            .wait(WaitPolicy::SHARED_CORES)
            .timeout(timeout)
            .cma(case.cma);
        let t = Instant::now();
        let out = Comm::threads_on(n, *links, &case.layout, cfg, |comm| {
            let rank = comm.rank();
            match catch_unwind(AssertUnwindSafe(|| f(&comm, case))) {
                Ok(r) => r,
                Err(p) => Err(Error::from(std::io::Error::other(format!(
                    "rank {rank} panicked: {}",
                    panic_message(&*p)
                )))),
            }
        });
        let failed: Vec<String> = out
            .iter()
            .enumerate()
            .filter_map(|(r, res)| res.as_ref().err().map(|e| format!("rank {r}: {e}")))
            .collect();
        if failed.is_empty() {
            eprintln!(
                "{test}: [{} over {tname}] ok in {:.2?}",
                case.name,
                t.elapsed()
            );
        } else {
            let msg = format!(
                "configuration [{} over {tname}] (layout {:?}, cma {}) FAILED after {:.2?}:\n    {}",
                case.name,
                case.layout,
                case.cma,
                t.elapsed(),
                failed.join("\n    ")
            );
            eprintln!("{test}: {msg}");
            failures.push(msg);
        }
    }
    // Receiver-not-ready events anywhere in this process while the suite
    // ran (other tests of this binary run alongside, so this counts theirs
    // too; any at all is a bug).
    let rnr = tandem_fabric::soft::rnr_events_total() - rnr_before;
    eprintln!("{test}: receiver-not-ready events on the soft RDMA fabric: {rnr}");
    assert_eq!(
        rnr, 0,
        "{test}: the soft RDMA fabric saw receiver-not-ready"
    );
    assert!(
        failures.is_empty(),
        "{test}: {} of {} configurations failed:\n  {}",
        failures.len(),
        runs,
        failures.join("\n  ")
    );
    eprintln!("{test}: all configurations ok in {:.2?}", total.elapsed());
}

use tandem_core::rng::mix;

/// Compares payloads without printing them (they may be MiBs).
fn check_bytes(what: impl Display, got: &[u8], want: &[u8]) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: payload differs: got {} bytes, want {}, first differing byte at {first:?}",
            got.len(),
            want.len()
        );
    }
}

fn check_status(what: impl Display, st: Status, source: usize, tag: Tag, len: usize) {
    assert_eq!(st, Status { source, tag, len }, "{what}: wrong status");
}

/// Collects a scope's requests created in a loop.
fn all<T>(it: impl IntoIterator<Item = Result<T>>) -> Result<Vec<T>> {
    it.into_iter().collect()
}

// ---------------------------------------------------------------------------
// 1. Send flood without loss
// ---------------------------------------------------------------------------

const FLOOD_TAGS: [Tag; 3] = [0, 7, TAG_UB];

/// Mixed sizes across the eager threshold, with the threshold itself and
/// its neighbours and empty messages often.
fn flood_len(i: usize, eager: usize) -> usize {
    let span = (2 * eager).max(128);
    match i % 10 {
        0 => eager,
        1 => eager + 1,
        2 => 0,
        3 => eager.saturating_sub(1),
        _ => (mix(i as u64) % (span as u64 + 1)) as usize,
    }
}

fn flood_tag(i: usize) -> Tag {
    FLOOD_TAGS[(mix(i as u64 ^ 0xF00D) % 3) as usize]
}

#[test]
fn send_flood_without_loss() {
    // Phase 1: blocking sends received in order with a mix of wildcards.
    // Phase 2: windows of non-blocking sends whose receives are all posted
    // at once, grouped by tag, so matching must follow per-tag send order.
    const BLOCKING: usize = 1000;
    const WINDOW: usize = 50;
    const WINDOWS: usize = 20;
    run_all("send_flood_without_loss", 2, |comm, case| {
        let e = case.eager();
        let max = (2 * e).max(128) + 1;
        let msg = |i: usize| pattern(flood_len(i, e), i as u64);
        let window = |w: usize| BLOCKING + w * WINDOW..BLOCKING + (w + 1) * WINDOW;
        if comm.rank() == 0 {
            for i in 0..BLOCKING {
                comm.send(&msg(i), 1, flood_tag(i))?;
            }
            for w in 0..WINDOWS {
                let ids: Vec<usize> = window(w).collect();
                let msgs: Vec<Vec<u8>> = ids.iter().map(|&i| msg(i)).collect();
                comm.scope(|s| {
                    let reqs = all(ids
                        .iter()
                        .zip(&msgs)
                        .map(|(&i, m)| s.isend(m, 1, flood_tag(i))))?;
                    Request::wait_all_vec(reqs)
                })??;
            }
        } else {
            let mut buf = vec![0u8; max];
            for i in 0..BLOCKING {
                let tag = flood_tag(i);
                let (src, rtag) = match i % 4 {
                    0 => (ANY_SOURCE, ANY_TAG),
                    1 => (0, ANY_TAG),
                    2 => (ANY_SOURCE, tag),
                    _ => (0, tag),
                };
                let st = comm.recv(&mut buf, src, rtag)?;
                let want = msg(i);
                check_status(format_args!("message {i}"), st, 0, tag, want.len());
                check_bytes(format_args!("message {i}"), &buf[..st.len], &want);
            }
            for w in 0..WINDOWS {
                // Post by tag (last tag first), each tag's in send order.
                let mut order: Vec<usize> = window(w).collect();
                order.sort_by_key(|&i| (std::cmp::Reverse(flood_tag(i)), i));
                let mut bufs: Vec<Vec<u8>> =
                    order.iter().map(|&i| vec![0u8; flood_len(i, e)]).collect();
                let sts = comm.scope(|s| {
                    let reqs = all(bufs
                        .iter_mut()
                        .zip(&order)
                        .map(|(b, &i)| s.irecv(b, 0, flood_tag(i))))?;
                    Request::wait_all_vec(reqs)
                })??;
                for ((st, b), &i) in sts.iter().zip(&bufs).zip(&order) {
                    check_status(format_args!("message {i}"), *st, 0, flood_tag(i), b.len());
                    check_bytes(format_args!("message {i}"), b, &msg(i));
                }
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// 2. ANY_SOURCE + ANY_TAG keep each sender's order
// ---------------------------------------------------------------------------

/// Message `seq` of `sender`: its length, tag and bytes (the sequence
/// number in the first four bytes when there is room).
fn fan_len(sender: usize, seq: usize, eager: usize) -> usize {
    match (seq + sender) % 7 {
        0 => 0,
        1 => eager,
        2 => eager + 1,
        3 => 4,
        _ => (mix((sender * 100_000 + seq) as u64) % ((2 * eager).max(64) as u64 + 1)) as usize,
    }
}

fn fan_tag(seq: usize) -> Tag {
    (seq % 5) as Tag
}

fn fan_msg(sender: usize, seq: usize, eager: usize) -> Vec<u8> {
    let mut m = pattern(fan_len(sender, seq, eager), (sender * 100_000 + seq) as u64);
    if m.len() >= 4 {
        m[..4].copy_from_slice(&(seq as u32).to_le_bytes());
    }
    m
}

#[test]
fn any_source_any_tag_keep_per_sender_order() {
    const PER_SENDER: usize = 300;
    const N: usize = 4;
    run_all(
        "any_source_any_tag_keep_per_sender_order",
        N,
        |comm, case| {
            let e = case.eager();
            let me = comm.rank();
            if me != 0 {
                for seq in 0..PER_SENDER {
                    comm.send(&fan_msg(me, seq, e), 0, fan_tag(seq))?;
                }
                return Ok(());
            }
            let mut buf = vec![0u8; (2 * e).max(64) + 2];
            let mut next = [0usize; N];
            for j in 0..(N - 1) * PER_SENDER {
                // Mostly full wildcards; every fifth receive names a sender
                // that still has messages (with any tag).
                let pick = j / 5 % (N - 1) + 1;
                let src = if j % 5 == 4 && next[pick] < PER_SENDER {
                    pick
                } else {
                    ANY_SOURCE
                };
                let st = comm.recv(&mut buf, src, ANY_TAG)?;
                let s = st.source;
                assert!((1..N).contains(&s), "receive {j}: source {s}");
                if src != ANY_SOURCE {
                    assert_eq!(s, src, "receive {j}: asked for rank {src}");
                }
                let seq = next[s];
                assert!(seq < PER_SENDER, "rank {s} sent more than {PER_SENDER}");
                if st.len >= 4 {
                    let got = u32::from_le_bytes(buf[..4].try_into().unwrap());
                    assert_eq!(
                        got as usize, seq,
                        "receive {j}: from rank {s} got message {got}, expected {seq} (overtaken)"
                    );
                }
                let want = fan_msg(s, seq, e);
                let what = format!("receive {j}: rank {s} message {seq}");
                check_status(&what, st, s, fan_tag(seq), want.len());
                check_bytes(&what, &buf[..st.len], &want);
                next[s] += 1;
            }
            assert!(next[1..].iter().all(|&c| c == PER_SENDER), "{next:?}");
            // Nothing extra arrived.
            assert_eq!(comm.iprobe(ANY_SOURCE, ANY_TAG)?, None);
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// 3. Probe of a message that arrives later
// ---------------------------------------------------------------------------

#[test]
fn probe_waits_for_a_later_message() {
    const GO: Tag = 1000;
    run_all("probe_waits_for_a_later_message", 2, |comm, case| {
        let e = case.eager();
        let sizes = [0, 1, e, e + 1, 1 << 20];
        for (k, &len) in sizes.iter().enumerate() {
            let tag = 40 + k as Tag;
            let seed = 300 + k as u64;
            if comm.rank() == 0 {
                let mut go = [0u8; 1];
                comm.recv(&mut go, 1, GO)?;
                // Let rank 1 block in probe first.
                std::thread::sleep(Duration::from_millis(10));
                comm.send(&pattern(len, seed), 1, tag)?;
            } else {
                // Rank 0 sends nothing before our go.
                assert_eq!(comm.iprobe(ANY_SOURCE, ANY_TAG)?, None, "size {len}");
                assert_eq!(comm.iprobe(0, tag)?, None, "size {len}");
                comm.send(&[], 0, GO)?;
                let st = comm.probe(ANY_SOURCE, ANY_TAG)?;
                check_status(format_args!("probe, size {len}"), st, 0, tag, len);
                // Probing does not consume; other tags do not see it.
                assert_eq!(comm.iprobe(0, tag)?, Some(st), "size {len}");
                assert_eq!(comm.iprobe(ANY_SOURCE, ANY_TAG)?, Some(st), "size {len}");
                assert_eq!(comm.iprobe(0, tag + 100)?, None, "size {len}");
                assert_eq!(comm.probe(0, tag)?, st, "size {len}");
                // Receive with exactly the probed size.
                let mut buf = vec![0u8; st.len];
                let got = comm.recv(&mut buf, st.source, st.tag)?;
                assert_eq!(got, st, "size {len}");
                check_bytes(format_args!("size {len}"), &buf, &pattern(len, seed));
                assert_eq!(comm.iprobe(ANY_SOURCE, ANY_TAG)?, None, "size {len}");
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// 4. Tiny message into a huge receive
// ---------------------------------------------------------------------------

#[test]
fn tiny_message_into_huge_receive() {
    const HUGE: usize = 4 << 20;
    const FILL: u8 = 0xEE;
    run_all("tiny_message_into_huge_receive", 2, |comm, case| {
        let e = case.eager();
        let sizes = [1, 0, 7, e, e + 1];
        if comm.rank() == 0 {
            for (k, &len) in sizes.iter().enumerate() {
                comm.send(&pattern(len, 400 + k as u64), 1, k as Tag)?;
            }
            return Ok(());
        }
        let mut buf = vec![FILL; HUGE];
        for (k, &len) in sizes.iter().enumerate() {
            let (src, tag) = if k % 2 == 0 {
                (0, k as Tag)
            } else {
                (ANY_SOURCE, ANY_TAG)
            };
            let st = comm.recv(&mut buf, src, tag)?;
            check_status(format_args!("size {len}"), st, 0, k as Tag, len);
            check_bytes(
                format_args!("size {len}"),
                &buf[..len],
                &pattern(len, 400 + k as u64),
            );
            assert!(
                buf[len..].iter().all(|&b| b == FILL),
                "size {len}: bytes past the message were written"
            );
            buf[..len].fill(FILL);
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// 5. Huge messages with wildcards
// ---------------------------------------------------------------------------

/// (length, tag) of message `seq` (0..4) that rank 1 or 2 sends to rank 0.
fn huge_plan(sender: usize, seq: usize) -> (usize, Tag) {
    let len = match (sender, seq % 2) {
        (1, 0) => 4 << 20,
        (1, _) => (2 << 20) + 3,
        (_, 0) => (3 << 20) + 5,
        (_, _) => 2 << 20,
    };
    (len, (10 * sender + seq) as Tag)
}

#[test]
fn huge_messages_with_wildcards() {
    const BIG: usize = 4 << 20;
    run_all("huge_messages_with_wildcards", 3, |comm, _case| {
        let me = comm.rank();
        let seed = |s: usize, seq: usize| (500 + s * 10 + seq) as u64;
        if me != 0 {
            for seq in 0..4 {
                let (len, tag) = huge_plan(me, seq);
                comm.send(&pattern(len, seed(me, seq)), 0, tag)?;
            }
            return Ok(());
        }
        // Each sender's messages must come in its order, however the two
        // senders interleave.
        let mut next = [0usize; 3];
        let mut check = |j: usize, st: Status, b: &[u8]| {
            let s = st.source;
            assert!(s == 1 || s == 2, "receive {j}: source {s}");
            let seq = next[s];
            assert!(seq < 4, "receive {j}: a fifth message from rank {s}");
            let (len, tag) = huge_plan(s, seq);
            check_status(format_args!("receive {j}"), st, s, tag, len);
            check_bytes(
                format_args!("receive {j}: rank {s} message {seq}"),
                &b[..len],
                &pattern(len, seed(s, seq)),
            );
            next[s] += 1;
        };
        // Blocking wildcard receives into one 4 MiB buffer.
        let mut buf = vec![0u8; BIG];
        for j in 0..4 {
            let st = comm.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            check(j, st, &buf);
        }
        // Four wildcard receives posted at once; they match in arrival
        // order, so their statuses in posting order keep each sender's order.
        let mut bufs = vec![vec![0u8; BIG]; 4];
        let sts = comm.scope(|s| {
            let reqs = all(bufs.iter_mut().map(|b| s.irecv(b, ANY_SOURCE, ANY_TAG)))?;
            Request::wait_all_vec(reqs)
        })??;
        for (j, (st, b)) in sts.iter().zip(&bufs).enumerate() {
            check(4 + j, *st, b);
        }
        assert_eq!(next, [0, 4, 4]);
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// 6. Synchronous send waits for the receiver; an eager send does not
// ---------------------------------------------------------------------------

#[test]
fn ssend_completes_only_after_the_receive_is_posted() {
    // Ranks are threads: these flags order their steps without any timing.
    // POSTED: rank 1 is about to post the matching receive. GO: rank 0
    // has checked what it must see before that receive exists; rank 1
    // posts only after it.
    static POSTED: AtomicBool = AtomicBool::new(false);
    static GO: AtomicBool = AtomicBool::new(false);
    const START: Tag = 1000;
    fn wait_for(flag: &AtomicBool) {
        let t0 = Instant::now();
        while !flag.load(Ordering::Acquire) {
            assert!(t0.elapsed() < TIMEOUT, "the other rank never got there");
            std::thread::yield_now();
        }
    }
    run_all(
        "ssend_completes_only_after_the_receive_is_posted",
        2,
        |comm, case| {
            let e = case.eager();
            let sizes = [e.min(8), (e + 1).max(64 << 10)];
            if comm.rank() == 0 {
                for (k, &len) in sizes.iter().enumerate() {
                    let msg = pattern(len, 600 + k as u64);
                    // Blocking ssend: returns only once rank 1 posted.
                    POSTED.store(false, Ordering::Release);
                    comm.send(&[], 1, START)?;
                    comm.ssend(&msg, 1, 10 + k as Tag)?;
                    assert!(
                        POSTED.load(Ordering::Acquire),
                        "ssend of {len} bytes returned before the receive was posted"
                    );
                    // issend: pending until rank 1 posts, which it does
                    // only after this check.
                    GO.store(false, Ordering::Release);
                    comm.send(&[], 1, START)?;
                    comm.scope(|s| {
                        let mut r = s.issend(&msg, 1, 20 + k as Tag)?;
                        for _ in 0..100 {
                            assert!(
                                r.test()?.is_none(),
                                "issend of {len} bytes completed before the receive was posted"
                            );
                        }
                        GO.store(true, Ordering::Release);
                        r.wait()
                    })??;
                }
                // A standard send of an eager-sized message completes before
                // the receive exists (rank 1's start message carries back the
                // credits of everything before).
                let len = e;
                let mut b = [0u8; 1];
                GO.store(false, Ordering::Release);
                comm.recv(&mut b, 1, START)?;
                comm.send(&pattern(len, 699), 1, 30)?;
                GO.store(true, Ordering::Release);
            } else {
                let mut b = [0u8; 1];
                for (k, &len) in sizes.iter().enumerate() {
                    let want = pattern(len, 600 + k as u64);
                    for (i, tag) in [10 + k as Tag, 20 + k as Tag].into_iter().enumerate() {
                        comm.recv(&mut b, 0, START)?;
                        if i == 0 {
                            // Give a wrong ssend time to return early.
                            std::thread::sleep(Duration::from_millis(20));
                            POSTED.store(true, Ordering::Release);
                        } else {
                            wait_for(&GO);
                        }
                        let mut buf = vec![0u8; len];
                        let st = comm.recv(&mut buf, 0, tag)?;
                        check_status(format_args!("ssend tag {tag}"), st, 0, tag, len);
                        check_bytes(format_args!("ssend tag {tag}"), &buf, &want);
                    }
                }
                comm.send(&[], 0, START)?;
                // If the eager send waited for this receive, rank 0 never
                // sets GO and both ranks time out.
                wait_for(&GO);
                let mut buf = vec![0u8; e];
                let st = comm.recv(&mut buf, 0, 30)?;
                check_status("eager send", st, 0, 30, e);
                check_bytes("eager send", &buf, &pattern(e, 699));
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// 7. Many large messages in flight
// ---------------------------------------------------------------------------

#[test]
fn many_large_messages_in_flight() {
    const COUNT: usize = 32;
    const LEN: usize = 256 << 10;
    run_all("many_large_messages_in_flight", 2, |comm, _case| {
        if comm.rank() == 0 {
            let msgs: Vec<Vec<u8>> = (0..COUNT).map(|i| pattern(LEN, 700 + i as u64)).collect();
            let sts = comm.scope(|s| {
                let reqs = all(msgs
                    .iter()
                    .enumerate()
                    .map(|(i, m)| s.isend(m, 1, i as Tag)))?;
                Request::wait_all_vec(reqs)
            })??;
            assert_eq!(sts.len(), COUNT);
        } else {
            let mut bufs = vec![vec![0u8; LEN]; COUNT];
            // Receives posted in reverse order of the sends, distinct tags.
            let sts = comm.scope(|s| {
                let reqs = all(bufs
                    .iter_mut()
                    .enumerate()
                    .rev()
                    .map(|(i, b)| s.irecv(b, 0, i as Tag)))?;
                Request::wait_all_vec(reqs)
            })??;
            for (k, st) in sts.iter().enumerate() {
                let i = COUNT - 1 - k;
                check_status(format_args!("message {i}"), *st, 0, i as Tag, LEN);
            }
            for (i, b) in bufs.iter().enumerate() {
                check_bytes(
                    format_args!("message {i}"),
                    b,
                    &pattern(LEN, 700 + i as u64),
                );
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// 8. Cancel
// ---------------------------------------------------------------------------

#[test]
fn cancel_unmatched_and_matched_receives() {
    const GO: Tag = 1000;
    run_all("cancel_unmatched_and_matched_receives", 2, |comm, case| {
        let e = case.eager();
        let sizes = [e.min(16), (e + 1).max(300 << 10)];
        if comm.rank() == 0 {
            let mut b = [0u8; 1];
            comm.recv(&mut b, 1, GO)?;
            // The message the cancelled receive of tag 77 must not take.
            comm.send(&pattern(5, 877), 1, 77)?;
            for (k, &len) in sizes.iter().enumerate() {
                comm.send(&pattern(len, 800 + k as u64), 1, 5)?;
            }
            // Cancelling a send is not supported: false, and it completes.
            let m = pattern(e + 1, 899);
            comm.scope(|s| {
                let mut r = s.isend(&m, 1, 6)?;
                assert!(!r.cancel()?, "cancel of a send returned true");
                r.wait()
            })??;
            return Ok(());
        }
        let mut buf = vec![0u8; 1 << 20];
        // Unmatched receives (nothing is sent before our go): cancelled.
        for (src, tag) in [(ANY_SOURCE, ANY_TAG), (0, 77), (ANY_SOURCE, 77)] {
            comm.scope(|s| {
                let mut r = s.irecv(&mut buf, src, tag)?;
                assert!(r.cancel()?, "cancel of an unmatched receive returned false");
                assert_eq!(r.wait(), Err(Error::Cancelled));
                Ok::<_, Error>(())
            })??;
        }
        comm.send(&[], 0, GO)?;
        // The cancelled receives took nothing.
        let st = comm.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
        check_status("after cancel", st, 0, 77, 5);
        check_bytes("after cancel", &buf[..5], &pattern(5, 877));
        // Matched receives: cancel is too late, the data arrives.
        for (k, &len) in sizes.iter().enumerate() {
            let st = comm.probe(0, 5)?;
            assert_eq!(st.len, len);
            let st = comm.scope(|s| {
                let mut r = s.irecv(&mut buf, 0, 5)?;
                assert!(!r.cancel()?, "cancel of a matched receive returned true");
                r.wait()
            })??;
            check_status(format_args!("matched size {len}"), st, 0, 5, len);
            check_bytes(
                format_args!("matched size {len}"),
                &buf[..len],
                &pattern(len, 800 + k as u64),
            );
        }
        let st = comm.recv(&mut buf, 0, 6)?;
        check_status("cancelled send", st, 0, 6, e + 1);
        check_bytes("cancelled send", &buf[..e + 1], &pattern(e + 1, 899));
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// 9. dup isolation
// ---------------------------------------------------------------------------

/// Rank 0 sends on two dups of the world and then on the world, all
/// pending at once and with the same tag; rank 1 receives on the world
/// first, with wildcards, while the dup messages wait unexpected.
fn dup_scenario(world: &Comm, case: &Case) -> Result<()> {
    const TAG: Tag = 3;
    const DONE: Tag = 1000;
    let e = case.eager();
    let d1 = world.dup()?;
    let d2 = d1.dup()?;
    assert!(world.context() != d1.context() && d1.context() != d2.context());
    // Length tells the communicators apart: world len, d1 len+1, d2 len+2.
    for (k, &len) in [e.min(8), e + 1, 1 << 20].iter().enumerate() {
        let seed = |c: u64| 900 + 10 * k as u64 + c;
        if world.rank() == 0 {
            let (m1, m2, m0) = (
                pattern(len + 1, seed(1)),
                pattern(len + 2, seed(2)),
                pattern(len, seed(0)),
            );
            // Sent d1 first, then d2, then world; all pending at once.
            d1.scope(|s1| {
                let a = s1.isend(&m1, 1, TAG)?;
                d2.scope(|s2| {
                    let b = s2.isend(&m2, 1, TAG)?;
                    world.scope(|s0| s0.isend(&m0, 1, TAG)?.wait())??;
                    b.wait()
                })??;
                a.wait()
            })??;
            // Next size only once rank 1 is done with this one.
            world.recv(&mut [], 1, DONE)?;
        } else {
            let mut buf = vec![0u8; len + 2];
            // The world wildcard receive skips the earlier d1/d2 messages.
            let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            check_status(format_args!("world, size {len}"), st, 0, TAG, len);
            check_bytes("world", &buf[..len], &pattern(len, seed(0)));
            // Both dup messages arrive; the world's and each other's
            // probes do not see them.
            let p1 = d1.probe(ANY_SOURCE, ANY_TAG)?;
            check_status("d1 probe", p1, 0, TAG, len + 1);
            let p2 = d2.probe(ANY_SOURCE, ANY_TAG)?;
            check_status("d2 probe", p2, 0, TAG, len + 2);
            assert_eq!(world.iprobe(ANY_SOURCE, ANY_TAG)?, None, "size {len}");
            // Receive d2 before d1 (they were sent d1 first).
            let st = d2.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            check_status(format_args!("d2, size {len}"), st, 0, TAG, len + 2);
            check_bytes("d2", &buf[..len + 2], &pattern(len + 2, seed(2)));
            assert_eq!(d2.iprobe(ANY_SOURCE, ANY_TAG)?, None);
            let st = d1.recv(&mut buf, 0, TAG)?;
            check_status(format_args!("d1, size {len}"), st, 0, TAG, len + 1);
            check_bytes("d1", &buf[..len + 1], &pattern(len + 1, seed(1)));
            world.send(&[], 0, DONE)?;
        }
    }
    // Posted receives too: a world wildcard receive posted before the dup
    // message arrives must not take it.
    if world.rank() == 0 {
        world.recv(&mut [], 1, DONE)?;
        d1.send(b"dup", 1, TAG)?;
        world.send(b"world!", 1, TAG)?;
    } else {
        let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
        let (sa, sb) = world.scope(|s| {
            let ra = s.irecv(&mut a, ANY_SOURCE, ANY_TAG)?;
            let sb = d1.scope(|s1| {
                let rb = s1.irecv(&mut b, ANY_SOURCE, ANY_TAG)?;
                world.send(&[], 0, DONE)?;
                rb.wait()
            })??;
            Ok::<_, Error>((ra.wait()?, sb))
        })??;
        check_status("posted world", sa, 0, TAG, 6);
        assert_eq!(&a[..6], b"world!");
        check_status("posted d1", sb, 0, TAG, 3);
        assert_eq!(&b[..3], b"dup");
    }
    Ok(())
}

/// Every configuration, one credit per peer included: a message on the
/// dup'd communicator that waits unreceived must not hold back the world
/// message whose receive is posted.
#[test]
fn dup_traffic_never_matches_world_receives() {
    run_cases(
        "dup_traffic_never_matches_world_receives",
        2,
        cases(),
        TIMEOUT,
        dup_scenario,
    );
}

// ---------------------------------------------------------------------------
// 10. Truncation
// ---------------------------------------------------------------------------

#[test]
fn truncation_delivers_a_prefix_and_keeps_the_next_message() {
    run_all(
        "truncation_delivers_a_prefix_and_keeps_the_next_message",
        2,
        |comm, case| {
            let e = case.eager();
            // (message length, receive buffer length, how to receive)
            let plan: Vec<(usize, usize, u8)> = vec![
                (e.max(1), e.max(1) / 2, 0),  // eager (or barely not)
                (e.max(1), 0, 1),             // into an empty buffer, wildcard
                (e + 1, e, 0),                // just over the eager limit
                (1 << 20, (1 << 19) + 1, 1),  // rendezvous, wildcard
                ((3 << 20) + 7, 100_000, 2),  // rendezvous, irecv
                ((1 << 20) + 1, e.max(1), 0), // rendezvous into an eager-sized buffer
            ];
            let next_len = |k: usize| (k * 97) % (e + 3) + 1;
            if comm.rank() == 0 {
                for (k, &(len, _, _)) in plan.iter().enumerate() {
                    // The sender sees no error.
                    comm.send(&pattern(len, 1000 + k as u64), 1, 1)?;
                    comm.send(&pattern(next_len(k), 1100 + k as u64), 1, 1)?;
                }
                return Ok(());
            }
            for (k, &(len, got, how)) in plan.iter().enumerate() {
                let mut buf = vec![0x55u8; got];
                let r = match how {
                    0 => comm.recv(&mut buf, 0, 1),
                    1 => comm.recv(&mut buf, ANY_SOURCE, ANY_TAG),
                    _ => comm.scope(|s| s.irecv(&mut buf, 0, 1)?.wait())?,
                };
                assert_eq!(
                    r,
                    Err(Error::Truncated {
                        needed: len,
                        got,
                        source: 0,
                        tag: 1
                    }),
                    "message of {len} bytes into {got}"
                );
                check_bytes(
                    format_args!("truncated prefix of {len} into {got}"),
                    &buf,
                    &pattern(len, 1000 + k as u64)[..got],
                );
                let n = next_len(k);
                let mut nb = vec![0u8; n + 10];
                let st = comm.recv(&mut nb, 0, 1)?;
                check_status(format_args!("message after {len} into {got}"), st, 0, 1, n);
                check_bytes(
                    format_args!("message after {len} into {got}"),
                    &nb[..n],
                    &pattern(n, 1100 + k as u64),
                );
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// 11. Exchanges that must not deadlock
// ---------------------------------------------------------------------------

#[test]
fn sendrecv_ring_and_group_exchanges_complete() {
    const N: usize = 4;
    run_all(
        "sendrecv_ring_and_group_exchanges_complete",
        N,
        |comm, case| {
            let e = case.eager();
            let me = comm.rank();
            let (right, left) = ((me + 1) % N, (me + N - 1) % N);
            let seed =
                |from: usize, k: usize, dir: usize| (1200 + 100 * dir + 10 * k + from) as u64;
            for (k, &len) in [e.min(16), e + 1, 1 << 20, 3 << 20].iter().enumerate() {
                // Everybody sends right and receives from the left at once.
                let out = pattern(len, seed(me, k, 0));
                let mut inb = vec![0u8; len];
                let st = comm.sendrecv(&out, right, 1, &mut inb, left, 1)?;
                check_status(format_args!("ring right, size {len}"), st, left, 1, len);
                check_bytes("ring right", &inb, &pattern(len, seed(left, k, 0)));
                // And back, receiving from any source.
                let out = pattern(len, seed(me, k, 1));
                // (Not ANY_TAG: the left neighbour may already be sending the
                // next size's tag-1 message.)
                let tag = 2 + 10 * k as Tag;
                let st = comm.sendrecv(&out, left, tag, &mut inb, ANY_SOURCE, tag)?;
                check_status(format_args!("ring left, size {len}"), st, right, tag, len);
                check_bytes("ring left", &inb, &pattern(len, seed(right, k, 1)));
                // With oneself.
                let out = pattern(len, seed(me, k, 2));
                let st = comm.sendrecv(&out, me, 3, &mut inb, me, 3)?;
                check_status(format_args!("self, size {len}"), st, me, 3, len);
                check_bytes("self", &inb, &out);
            }
            // Pairs: both ssend first, then receive, in a group.
            let len = 2 << 20;
            let peer = me ^ 1;
            let mine = pattern(len, 1300 + me as u64);
            let mut theirs = vec![0u8; len];
            comm.group(|g| {
                g.ssend(&mine, peer, 4)?;
                g.recv(&mut theirs, peer, 4)
            })?;
            check_bytes("group pair", &theirs, &pattern(len, 1300 + peer as u64));
            // All to all with synchronous sends, all in one group.
            let len = (e + 1).max(512 << 10);
            let outs: Vec<Vec<u8>> = (0..N)
                .map(|d| pattern(len, (1400 + 10 * me + d) as u64))
                .collect();
            let mut ins = vec![vec![0u8; len]; N];
            comm.group(|g| {
                for (d, m) in outs.iter().enumerate().filter(|&(d, _)| d != me) {
                    g.ssend(m, d, 5)?;
                }
                for (s, b) in ins.iter_mut().enumerate().filter(|&(s, _)| s != me) {
                    g.recv(b, s, 5)?;
                }
                Ok(())
            })?;
            for (s, b) in ins.iter().enumerate().filter(|&(s, _)| s != me) {
                check_bytes(
                    format_args!("all-to-all from {s}"),
                    b,
                    &pattern(len, (1400 + 10 * s + me) as u64),
                );
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// 12. wait_any / test_all / test
// ---------------------------------------------------------------------------

#[test]
fn wait_any_and_test_all() {
    const GO: Tag = 1000;
    run_all("wait_any_and_test_all", 2, |comm, case| {
        let e = case.eager();
        for (k, &len) in [e.min(8), (e + 1).max(200 << 10)].iter().enumerate() {
            let seed = |tag: Tag| (1500 + 100 * k) as u64 + tag as u64;
            if comm.rank() == 1 {
                let mut b = [0u8; 1];
                let scripted: [&[Tag]; 5] = [&[2], &[3, 1], &[10], &[11], &[12]];
                for tags in scripted {
                    comm.recv(&mut b, 0, GO)?;
                    for &t in tags {
                        comm.send(&pattern(len, seed(t)), 0, t)?;
                    }
                }
                continue;
            }
            let go = || comm.send(&[], 1, GO);
            let nap = || std::thread::sleep(Duration::from_millis(10));
            // wait_any
            let mut bufs = vec![vec![0u8; len]; 3];
            comm.scope(|s| {
                let mut reqs = all(bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(i, b)| s.irecv(b, 1, i as Tag + 1).map(Some)))?;
                go()?; // rank 1 sends tag 2 only
                let (i, st) = Request::wait_any(&mut reqs).expect("pending requests");
                assert_eq!(i, 1, "wait_any returned request {i}, only tag 2 was sent");
                check_status("wait_any first", st?, 1, 2, len);
                assert!(reqs[1].is_none(), "finished request still in the array");
                go()?; // tags 3 and 1
                let mut seen = Vec::new();
                while let Some((i, st)) = Request::wait_any(&mut reqs) {
                    check_status(format_args!("wait_any {i}"), st?, 1, i as Tag + 1, len);
                    seen.push(i);
                }
                seen.sort_unstable();
                assert_eq!(seen, [0, 2]);
                Ok::<_, Error>(())
            })??;
            for (i, b) in bufs.iter().enumerate() {
                check_bytes(
                    format_args!("wait_any tag {}", i + 1),
                    b,
                    &pattern(len, seed(i as Tag + 1)),
                );
            }
            // test_all
            assert_eq!(Request::test_all(&mut [])?, Some(vec![]));
            let mut bufs = vec![vec![0u8; len]; 2];
            let sts = comm.scope(|s| {
                let mut reqs = all(bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(i, b)| s.irecv(b, 1, 10 + i as Tag)))?;
                assert_eq!(Request::test_all(&mut reqs)?, None, "nothing sent yet");
                go()?; // tag 10 only
                nap();
                for _ in 0..100 {
                    assert_eq!(Request::test_all(&mut reqs)?, None, "tag 11 not sent yet");
                }
                go()?; // tag 11
                let t0 = Instant::now();
                loop {
                    if let Some(sts) = Request::test_all(&mut reqs)? {
                        break Ok::<_, Error>(sts);
                    }
                    assert!(
                        t0.elapsed() < Duration::from_secs(20),
                        "test_all never true"
                    );
                    std::thread::yield_now();
                }
            })??;
            assert_eq!(sts.len(), 2);
            for (i, st) in sts.iter().enumerate() {
                check_status(format_args!("test_all {i}"), *st, 1, 10 + i as Tag, len);
                check_bytes(
                    format_args!("test_all {i}"),
                    &bufs[i],
                    &pattern(len, seed(10 + i as Tag)),
                );
            }
            // test
            let mut buf = vec![0u8; len];
            let st = comm.scope(|s| {
                let mut r = s.irecv(&mut buf, ANY_SOURCE, 12)?;
                assert_eq!(r.test()?, None, "nothing sent yet");
                go()?;
                let t0 = Instant::now();
                loop {
                    if let Some(st) = r.test()? {
                        break Ok::<_, Error>(st);
                    }
                    assert!(t0.elapsed() < Duration::from_secs(20), "test never true");
                    std::thread::yield_now();
                }
            })??;
            check_status("test", st, 1, 12, len);
            check_bytes("test", &buf, &pattern(len, seed(12)));
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// 13. Unexpected messages beyond the eager credits (MPI progress rule)
// ---------------------------------------------------------------------------

/// Rank 0 starts `credits + 1` non-blocking sends (tags `0..=credits`),
/// rank 1 receives the last one first. MPI's progress rule (a send and a
/// matching receive both started: one of them completes) makes this a
/// correct program. It used to hang: the earlier, unreceived messages held
/// every eager credit, so the last was never sent. Now a sender out of
/// eager credit announces the message as a rendezvous instead.
#[test]
fn unexpected_messages_beyond_the_eager_credits_never_block_a_matchable_one() {
    run_cases(
        "unexpected_messages_beyond_the_eager_credits_never_block_a_matchable_one",
        2,
        cases(),
        Duration::from_secs(5),
        |comm, case| {
            let c = case.layout.credits as usize;
            let len = |i: usize| if i % 2 == 0 { 4 } else { case.eager() + 1 };
            if comm.rank() == 0 {
                let msgs: Vec<Vec<u8>> =
                    (0..=c).map(|i| pattern(len(i), 1600 + i as u64)).collect();
                comm.scope(|s| {
                    let reqs = all(msgs
                        .iter()
                        .enumerate()
                        .map(|(i, m)| s.isend(m, 1, i as Tag)))?;
                    Request::wait_all_vec(reqs)
                })??;
            } else {
                let mut buf = vec![0u8; (case.eager() + 1).max(4)];
                for i in std::iter::once(c).chain(0..c) {
                    let st = comm.recv(&mut buf, 0, i as Tag)?;
                    check_status(format_args!("message {i}"), st, 0, i as Tag, len(i));
                    check_bytes(
                        format_args!("message {i}"),
                        &buf[..len(i)],
                        &pattern(len(i), 1600 + i as u64),
                    );
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// Across hosts: the scenarios as processes on network namespaces
// ---------------------------------------------------------------------------

/// The scenarios that run as separate processes (the ssend scenario orders
/// its threads with in-process flags, so it runs in threads only), with
/// their rank counts.
const PROCESS_SCENARIOS: &[(&str, usize)] = &[
    ("send_flood_without_loss", 2),
    ("any_source_any_tag_keep_per_sender_order", 4),
    ("probe_waits_for_a_later_message", 2),
    ("tiny_message_into_huge_receive", 2),
    ("huge_messages_with_wildcards", 3),
    ("many_large_messages_in_flight", 2),
    ("cancel_unmatched_and_matched_receives", 2),
    ("dup_traffic_never_matches_world_receives", 2),
    ("truncation_delivers_a_prefix_and_keeps_the_next_message", 2),
    ("sendrecv_ring_and_group_exchanges_complete", 4),
    ("wait_any_and_test_all", 2),
    (
        "unexpected_messages_beyond_the_eager_credits_never_block_a_matchable_one",
        2,
    ),
];

/// Every process scenario started by `tandem-run --hosts` on four network
/// namespaces: once with the ranks spread one per host (TCP only), once
/// packed two per host (shared memory within a host through a file the
/// ranks make themselves, TCP between hosts), and twice over the soft
/// RDMA fabric between every pair (`TANDEM_TRANSPORT=soft`, rendezvous by
/// RDMA WRITE one per host, by RDMA READ two per host), where a single
/// receiver-not-ready fails the run.
#[test]
fn across_hosts() {
    if std::env::var_os(PROCESS_MODE).is_some() {
        return;
    }
    let Some(net) = common::netns::for_test(4) else {
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let names: Vec<String> = net.hosts().iter().map(|h| h.name.clone()).collect();
    let mut failures = Vec::new();
    // Below Linux's ephemeral range (32768-60999), so no connection of an
    // earlier scenario can hold the port; each test file has its own band.
    let mut port = 10000 + (std::process::id() % 150) as u16 * 64;
    let passes = [
        (1usize, "auto", "write"),
        (2, "auto", "write"),
        (1, "soft", "write"),
        (2, "soft", "read"),
    ];
    for (per_host, transport, rndv) in passes {
        for &(name, n) in PROCESS_SCENARIOS {
            let hosts = names[..n.div_ceil(per_host)].join(",");
            port += 1;
            let root = format!("{}:{port}", net.hosts()[0].addr);
            let t = Instant::now();
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem-run"))
                .args(["-n", &n.to_string(), "--hosts", &hosts])
                .args(["--exec", net.exec_template(), "--root", &root, "--"])
                .arg(&exe)
                .args([name, "--exact", "--nocapture", "--test-threads=1", "-q"])
                .env(PROCESS_MODE, "1")
                .env("TANDEM_SPIN", "2000")
                .env("TANDEM_TIMEOUT", "30")
                .env("TANDEM_BOOT_TIMEOUT", "30")
                .env("TANDEM_TRANSPORT", transport)
                .env("TANDEM_RDMA_RNDV", rndv)
                .output()
                .unwrap();
            let how = format!(
                "{name} ({n} ranks on {hosts}, TANDEM_TRANSPORT={transport}, rendezvous {rndv})"
            );
            if out.status.success() {
                eprintln!("across_hosts: {how} ok in {:.2?}", t.elapsed());
            } else {
                let msg = format!(
                    "{how} FAILED ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                eprintln!("across_hosts: {msg}");
                failures.push(msg);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
