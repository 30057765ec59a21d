//! Persistent requests (`Scope::send_init` / `recv_init`, `start`, `wait`,
//! `test`, and the blocking `send` / `recv`): MPI's ordering against
//! ordinary traffic to the same peer and tag, wildcards on the other side,
//! eager and rendezvous sizes, truncation, misuse, a dead peer, and (the
//! properties at the end) message sizes that change from start to start
//! through every completion call, over shared memory, TCP and the soft
//! RDMA fabric.

mod common;
use proptest::prelude::*;
use std::time::{Duration, Instant};
use tandem_driver::{
    Comm, Config, Error, Layout, Links, PersistentRecv, PersistentSend, Status, Tag, ANY_SOURCE,
    ANY_TAG,
};

fn cfg() -> Config {
    let mut c = Config::default();
    c.wait.spin = 200;
    c.timeout = Duration::from_secs(60);
    c
}

fn on_threads(n: usize, f: impl Fn(Comm) -> tandem_driver::Result<()> + Sync) {
    for (r, res) in Comm::threads(n, &Layout::default(), cfg(), f)
        .into_iter()
        .enumerate()
    {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

/// Message `i` of a sequence: its number, then a pattern, `len` bytes.
fn msg(i: u64, len: usize) -> Vec<u8> {
    let mut m = common::pattern(len.max(8), i);
    m[..8].copy_from_slice(&i.to_le_bytes());
    m.truncate(len.max(8));
    m
}

fn number(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

#[test]
fn persistent_and_ordinary_sends_to_one_peer_and_tag_arrive_in_order() {
    // Rank 0 mixes persistent sends (blocking form, and start + wait) with
    // ordinary blocking and non-blocking sends, all to rank 1 with tag 5;
    // rank 1 mixes a persistent receive (both forms) with ordinary
    // receives. Whatever the mix, message i is the i-th received. Sizes
    // cover one line, several lines and rendezvous.
    for len in [8, 24, 200, 8192, 100_000] {
        on_threads(2, move |comm| {
            let n = 300u64;
            let mut pbuf = vec![0u8; len];
            if comm.rank() == 0 {
                comm.scope(|s| {
                    let mut p = s.send_init(&mut pbuf, 1, 5)?;
                    for i in 0..n {
                        let m = msg(i, len);
                        match i % 4 {
                            0 => {
                                p.buf_mut().unwrap().copy_from_slice(&m);
                                p.send()?;
                            }
                            1 => {
                                p.buf_mut().unwrap().copy_from_slice(&m);
                                p.start()?;
                                assert!(p.buf_mut().is_none(), "rewritable while started");
                                p.wait()?;
                            }
                            2 => comm.send(&m, 1, 5)?,
                            _ => {
                                comm.scope(|t| t.isend(&m, 1, 5)?.wait())??;
                            }
                        }
                    }
                    Ok::<_, Error>(())
                })??;
            } else {
                comm.scope(|s| {
                    let mut p = s.recv_init(&mut pbuf, 0, 5)?;
                    let mut other = vec![0u8; len];
                    for i in 0..n {
                        let got = match i % 3 {
                            0 => {
                                let st = p.recv()?;
                                assert_eq!((st.source, st.tag, st.len), (0, 5, len));
                                p.data().unwrap().to_vec()
                            }
                            1 => {
                                p.start()?;
                                assert!(p.data().is_none(), "readable while started");
                                let st = p.wait()?;
                                assert_eq!(st.len, len);
                                p.data().unwrap().to_vec()
                            }
                            _ => {
                                comm.recv(&mut other, 0, 5)?;
                                other.clone()
                            }
                        };
                        assert_eq!(number(&got), i, "len {len}: out of order");
                        assert_eq!(got, msg(i, len), "len {len}: message {i} corrupted");
                    }
                    Ok::<_, Error>(())
                })??;
            }
            Ok(())
        });
    }
}

#[test]
fn a_started_persistent_receive_matches_before_receives_posted_after_it() {
    // A persistent receive started before an ordinary receive of the same
    // source and tag takes the first message, even when both messages are
    // there before either is waited for, and even if the later one is
    // waited for first.
    on_threads(2, |comm| {
        if comm.rank() == 0 {
            for round in 0..50u64 {
                comm.recv(&mut [0u8; 1], 1, 9)?; // ready
                comm.send(&msg(2 * round, 8), 1, 3)?;
                comm.send(&msg(2 * round + 1, 8), 1, 3)?;
            }
        } else {
            let mut pbuf = [0u8; 8];
            let mut later = [0u8; 8];
            comm.scope(|s| {
                let mut p = s.recv_init(&mut pbuf, 0, 3)?;
                for round in 0..50u64 {
                    p.start()?;
                    s.comm().scope(|t| {
                        let r = t.irecv(&mut later, 0, 3)?;
                        comm.send(&[1], 0, 9)?;
                        let st = r.wait()?;
                        assert_eq!(st.len, 8);
                        Ok::<_, Error>(())
                    })??;
                    let st = if round % 2 == 0 {
                        p.wait()?
                    } else {
                        loop {
                            if let Some(st) = p.test()? {
                                break st;
                            }
                        }
                    };
                    assert_eq!(st.len, 8);
                    assert_eq!(number(p.data().unwrap()), 2 * round);
                    assert_eq!(number(&later), 2 * round + 1);
                }
                Ok::<_, Error>(())
            })??;
        }
        Ok(())
    });
}

#[test]
fn wildcards_on_either_side_of_persistent_requests() {
    // Ranks 1 and 2 send with persistent sends to rank 0, which receives
    // with wildcards (ordinary receives with ANY_SOURCE and ANY_TAG, then
    // a persistent receive with both wildcards); per sender the order
    // holds, and statuses name the real source and tag.
    on_threads(3, |comm| {
        let n = 200u64;
        if comm.rank() == 0 {
            let mut next = [0u64; 3];
            let mut pbuf = [0u8; 16];
            comm.scope(|s| {
                let mut any = s.recv_init(&mut pbuf, ANY_SOURCE, ANY_TAG)?;
                for k in 0..2 * n {
                    let (st, got) = if k % 2 == 0 {
                        let mut b = [0u8; 16];
                        let st = comm.recv(&mut b, ANY_SOURCE, ANY_TAG)?;
                        (st, b.to_vec())
                    } else {
                        let st = any.recv()?;
                        (st, any.data().unwrap().to_vec())
                    };
                    assert!(st.source == 1 || st.source == 2);
                    assert_eq!(st.tag as usize, 10 + st.source);
                    assert_eq!(st.len, 16);
                    assert_eq!(number(&got), next[st.source], "from {}", st.source);
                    next[st.source] += 1;
                }
                Ok::<_, Error>(())
            })??;
            assert_eq!(next, [0, n, n]);
        } else {
            let r = comm.rank();
            let mut pbuf = [0u8; 16];
            comm.scope(|s| {
                let mut p = s.send_init(&mut pbuf, 0, 10 + r as u32)?;
                for i in 0..n {
                    p.buf_mut().unwrap().copy_from_slice(&msg(i, 16));
                    if i % 2 == 0 {
                        p.send()?;
                    } else {
                        p.start()?;
                        while !p.test()? {}
                    }
                }
                Ok::<_, Error>(())
            })??;
        }
        Ok(())
    });
}

#[test]
fn a_truncated_persistent_receive_errs_and_the_next_message_is_intact() {
    on_threads(2, |comm| {
        if comm.rank() == 0 {
            for len in [20, 4000, 50_000] {
                comm.send(&msg(1, len), 1, 0)?;
                comm.send(&msg(2, 8), 1, 0)?;
            }
        } else {
            let mut small = [0u8; 12];
            comm.scope(|s| {
                let mut p = s.recv_init(&mut small, 0, 0)?;
                for (k, len) in [20usize, 4000, 50_000].into_iter().enumerate() {
                    let r = if k % 2 == 0 {
                        p.recv()
                    } else {
                        p.start()?;
                        p.wait()
                    };
                    match r {
                        Err(Error::Truncated { needed, got, .. }) => {
                            assert_eq!((needed, got), (len, 12))
                        }
                        other => panic!("len {len}: expected truncation, got {other:?}"),
                    }
                    assert_eq!(p.data().unwrap(), &msg(1, len)[..12]);
                    let st = p.recv()?;
                    assert_eq!(st.len, 8);
                    assert_eq!(number(p.data().unwrap()), 2);
                }
                Ok::<_, Error>(())
            })??;
        }
        Ok(())
    });
}

#[test]
fn misuse_of_persistent_requests_is_a_clear_error() {
    on_threads(2, |comm| {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        let (mut c, mut d) = ([0u8; 1], [0u8; 1]);
        comm.scope(|s| {
            assert!(matches!(
                s.send_init(&mut c, 2, 0),
                Err(Error::InvalidRank { rank: 2, size: 2 })
            ));
            assert!(matches!(
                s.recv_init(&mut d, 0, u32::MAX - 5),
                Err(Error::InvalidTag { .. })
            ));
            let mut tx = s.send_init(&mut a, 1 - comm.rank(), 1)?;
            let mut rx = s.recv_init(&mut b, 1 - comm.rank(), 1)?;
            assert!(matches!(tx.wait(), Err(Error::InvalidArgument(_))));
            assert!(matches!(rx.test(), Err(Error::InvalidArgument(_))));
            rx.start()?;
            assert!(rx.is_active());
            assert!(matches!(rx.start(), Err(Error::InvalidArgument(_))));
            assert!(matches!(rx.recv(), Err(Error::InvalidArgument(_))));
            tx.start()?;
            assert!(matches!(tx.start(), Err(Error::InvalidArgument(_))));
            assert!(matches!(tx.send(), Err(Error::InvalidArgument(_))));
            tx.wait()?;
            rx.wait()?;
            assert!(!rx.is_active() && !tx.is_active());
            // Dropped while started: the scope's end waits for both.
            tx.start()?;
            rx.start()?;
            Ok::<_, Error>(())
        })??;
        Ok(())
    });
}

#[test]
fn a_persistent_receive_from_a_dead_peer_is_peer_lost_within_the_deadline() {
    let name = "a_persistent_receive_from_a_dead_peer_is_peer_lost_within_the_deadline";
    if !common::is_rank() {
        let o = common::launcher(2, name)
            .env("TANDEM_TIMEOUT", "30")
            .run()
            .expect("launch");
        assert_eq!(o.code(), 0, "a rank failed: exit codes {:?}", o.codes);
        return;
    }
    let comm = Comm::from_env().expect("join the job");
    let mut buf = [0u8; 8];
    if comm.rank() == 1 {
        // Ten messages, then gone without a word.
        comm.scope(|s| {
            let mut p = s.send_init(&mut buf, 0, 4)?;
            for i in 0..10u64 {
                p.buf_mut().unwrap().copy_from_slice(&i.to_le_bytes());
                p.send()?;
            }
            Ok::<_, Error>(())
        })
        .and_then(|r| r)
        .expect("sends");
        std::process::exit(0);
    }
    let t0 = Instant::now();
    let r = comm.scope(|s| {
        let mut p = s.recv_init(&mut buf, 1, 4)?;
        for i in 0..10u64 {
            // Every message the peer sent before dying is still delivered.
            if i % 2 == 0 {
                p.recv()?;
            } else {
                p.start()?;
                p.wait()?;
            }
            assert_eq!(number(p.data().unwrap()), i);
        }
        p.start()?;
        Ok::<_, Error>(p.wait().err())
    });
    match r {
        Ok(Ok(Some(Error::PeerLost { rank: 1 }))) => {}
        other => panic!("expected PeerLost from rank 1, got {other:?}"),
    }
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
    // The blocking form reports the loss the same way.
    let mut again = [0u8; 8];
    let r = comm.scope(|s| s.recv_init(&mut again, 1, 4)?.recv());
    assert!(
        matches!(r, Ok(Err(Error::PeerLost { rank: 1 }))),
        "blocking form: {r:?}"
    );
}

// ---------------------------------------------------------------------------
// Message sizes that change from start to start.
//
// A persistent send is bound to a buffer of fixed length, so the sender
// holds several persistent sends of different lengths to the same peer and
// tag and starts whichever a plan names; the receiver holds several
// persistent receives (one as long as the longest message, the others of
// random lengths, some with wildcards) and starts whichever the plan names.
// So one persistent receive sees a different message length at nearly every
// start: shorter, longer, longer than its buffer. Every message is sent and
// received through one of the completion calls: the blocking form, a start
// completed at once by `wait` or by `test` until done, or a start left
// pending while later requests start and completed when the request is
// needed again (out of order) or at the end.
// ---------------------------------------------------------------------------

/// The tag of every message of the size-changing runs.
const TAG: Tag = 7;
/// What a receive buffer holds where no message byte belongs.
const GUARD: u8 = 0xEE;
/// How long a `test` loop may go on before the run is declared hung.
const TEST_LIMIT: Duration = Duration::from_secs(30);

/// How a started request is completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// `wait`.
    Wait,
    /// `test` until it reports done.
    Test,
}

/// How one message goes through its persistent request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// The blocking form, `send` / `recv`.
    Blocking,
    /// `start`, then completed at once.
    Now(Finish),
    /// `start`, completed when the request is needed again (after requests
    /// started later, perhaps) or at the end of the run, newest first.
    Later(Finish),
}

/// One message of a plan.
#[derive(Debug, Clone)]
struct Step {
    /// The sender's persistent send (so the length) it goes through.
    tx: usize,
    /// The receiver's persistent receive it lands in.
    rx: usize,
    send: How,
    recv: How,
    /// Whether to try the misuses (start twice, blocking form while
    /// started, wait / test while idle) around this message.
    misuse: bool,
}

/// A run: how the two ranks are linked, the lengths of the sender's
/// persistent sends and of the receiver's persistent receives, the
/// messages.
#[derive(Debug, Clone)]
struct Plan {
    links: Links,
    send_lens: Vec<usize>,
    recv_lens: Vec<usize>,
    steps: Vec<Step>,
}

/// The source and tag persistent receive `j` is bound to; every one of them
/// matches every message of a run (from rank 0 with [`TAG`]).
fn recv_match(j: usize) -> (usize, Tag) {
    match j % 4 {
        0 => (0, TAG),
        1 => (ANY_SOURCE, ANY_TAG),
        2 => (0, ANY_TAG),
        _ => (ANY_SOURCE, TAG),
    }
}

/// The bytes of message `step` (`len` of them): different for every step,
/// so a stale or misplaced message never passes for the right one.
fn payload(step: usize, len: usize) -> Vec<u8> {
    common::pattern(len, 1000 + step as u64)
}

/// Collects what went wrong in a run without stopping it: a rank that
/// finds a wrong byte or status keeps going, so its peer is not left
/// waiting.
#[derive(Default)]
struct Faults(Vec<String>);

impl Faults {
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    fn misuse<T: std::fmt::Debug>(&mut self, r: tandem_driver::Result<T>, what: &str) {
        if !matches!(r, Err(Error::InvalidArgument(_))) {
            self.0
                .push(format!("{what}: expected InvalidArgument, got {r:?}"));
        }
    }
}

/// Completes a started persistent send as `f` says.
fn finish_send(
    r: &mut PersistentSend<'_, '_>,
    f: Finish,
    step: usize,
    bad: &mut Faults,
) -> tandem_driver::Result<()> {
    match f {
        Finish::Wait => r.wait()?,
        Finish::Test => {
            let t0 = Instant::now();
            while !r.test()? {
                bad.expect(r.is_active(), || {
                    format!("send {step}: idle while test says pending")
                });
                bad.expect(r.buf_mut().is_none(), || {
                    format!("send {step}: buffer writable while pending")
                });
                if t0.elapsed() > TEST_LIMIT {
                    return Err(Error::from(std::io::Error::other(format!(
                        "send {step}: test never said done"
                    ))));
                }
                std::thread::yield_now();
            }
        }
    }
    bad.expect(!r.is_active(), || {
        format!("send {step}: still active once complete")
    });
    Ok(())
}

/// Completes a started persistent receive as `f` says.
fn finish_recv(
    r: &mut PersistentRecv<'_, '_>,
    f: Finish,
    step: usize,
    bad: &mut Faults,
) -> tandem_driver::Result<Status> {
    match f {
        Finish::Wait => r.wait(),
        Finish::Test => {
            let t0 = Instant::now();
            loop {
                match r.test() {
                    Ok(None) => {
                        bad.expect(r.is_active() && r.data().is_none(), || {
                            format!("receive {step}: idle or readable while test says pending")
                        });
                        if t0.elapsed() > TEST_LIMIT {
                            return Err(Error::from(std::io::Error::other(format!(
                                "receive {step}: test never said done"
                            ))));
                        }
                        std::thread::yield_now();
                    }
                    Ok(Some(st)) => return Ok(st),
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

/// Rank 0's side of a plan.
fn sender(comm: &Comm, plan: &Plan) -> tandem_driver::Result<Vec<String>> {
    let mut bad = Faults::default();
    let mut bufs: Vec<Vec<u8>> = plan.send_lens.iter().map(|&l| vec![0; l]).collect();
    comm.scope(|s| {
        let mut reqs = bufs
            .iter_mut()
            .map(|b| s.send_init(b, 1, TAG))
            .collect::<tandem_driver::Result<Vec<_>>>()?;
        // Started and not yet completed: (request, step, how to complete).
        let mut later: Vec<(usize, usize, Finish)> = Vec::new();
        for (i, st) in plan.steps.iter().enumerate() {
            if let Some(p) = later.iter().position(|&(k, ..)| k == st.tx) {
                let (k, step, f) = later.remove(p);
                finish_send(&mut reqs[k], f, step, &mut bad)?;
            }
            let r = &mut reqs[st.tx];
            let m = payload(i, plan.send_lens[st.tx]);
            let Some(b) = r.buf_mut() else {
                return Err(Error::from(std::io::Error::other(format!(
                    "send {i}: buffer not writable while idle"
                ))));
            };
            b.copy_from_slice(&m);
            bad.expect(r.buf() == &m[..], || {
                format!("send {i}: buf() is not what was written")
            });
            match st.send {
                How::Blocking => r.send()?,
                How::Now(f) | How::Later(f) => {
                    r.start()?;
                    bad.expect(r.is_active() && r.buf_mut().is_none(), || {
                        format!("send {i}: not active, or writable, once started")
                    });
                    if st.misuse {
                        bad.misuse(r.start(), &format!("send {i}: start while started"));
                        bad.misuse(r.send(), &format!("send {i}: send while started"));
                        bad.expect(r.is_active(), || format!("send {i}: misuse ended it"));
                    }
                    if st.send == How::Now(f) {
                        finish_send(r, f, i, &mut bad)?;
                    } else {
                        later.push((st.tx, i, f));
                    }
                }
            }
            if st.misuse && !r.is_active() {
                bad.misuse(r.wait(), &format!("send {i}: wait while idle"));
                bad.misuse(r.test(), &format!("send {i}: test while idle"));
            }
        }
        while let Some((k, step, f)) = later.pop() {
            finish_send(&mut reqs[k], f, step, &mut bad)?;
        }
        Ok::<_, Error>(())
    })??;
    Ok(bad.0)
}

/// Checks what persistent receive `j` got for message `step`: the status
/// (or the truncation, with the right lengths), the bytes, nothing written
/// past the message, and (with misuse) that waiting or testing it again
/// is refused and leaves the message readable.
fn check_recv(
    plan: &Plan,
    step: usize,
    j: usize,
    r: &mut PersistentRecv<'_, '_>,
    res: tandem_driver::Result<Status>,
    bad: &mut Faults,
) -> tandem_driver::Result<()> {
    let len = plan.send_lens[plan.steps[step].tx];
    let cap = plan.recv_lens[j];
    let what = format!("message {step} ({len} bytes) into receive {j} ({cap} bytes)");
    match res {
        Ok(st) if len <= cap => bad.expect((st.source, st.tag, st.len) == (0, TAG, len), || {
            format!("{what}: status {st:?}")
        }),
        Err(Error::Truncated { needed, got, .. }) if len > cap => bad
            .expect((needed, got) == (len, cap), || {
                format!("{what}: truncated with needed {needed}, got {got}")
            }),
        Ok(st) => bad
            .0
            .push(format!("{what}: expected truncation, got {st:?}")),
        Err(Error::Truncated { needed, got, .. }) => bad.0.push(format!(
            "{what}: unexpected truncation (needed {needed}, got {got})"
        )),
        Err(e) => {
            bad.0.push(format!("{what}: {e}"));
            return Err(e);
        }
    }
    bad.expect(!r.is_active(), || {
        format!("{what}: still active once complete")
    });
    let want = payload(step, len);
    let want = &want[..len.min(cap)];
    let same = |r: &PersistentRecv<'_, '_>| r.data() == Some(want);
    bad.expect(same(r), || {
        let got = r
            .data()
            .map(|d| (d.len(), d.iter().zip(want).position(|(a, b)| a != b)));
        format!("{what}: data wrong: (len, first difference) {got:?}")
    });
    if plan.steps[step].misuse {
        bad.misuse(r.wait(), &format!("{what}: wait while idle"));
        bad.misuse(r.test(), &format!("{what}: test while idle"));
        bad.expect(same(r), || {
            format!("{what}: data changed by a refused call")
        });
    }
    let rest = r
        .buf_mut()
        .map(|b| b[len.min(cap)..].iter().all(|&x| x == GUARD));
    bad.expect(rest == Some(true), || {
        format!("{what}: buffer past the message written ({rest:?})")
    });
    Ok(())
}

/// Rank 1's side of a plan.
fn receiver(comm: &Comm, plan: &Plan) -> tandem_driver::Result<Vec<String>> {
    let mut bad = Faults::default();
    let mut bufs: Vec<Vec<u8>> = plan.recv_lens.iter().map(|&l| vec![GUARD; l]).collect();
    comm.scope(|s| {
        let mut reqs = bufs
            .iter_mut()
            .enumerate()
            .map(|(j, b)| {
                let (src, tag) = recv_match(j);
                s.recv_init(b, src, tag)
            })
            .collect::<tandem_driver::Result<Vec<_>>>()?;
        let mut later: Vec<(usize, usize, Finish)> = Vec::new();
        for (i, st) in plan.steps.iter().enumerate() {
            if let Some(p) = later.iter().position(|&(j, ..)| j == st.rx) {
                let (j, step, f) = later.remove(p);
                let res = finish_recv(&mut reqs[j], f, step, &mut bad);
                check_recv(plan, step, j, &mut reqs[j], res, &mut bad)?;
            }
            let r = &mut reqs[st.rx];
            let Some(b) = r.buf_mut() else {
                return Err(Error::from(std::io::Error::other(format!(
                    "receive {i}: buffer not writable while idle"
                ))));
            };
            b.fill(GUARD);
            match st.recv {
                How::Blocking => {
                    let res = r.recv();
                    check_recv(plan, i, st.rx, r, res, &mut bad)?;
                }
                How::Now(f) | How::Later(f) => {
                    r.start()?;
                    bad.expect(
                        r.is_active() && r.data().is_none() && r.buf_mut().is_none(),
                        || format!("receive {i}: not active, or readable, once started"),
                    );
                    if st.misuse {
                        bad.misuse(r.start(), &format!("receive {i}: start while started"));
                        bad.misuse(r.recv(), &format!("receive {i}: recv while started"));
                        bad.expect(r.is_active(), || format!("receive {i}: misuse ended it"));
                    }
                    if st.recv == How::Now(f) {
                        let res = finish_recv(r, f, i, &mut bad);
                        check_recv(plan, i, st.rx, r, res, &mut bad)?;
                    } else {
                        later.push((st.rx, i, f));
                    }
                }
            }
        }
        while let Some((j, step, f)) = later.pop() {
            let res = finish_recv(&mut reqs[j], f, step, &mut bad);
            check_recv(plan, step, j, &mut reqs[j], res, &mut bad)?;
        }
        Ok::<_, Error>(())
    })??;
    Ok(bad.0)
}

/// Runs `plan` on two threads; every fault both ranks found, or the error
/// that stopped a rank.
fn run_plan(plan: &Plan) -> Vec<String> {
    let mut c = cfg();
    // A hung run fails in seconds rather than a minute.
    c.timeout = Duration::from_secs(10);
    let res = Comm::threads_on(2, plan.links, &Layout::default(), c, |comm| {
        if comm.rank() == 0 {
            sender(&comm, plan)
        } else {
            receiver(&comm, plan)
        }
    });
    let mut faults = Vec::new();
    for (rank, r) in res.into_iter().enumerate() {
        match r {
            Ok(f) => faults.extend(f.into_iter().map(|f| format!("rank {rank}: {f}"))),
            Err(e) => faults.push(format!("rank {rank} stopped: {e}")),
        }
    }
    faults
}

/// Message lengths on both sides of every line the transports draw: one
/// 64-byte line, several lines, an eager cell (1 KiB up to the 8 KiB eager
/// limit), just past the eager limit, and rendezvous of many chunks.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        prop::sample::select(vec![0, 1, 55, 56, 57, 1023, 1024, 8191, 8192, 8193, 65_536]),
        0usize..=56,
        57usize..1024,
        1024usize..=8192,
        8193usize..=20_000,
        60_000usize..=140_000,
    ]
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![
        Just(How::Blocking),
        Just(How::Now(Finish::Wait)),
        Just(How::Now(Finish::Test)),
        Just(How::Later(Finish::Wait)),
        Just(How::Later(Finish::Test)),
    ]
}

/// Plans over `links`: 1 to 4 persistent sends of random lengths; a
/// persistent receive as long as the longest of them and up to 3 more of
/// random lengths (often too short); up to 40 messages.
fn plans(links: impl Strategy<Value = Links>) -> impl Strategy<Value = Plan> {
    (
        links,
        prop::collection::vec(length(), 1..=4),
        prop::collection::vec(length(), 0..=3),
    )
        .prop_flat_map(|(links, send_lens, more)| {
            let mut recv_lens = vec![*send_lens.iter().max().unwrap()];
            recv_lens.extend(more);
            let step = (
                0..send_lens.len(),
                0..recv_lens.len(),
                how(),
                how(),
                prop::bool::weighted(0.25),
            )
                .prop_map(|(tx, rx, send, recv, misuse)| Step {
                    tx,
                    rx,
                    send,
                    recv,
                    misuse,
                });
            (
                Just(links),
                Just(send_lens),
                Just(recv_lens),
                prop::collection::vec(step, 1..=40),
            )
        })
        .prop_map(|(links, send_lens, recv_lens, steps)| Plan {
            links,
            send_lens,
            recv_lens,
            steps,
        })
}

/// A fixed plan that walks every pair of (send completion, receive
/// completion) over every length class, with the receive rotating over
/// a buffer that holds everything, two (100 and 57 bytes) that truncate
/// all but line-sized messages and one that truncates only rendezvous, so
/// the length a persistent receive reports changes (up, down, truncated,
/// not) at nearly every start. Runs on shared memory; the properties below add
/// random plans and the other transports.
#[test]
fn every_completion_call_sees_every_change_of_message_size() {
    let hows = [
        How::Blocking,
        How::Now(Finish::Wait),
        How::Now(Finish::Test),
        How::Later(Finish::Wait),
        How::Later(Finish::Test),
    ];
    let send_lens = vec![0, 40, 300, 4000, 8192, 70_000];
    let recv_lens = vec![70_000, 100, 8192, 57];
    let mut steps = Vec::new();
    for (a, &send) in hows.iter().enumerate() {
        for (b, &recv) in hows.iter().enumerate() {
            for tx in 0..send_lens.len() {
                let n = steps.len();
                steps.push(Step {
                    tx: (tx + a + b) % send_lens.len(),
                    rx: (n + a) % recv_lens.len(),
                    send,
                    recv,
                    misuse: n % 3 == 0,
                });
            }
        }
    }
    let plan = Plan {
        links: Links::Shm,
        send_lens,
        recv_lens,
        steps,
    };
    let faults = run_plan(&plan);
    assert!(faults.is_empty(), "{faults:#?}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        max_shrink_iters: 64,
        max_shrink_time: 20_000,
        .. ProptestConfig::default()
    })]

    /// Random plans over shared memory: every message arrives with the
    /// right status (or the right truncation) and byte-exact, nothing past
    /// it is written, misuse is refused, whatever the sizes and
    /// completion calls before it.
    #[test]
    fn persistent_requests_with_changing_sizes_over_shared_memory(plan in plans(Just(Links::Shm))) {
        let faults = run_plan(&plan);
        prop_assert!(faults.is_empty(), "{:#?}", faults);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        max_shrink_iters: 32,
        max_shrink_time: 20_000,
        .. ProptestConfig::default()
    })]

    /// The same over TCP and the soft RDMA fabric (RDMA write and RDMA
    /// read rendezvous), whose eager and rendezvous paths differ from
    /// shared memory's.
    #[test]
    fn persistent_requests_with_changing_sizes_over_tcp_and_soft_rdma(
        plan in plans(prop_oneof![Just(Links::Tcp), Just(Links::Soft), Just(Links::SoftRead)])
    ) {
        let faults = run_plan(&plan);
        prop_assert!(faults.is_empty(), "{:#?}", faults);
    }
}
