//! Random traffic over the soft RDMA fabric with random NIC delays: every
//! message arrives exactly once, in each sender's order, byte-exact, with
//! nothing written outside the posted buffers and no receiver-not-ready.
//!
//! Sizes straddle the eager limit (eager, rendezvous by RDMA WRITE into the
//! CTS's buffer, rendezvous by RDMA READ), credits go down to 1, and the
//! receives are wildcards in one phase and exact (source, tag) in another.

use proptest::prelude::*;
use std::time::Duration;
use tandem_driver::{
    Comm, Config, Layout, Links, Request, Result, Tag, WaitPolicy, ANY_SOURCE, ANY_TAG,
};
use tandem_fabric::soft::rnr_events_total;

/// Bytes every receive buffer has beyond the largest message, filled with
/// `GUARD`: a write there is a write outside the message.
const SLACK: usize = 64;
const GUARD: u8 = 0xEE;

#[derive(Debug, Clone)]
struct Msg {
    src: usize,
    dst: usize,
    tag: Tag,
    len: usize,
}

/// The byte at `i` of message `seq` from `src` (never `GUARD` at 0..8,
/// which hold the sender and sequence).
fn byte(src: usize, seq: usize, i: usize) -> u8 {
    (src * 131 + seq * 31 + i * 7) as u8 ^ 0x5a
}

fn payload(src: usize, seq: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|i| byte(src, seq, i)).collect();
    let id = ((src as u32) << 24 | seq as u32).to_le_bytes();
    for (d, s) in v.iter_mut().zip(id) {
        *d = s;
    }
    v
}

fn sizes(eager: usize) -> Vec<usize> {
    let mut v = vec![
        0,
        1,
        9,
        eager.saturating_sub(1),
        eager,
        eager + 1,
        3 * eager + 17,
    ];
    v.extend([70_000, 300_001]);
    v.retain(|&s| s >= 8 || s == 0);
    v
}

/// Runs one world and checks it; `Err` with what went wrong.
fn run(
    n: usize,
    layout: Layout,
    read: bool,
    msgs: &[Msg],
    exact: bool,
) -> std::result::Result<(), String> {
    // Random NIC delays of up to 200 µs per request.
    let mut cfg = Config::default()
        .wait(WaitPolicy::SHARED_CORES)
        .timeout(Duration::from_secs(30));
    cfg.rdma.soft_delay_us = 200;
    let links = if read { Links::SoftRead } else { Links::Soft };
    let max = msgs.iter().map(|m| m.len).max().unwrap_or(0) + SLACK;
    let out = Comm::threads_on(n, links, &layout, cfg, |comm| -> Result<Vec<String>> {
        let me = comm.rank();
        let mine: Vec<(usize, &Msg)> = msgs.iter().filter(|m| m.src == me).enumerate().collect();
        // Sequence numbers per sender, in its sending order.
        let sends: Vec<Vec<u8>> = mine
            .iter()
            .map(|(seq, m)| payload(me, *seq, m.len))
            .collect();
        let incoming: Vec<(usize, &Msg)> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.dst == me)
            .map(|(_, m)| {
                let seq = msgs
                    .iter()
                    .filter(|x| x.src == m.src)
                    .position(|x| std::ptr::eq(x, m))
                    .unwrap();
                (seq, m)
            })
            .collect();
        let mut bufs: Vec<Vec<u8>> = incoming.iter().map(|_| vec![GUARD; max]).collect();
        let mut stats = Vec::new();
        comm.scope(|s| -> Result<()> {
            let mut reqs: Vec<Request> = Vec::new();
            for ((_, m), b) in incoming.iter().zip(bufs.iter_mut()) {
                let (src, tag) = if exact {
                    (m.src, m.tag)
                } else {
                    (ANY_SOURCE, ANY_TAG)
                };
                reqs.push(s.irecv(b, src, tag)?);
            }
            let nr = reqs.len();
            for ((_, m), p) in mine.iter().zip(&sends) {
                reqs.push(s.isend(p, m.dst, m.tag)?);
            }
            for (i, r) in reqs.into_iter().enumerate() {
                let st = r.wait()?;
                if i < nr {
                    stats.push(st);
                }
            }
            Ok(())
        })??;
        // Check what arrived.
        let mut bad = Vec::new();
        let mut last_seq = vec![None::<usize>; n];
        let mut seen = std::collections::HashSet::new();
        for (k, (b, st)) in bufs.iter().zip(&stats).enumerate() {
            if b[st.len..].iter().any(|&x| x != GUARD) {
                bad.push(format!(
                    "rank {me}: receive {k} written past its {} bytes",
                    st.len
                ));
            }
            // Identify the message: zero-length ones carry no id.
            let (src, seq) = if st.len >= 4 {
                let id = u32::from_le_bytes(b[..4].try_into().unwrap());
                ((id >> 24) as usize, (id & 0xff_ffff) as usize)
            } else {
                let want = exact.then(|| incoming[k]);
                match want {
                    Some((seq, m)) => (m.src, seq),
                    None => continue,
                }
            };
            if src != st.source {
                bad.push(format!(
                    "rank {me}: status says rank {} sent what rank {src} wrote",
                    st.source
                ));
            }
            let Some(m) = msgs.iter().filter(|x| x.src == src).nth(seq) else {
                bad.push(format!("rank {me}: unknown message {src}/{seq}"));
                continue;
            };
            if m.dst != me || m.len != st.len || m.tag != st.tag {
                bad.push(format!(
                    "rank {me}: message {src}/{seq} is {m:?}, status {st:?}"
                ));
            }
            if b[..st.len] != payload(src, seq, st.len)[..] {
                bad.push(format!("rank {me}: message {src}/{seq} corrupted"));
            }
            if !seen.insert((src, seq)) {
                bad.push(format!("rank {me}: message {src}/{seq} twice"));
            }
            // Same sender and tag: non-overtaking order (receives are in
            // posting order, so a later one must hold a later message).
            if let Some(prev) = last_seq[src] {
                let p = msgs.iter().filter(|x| x.src == src).nth(prev).unwrap();
                if p.tag == m.tag && prev > seq {
                    bad.push(format!("rank {me}: {src}/{seq} overtook {src}/{prev}"));
                }
            }
            last_seq[src] = Some(seq);
        }
        let expected_ids = incoming.iter().filter(|(_, m)| m.len >= 4).count();
        let got_ids = seen.len();
        if !exact && got_ids != expected_ids {
            bad.push(format!(
                "rank {me}: {got_ids} identified messages, expected {expected_ids}"
            ));
        }
        Ok(bad)
    });
    let mut all = Vec::new();
    for (r, o) in out.into_iter().enumerate() {
        match o {
            Ok(b) => all.extend(b),
            Err(e) => all.push(format!("rank {r}: {e}")),
        }
    }
    if all.is_empty() {
        Ok(())
    } else {
        Err(all.join("\n"))
    }
}

fn world() -> impl Strategy<Value = (usize, Layout, bool, Vec<Msg>)> {
    (
        2usize..=3,
        prop::sample::select(vec![0u32, 1, 64, 8192]),
        prop::sample::select(vec![1u32, 2, 32]),
        any::<bool>(),
    )
        .prop_flat_map(|(n, eager, credits, read)| {
            let layout = Layout::default().eager_limit(eager).credits(credits);
            let sz = sizes(eager as usize);
            let msg = (0..n, 0..n, 0u32..3, prop::sample::select(sz))
                .prop_map(|(src, dst, tag, len)| Msg { src, dst, tag, len });
            (
                Just(n),
                Just(layout),
                Just(read),
                prop::collection::vec(msg, 1..24),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, max_shrink_iters: 20, .. ProptestConfig::default() })]

    #[test]
    fn random_traffic_over_the_soft_fabric((n, layout, read, msgs) in world()) {
        let rnr = rnr_events_total();
        for exact in [false, true] {
            if let Err(e) = run(n, layout, read, &msgs, exact) {
                prop_assert!(false, "{} ranks, {:?}, read {}, exact {}: {}\nmessages {:?}", n, layout, read, exact, e, msgs);
            }
        }
        prop_assert_eq!(rnr_events_total(), rnr, "receiver-not-ready on the soft fabric");
    }
}
