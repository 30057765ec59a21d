//! Engines wired through an in-memory network: no threads, no clock. The
//! network may deliver each pair's messages in order (shared memory, RDMA
//! RC) or in any order (to exercise the hold-back queue).
extern crate std;

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::vec;
use std::vec::Vec;

use crate::harness::{self, Frame, Host, VecStorage};

type Eng = harness::EngineOf<VecStorage>;

/// What a rank holds besides its engine: the bytes.
struct Mem {
    /// Buffers of live operations, by table index.
    bufs: HashMap<usize, Vec<u8>>,
    /// Entry buffers for unexpected eager payloads.
    slots: Vec<Vec<u8>>,
}

/// The tests' host: real bytes, RTS addresses that name (rank, operation).
struct Bytes(Vec<Mem>);

impl Bytes {
    fn buf(&mut self, r: usize, op: Handle) -> &mut Vec<u8> {
        self.0[r]
            .bufs
            .get_mut(&op.index())
            .expect("a live operation")
    }

    fn slot_to_op(&mut self, r: usize, slot: usize, op: Handle, n: usize) {
        let src = self.0[r].slots[slot][..n].to_vec();
        self.buf(r, op)[..n].copy_from_slice(&src);
    }
}

impl Host<VecStorage, Vec<u8>> for Bytes {
    type Error = std::string::String;

    fn eager(&mut self, r: usize, op: Handle) -> Result<Vec<u8>, Self::Error> {
        Ok(self.buf(r, op).clone())
    }

    fn rts(&mut self, r: usize, op: Handle) -> Result<(MemDesc, Vec<u8>), Self::Error> {
        let addr = ((r as u64) << 32) | op.index() as u64;
        Ok((
            MemDesc {
                addr,
                ..MemDesc::NONE
            },
            vec![],
        ))
    }

    fn empty(&mut self) -> Vec<u8> {
        vec![]
    }

    fn refused(
        &mut self,
        from: usize,
        to: usize,
        f: &Frame<Vec<u8>>,
        e: ProtoError,
    ) -> Result<(), Self::Error> {
        panic!("{from}->{to}: {e} on {:?}", f.header)
    }

    fn copy(&mut self, r: usize, c: SlotCopy) -> Result<(), Self::Error> {
        self.slot_to_op(r, c.slot, c.op, c.len as usize);
        Ok(())
    }

    fn deliver(
        &mut self,
        to: usize,
        _from: usize,
        op: Handle,
        len: u64,
        f: &Frame<Vec<u8>>,
    ) -> Result<(), Self::Error> {
        let n = len as usize;
        self.buf(to, op)[..n].copy_from_slice(&f.body[..n]);
        Ok(())
    }

    fn store(
        &mut self,
        to: usize,
        _from: usize,
        slot: usize,
        f: &Frame<Vec<u8>>,
    ) -> Result<(), Self::Error> {
        self.0[to].slots[slot][..f.body.len()].copy_from_slice(&f.body);
        Ok(())
    }

    fn stream_out(&mut self, r: usize, op: Handle, len: u64) -> Result<Vec<u8>, Self::Error> {
        Ok(self.buf(r, op)[..len as usize].to_vec())
    }

    fn stream_in(
        &mut self,
        r: usize,
        _from: usize,
        op: Handle,
        body: &Vec<u8>,
    ) -> Result<(), Self::Error> {
        self.buf(r, op)[..body.len()].copy_from_slice(body);
        Ok(())
    }

    fn unknown_stream(&mut self, r: usize, from: usize, token: u32) -> Result<(), Self::Error> {
        panic!("rank {r}: a stream from {from} for token {token} nobody asked for")
    }

    fn pull(&mut self, _: &[Eng], r: usize, p: &Pull, pulled: bool) -> Result<(), Self::Error> {
        if pulled {
            let (sr, si) = (
                (p.desc.addr >> 32) as usize,
                (p.desc.addr & 0xffff_ffff) as usize,
            );
            let n = p.len as usize;
            let bytes = self.0[sr].bufs[&si][..n].to_vec();
            self.buf(r, p.op)[..n].copy_from_slice(&bytes);
        }
        Ok(())
    }
}

struct Net {
    net: harness::Net<VecStorage, Vec<u8>>,
    mem: Bytes,
    pull_ok: bool,
    /// Highest number of matching messages ever in flight + buffered for
    /// one receiver from one sender (must never exceed the credits).
    max_outstanding: u64,
}

impl Net {
    fn new(n: u32, credits: u16, eager_limit: u64, pull_ok: bool) -> Self {
        let envelopes = credits + 3;
        let ents = n as usize * envelopes as usize;
        let nbufs = n as usize * credits as usize;
        let engines = (0..n)
            .map(|r| {
                let p = Params {
                    rank: r,
                    nranks: n,
                    credits,
                    envelopes,
                    credit_threshold: credits.div_ceil(2),
                    eager_limit,
                    seq_start: u16::MAX - 2,
                };
                Engine::new(
                    p,
                    vec![Op::EMPTY; 64],
                    vec![Entry::EMPTY; ents],
                    vec![Peer::EMPTY; n as usize],
                    vec![0u32; nbufs],
                )
                .unwrap()
            })
            .collect();
        let mem = (0..n)
            .map(|_| Mem {
                bufs: HashMap::new(),
                slots: vec![vec![0; eager_limit as usize]; nbufs],
            })
            .collect();
        Net {
            net: harness::Net::new(engines),
            mem: Bytes(mem),
            pull_ok,
            max_outstanding: 0,
        }
    }

    /// Rank `r`'s engine.
    fn e(&mut self, r: usize) -> &mut Eng {
        &mut self.net.engines[r]
    }

    fn send(&mut self, r: u32, to: u32, tag: u32, data: Vec<u8>, sync: bool) -> Handle {
        let h = self
            .e(r as usize)
            .post_send(to, 0, tag, data.len() as u64, sync)
            .unwrap();
        self.mem.0[r as usize].bufs.insert(h.index(), data);
        h
    }

    fn recv(&mut self, r: u32, src: u32, tag: u32, cap: usize) -> Handle {
        let (h, copy) = self
            .e(r as usize)
            .post_recv(src, 0, tag, cap as u64)
            .unwrap();
        self.mem.0[r as usize]
            .bufs
            .insert(h.index(), vec![0xEE; cap]);
        if let Some(c) = copy {
            self.mem.slot_to_op(r as usize, c.slot, h, c.len as usize);
        }
        h
    }

    /// Runs every rank's transmit side; `true` if anything moved.
    fn transmit(&mut self) -> bool {
        let n = self.net.ranks();
        let mut did = false;
        for r in 0..n {
            for to in 0..n {
                while self.net.transmit(&mut self.mem, r, to).unwrap() {
                    did = true;
                }
            }
        }
        self.check_credit_invariant();
        for e in &self.net.engines {
            e.audit().unwrap();
        }
        did
    }

    fn check_credit_invariant(&mut self) {
        let n = self.net.ranks();
        for s in 0..n {
            for d in 0..n {
                let q = &self.net.wires[self.net.pair(s, d)];
                let in_flight = q.iter().filter(|w| w.header.kind().is_matching()).count() as u64;
                let eager_in_flight =
                    q.iter().filter(|w| w.header.kind().is_eager()).count() as u64;
                let rcv = &self.net.engines[d];
                let c = rcv.p.envelopes as u32;
                let s32 = s as u32;
                let used = (s32 * c..(s32 + 1) * c).filter(|&e| rcv.ent(e).st != ESt::Free);
                let held = used.clone().count() as u64;
                let with_buf = used.filter(|&e| rcv.ent(e).buf != NIL).count() as u64;
                let total = in_flight + held;
                let eager = eager_in_flight + with_buf;
                self.max_outstanding = self.max_outstanding.max(eager);
                assert!(
                    total <= c as u64,
                    "{s}->{d}: {total} messages outstanding > {c} entries"
                );
                let k = rcv.p.credits as u64;
                assert!(
                    eager <= k,
                    "{s}->{d}: {eager} eager messages outstanding > {k} credits"
                );
            }
        }
    }

    /// Delivers one message on `(from, to)`: the oldest, or the `pick`-th
    /// if the network reorders.
    fn deliver(&mut self, from: usize, to: usize, pick: usize) -> bool {
        let len = self.net.wires[self.net.pair(from, to)].len();
        if len == 0 {
            return false;
        }
        self.net
            .deliver(&mut self.mem, from, to, pick % len)
            .unwrap();
        self.pulls(to);
        true
    }

    fn pulls(&mut self, r: usize) {
        while self.net.pull(&mut self.mem, r, self.pull_ok).unwrap() {}
    }

    fn streams(&mut self) -> bool {
        let n = self.net.ranks();
        let mut did = false;
        for from in 0..n {
            for to in 0..n {
                while self.net.stream_in(&mut self.mem, from, to, 0).unwrap() {
                    did = true;
                }
            }
        }
        did
    }

    /// Runs until quiet, delivering in order (or in `order`-driven order).
    fn run(&mut self, mut order: impl FnMut() -> usize) {
        let n = self.net.ranks();
        loop {
            for r in 0..n {
                self.pulls(r);
            }
            let mut did = self.transmit();
            for f in 0..n {
                for t in 0..n {
                    while self.deliver(f, t, order()) {
                        did = true;
                        self.transmit();
                    }
                }
            }
            did |= self.streams();
            if !did {
                return;
            }
        }
    }

    fn take(&mut self, r: u32, h: Handle) -> (Result<Status, OpError>, Vec<u8>) {
        match self.e(r as usize).take(h) {
            Taken::Done(res) => (res, self.mem.0[r as usize].bufs.remove(&h.index()).unwrap()),
            Taken::Pending => panic!(
                "rank {r}: operation still pending: {:?}",
                self.net.engines[r as usize].info(h)
            ),
        }
    }
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

#[test]
fn eager_and_rendezvous_in_both_posting_orders() {
    for pull_ok in [true, false] {
        for len in [0usize, 1, 16, 17, 100] {
            // Receive posted first.
            let mut net = Net::new(2, 2, 16, pull_ok);
            let r = net.recv(1, 0, 5, 100);
            let s = net.send(0, 1, 5, bytes(1, len), false);
            net.run(|| 0);
            assert_eq!(net.take(0, s).0.unwrap().len, len as u64);
            let (st, buf) = net.take(1, r);
            assert_eq!(
                st.unwrap(),
                Status {
                    source: 0,
                    tag: 5,
                    len: len as u64
                }
            );
            assert_eq!(&buf[..len], &bytes(1, len)[..]);
            // Send first: the message waits as unexpected.
            let s = net.send(0, 1, 6, bytes(2, len), false);
            net.run(|| 0);
            let r = net.recv(1, ANY_SOURCE, ANY_TAG, 100);
            net.run(|| 0);
            assert!(net.take(0, s).0.is_ok());
            let (st, buf) = net.take(1, r);
            assert_eq!(st.unwrap().tag, 6);
            assert_eq!(&buf[..len], &bytes(2, len)[..]);
        }
    }
}

#[test]
fn credits_hold_back_the_sender_and_nothing_is_lost() {
    let mut net = Net::new(2, 1, 8, true);
    let sends: Vec<_> = (0..10)
        .map(|i| net.send(0, 1, 3, bytes(i, 8), false))
        .collect();
    net.run(|| 0);
    assert_eq!(
        net.max_outstanding, 1,
        "one credit: one message outstanding"
    );
    assert_eq!(net.e(0).credits_available(1), 0);
    for (i, s) in sends.iter().enumerate() {
        let r = net.recv(1, 0, 3, 8);
        net.run(|| 0);
        let (st, buf) = net.take(1, r);
        assert_eq!(st.unwrap().len, 8);
        assert_eq!(buf, bytes(i as u8, 8), "message {i} in order");
        assert!(net.take(0, *s).0.is_ok());
    }
}

#[test]
fn truncation_completes_the_receive_and_spares_the_next_message() {
    for len in [12usize, 40] {
        let mut net = Net::new(2, 2, 16, true);
        let a = net.send(0, 1, 1, bytes(3, len), false);
        let b = net.send(0, 1, 1, bytes(4, 4), false);
        let r1 = net.recv(1, 0, 1, 8);
        let r2 = net.recv(1, 0, 1, 8);
        net.run(|| 0);
        let (e, buf) = net.take(1, r1);
        assert_eq!(
            e,
            Err(OpError::Truncated {
                status: Status {
                    source: 0,
                    tag: 1,
                    len: len as u64
                },
                got: 8
            })
        );
        assert_eq!(&buf[..], &bytes(3, len)[..8]);
        assert_eq!(net.take(1, r2).1[..4], bytes(4, 4)[..]);
        assert!(net.take(0, a).0.is_ok() && net.take(0, b).0.is_ok());
    }
}

#[test]
fn synchronous_send_completes_only_after_the_match() {
    let mut net = Net::new(2, 2, 16, true);
    let s = net.send(0, 1, 9, bytes(5, 4), true);
    net.run(|| 0);
    assert_eq!(net.e(0).phase(s), Some(Phase::WaitAck));
    let r = net.recv(1, 0, 9, 4);
    net.run(|| 0);
    assert!(net.take(0, s).0.is_ok());
    assert!(net.take(1, r).0.is_ok());
}

#[test]
fn reordering_network_still_yields_non_overtaking_order() {
    let mut net = Net::new(2, 4, 16, true);
    for i in 0..4 {
        net.send(0, 1, 1, bytes(i, 4), false);
    }
    net.transmit();
    // Deliver newest first.
    for _ in 0..4 {
        let len = net.net.wires[net.net.pair(0, 1)].len();
        net.deliver(0, 1, len - 1);
    }
    for i in 0..4 {
        let r = net.recv(1, ANY_SOURCE, ANY_TAG, 4);
        assert_eq!(net.take(1, r).1, bytes(i, 4));
    }
}

#[test]
fn cancel_probe_and_peer_loss() {
    let mut net = Net::new(3, 2, 16, true);
    let r = net.recv(1, 0, 1, 4);
    assert!(net.e(1).cancel(r));
    assert_eq!(net.take(1, r).0, Err(OpError::Cancelled));
    net.send(0, 1, 2, bytes(1, 4), false);
    net.run(|| 0);
    assert_eq!(
        net.e(1).probe(ANY_SOURCE, 0, ANY_TAG),
        Some(Status {
            source: 0,
            tag: 2,
            len: 4
        })
    );
    assert_eq!(net.e(1).probe(2, 0, ANY_TAG), None);
    let lost = net.recv(1, 2, 1, 4);
    let any = net.recv(1, ANY_SOURCE, 7, 4);
    net.e(1).fail_peer(2);
    assert_eq!(net.take(1, lost).0, Err(OpError::PeerLost { peer: 2 }));
    assert_eq!(net.e(1).phase(any), Some(Phase::Posted));
    assert!(net.e(1).post_send(2, 0, 1, 1, false).is_err());
    // What rank 0 sent before is still there.
    let r = net.recv(1, 0, 2, 4);
    assert_eq!(net.take(1, r).1, bytes(1, 4));
}

#[test]
fn hostile_headers_are_errors() {
    let mut net = Net::new(2, 1, 16, true);
    // Freed counts start where the sequence numbers do (`seq_start`): a
    // header that returns nothing carries that start.
    let none = u16::MAX - 2;
    let mut h = Header {
        credit: none,
        ecredit: none,
        ..Header::new(Kind::Eager, 0, 1, 4)
    };
    let e = &mut net.e(1);
    e.on_message(0, &h, MemDesc::NONE, &mut |_| {}).unwrap();
    h.seq = 1;
    assert_eq!(
        e.on_message(0, &h, MemDesc::NONE, &mut |_| {}),
        Err(ProtoError::CreditOverrun { peer: 0 })
    );
    let fin = Header {
        token: 12345,
        credit: none,
        ecredit: none,
        ..Header::new(Kind::Fin, 0, 0, 0)
    };
    assert!(matches!(
        e.on_message(0, &fin, MemDesc::NONE, &mut |_| {}),
        Err(ProtoError::BadToken { .. })
    ));
    let credit = Header {
        credit: none.wrapping_add(5),
        ecredit: none,
        ..Header::new(Kind::Credit, 0, 0, 0)
    };
    assert_eq!(
        e.on_message(0, &credit, MemDesc::NONE, &mut |_| {}),
        Err(ProtoError::BadCredit { peer: 0 })
    );
    assert!(matches!(
        e.on_message(7, &credit, MemDesc::NONE, &mut |_| {}),
        Err(ProtoError::InvalidRank { .. })
    ));
}

/// An RTS takes a rendezvous credit, or an eager one when none is left:
/// RTS may fill every entry the receiver reserved, received in any order,
/// and each credit comes back as what it was taken as.
#[test]
fn rendezvous_sends_fill_every_entry_and_credits_return_in_kind() {
    // One eager credit, three rendezvous credits (four entries).
    let mut net = Net::new(2, 1, 8, true);
    let sends: Vec<_> = (0..4)
        .map(|i| net.send(0, 1, i, bytes(i as u8, 100), false))
        .collect();
    net.run(|| 0);
    assert_eq!(net.e(0).credits_available(1), 0, "all four announced");
    let l = net.e(0).ledger(1);
    assert_eq!((l.entries_available, l.buffers_available), (0, 0));
    assert_eq!(
        net.e(1).held_for(0),
        (4, 1),
        "the last one on the eager credit"
    );
    for i in (0..4).rev() {
        let r = net.recv(1, 0, i, 100);
        net.run(|| 0);
        let (st, buf) = net.take(1, r);
        assert_eq!((st.unwrap().tag, buf), (i, bytes(i as u8, 100)));
    }
    for s in sends {
        assert!(net.take(0, s).0.is_ok());
    }
    net.run(|| 0);
    let l = net.e(0).ledger(1);
    assert_eq!(
        (l.entries_available, l.buffers_available),
        (4, 1),
        "returned in kind"
    );
    // And the eager credit serves an eager message again.
    let s = net.send(0, 1, 9, bytes(9, 8), false);
    net.run(|| 0);
    assert_eq!(net.e(1).held_for(0), (1, 1));
    let r = net.recv(1, 0, 9, 8);
    net.run(|| 0);
    assert_eq!(net.take(1, r).1, bytes(9, 8));
    assert!(net.take(0, s).0.is_ok());
    net.e(1).audit().unwrap();
}

/// What waits unmatched is listed oldest first, by source and context;
/// the credit counters say what may be sent and what is owed.
#[test]
fn unmatched_lists_waiting_messages_and_credits_are_reported() {
    let mut net = Net::new(3, 2, 16, true);
    assert_eq!(net.e(0).credits_available(1), 5);
    net.send(0, 2, 4, bytes(1, 3), false);
    net.send(1, 2, 6, bytes(2, 200), false);
    net.send(0, 2, 7, bytes(3, 5), false);
    net.run(|| 0);
    assert_eq!(net.e(0).credits_available(2), 3, "two entries used");
    let e = &net.e(2);
    let mut out = [Status {
        source: 9,
        tag: 9,
        len: 9,
    }; 4];
    assert_eq!(e.unmatched(ANY_SOURCE, 0, &mut out), 3);
    let got: Vec<_> = out[..3].iter().map(|s| (s.source, s.tag, s.len)).collect();
    assert_eq!(got, vec![(0, 4, 3), (0, 7, 5), (1, 6, 200)]);
    assert_eq!(e.unmatched(1, 0, &mut out), 1);
    assert_eq!((out[0].source, out[0].tag), (1, 6));
    assert_eq!(e.unmatched(0, 1, &mut out), 0, "another context");
    let mut one = [out[0]; 1];
    assert_eq!(e.unmatched(0, 0, &mut one), 2, "counts beyond the array");
    assert_eq!(one[0].tag, 4);
    assert!(!e.credit_owed(0), "nothing freed yet");
    // Receiving frees entries: a return is owed until it goes out.
    let a = net.recv(2, 0, 4, 3);
    let b = net.recv(2, 0, 7, 5);
    assert!(net.e(2).credit_owed(0));
    net.run(|| 0);
    assert!(!net.e(2).credit_owed(0), "returned");
    assert_eq!(net.e(0).credits_available(2), 5);
    assert_eq!(net.take(2, a).1, bytes(1, 3));
    assert_eq!(net.take(2, b).1, bytes(3, 5));
}

/// A send not yet transmitted can be cancelled (it then never reaches the
/// peer); once transmitted it cannot.
#[test]
fn a_queued_send_cancels_and_a_transmitted_one_does_not() {
    let mut net = Net::new(2, 2, 16, true);
    let s = net.send(0, 1, 3, bytes(1, 4), false);
    assert!(net.e(0).cancel(s));
    assert_eq!(net.take(0, s).0, Err(OpError::Cancelled));
    let s2 = net.send(0, 1, 3, bytes(2, 100), false);
    net.transmit();
    assert!(!net.e(0).cancel(s2), "its RTS is out");
    let r = net.recv(1, 0, 3, 100);
    net.run(|| 0);
    assert_eq!(
        net.take(1, r).1,
        bytes(2, 100),
        "the cancelled one never came"
    );
    assert!(net.take(0, s2).0.is_ok());
    assert_eq!(net.e(1).probe(0, 0, ANY_TAG), None);
}

/// An answer naming a live operation is refused from any peer but the one
/// the operation waits on, and in any state but the one it answers.
#[test]
fn answers_from_the_wrong_peer_or_for_the_wrong_state_are_refused() {
    let mut net = Net::new(3, 2, 16, true);
    let s = net.send(0, 1, 3, bytes(1, 100), false);
    net.transmit();
    let none = u16::MAX - 2;
    let answer = |kind| Header {
        token: s.token(),
        credit: none,
        ecredit: none,
        ..Header::new(kind, 0, 0, 100)
    };
    let e = &mut net.e(0);
    assert!(matches!(
        e.on_message(2, &answer(Kind::Fin), MemDesc::NONE, &mut |_| {}),
        Err(ProtoError::BadToken { peer: 2, .. })
    ));
    assert!(matches!(
        e.on_message(1, &answer(Kind::Ack), MemDesc::NONE, &mut |_| {}),
        Err(ProtoError::BadToken { peer: 1, .. })
    ));
    assert_eq!(e.phase(s), Some(Phase::WaitReceiver), "untouched");
}

#[test]
fn protocol_errors_explain_themselves() {
    for e in [
        ProtoError::CreditOverrun { peer: 3 },
        ProtoError::BadCredit { peer: 3 },
        ProtoError::PeerLost { peer: 3 },
    ] {
        let text = std::format!("{e}");
        assert!(text.contains('3'), "{e:?}: {text:?}");
    }
}

#[derive(Debug, Clone)]
enum Step {
    Send {
        from: u32,
        to: u32,
        tag: u32,
        len: usize,
        sync: bool,
    },
    Recv {
        at: u32,
        src: Option<u32>,
        tag: Option<u32>,
        cap: usize,
    },
    Run,
}

fn step(n: u32) -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..n, 0..n, 0u32..3, 0usize..40, any::<bool>()).prop_map(|(from, to, tag, len, sync)| {
            Step::Send {
                from,
                to,
                tag,
                len,
                sync,
            }
        }),
        (
            0..n,
            proptest::option::of(0..n),
            proptest::option::of(0u32..3),
            0usize..48
        )
            .prop_map(|(at, src, tag, cap)| Step::Recv { at, src, tag, cap }),
        Just(Step::Run),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Random programs whose sends each get exactly one matching receive
    /// (posted in random order relative to the sends) complete with every
    /// message delivered once, byte-exact, in non-overtaking order, and
    /// never more messages outstanding than credits.
    #[test]
    fn random_programs_deliver_exactly_once_in_order(
        n in 2u32..5,
        credits in 1u16..4,
        reorder in any::<bool>(),
        pull_ok in any::<bool>(),
        steps in proptest::collection::vec(step(4), 1..40),
        seed in any::<u64>(),
    ) {
        let mut net = Net::new(n, credits, 16, pull_ok);
        let mut rng = seed;
        let mut next = move || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; rng as usize };
        let mut sent: Vec<(u32, u32, u32, Vec<u8>, Handle)> = Vec::new();
        let mut recvs: Vec<(u32, u32, u32, Handle)> = Vec::new();
        let mut count = 0u8;
        for s in steps {
            match s {
                Step::Send { from, to, tag, len, sync } => {
                    let (from, to) = (from % n, to % n);
                    count = count.wrapping_add(1);
                    let mut data = bytes(count, len);
                    if len > 0 { data[0] = count; }
                    let h = net.send(from, to, tag, data.clone(), sync);
                    sent.push((from, to, tag, data, h));
                }
                Step::Recv { at, src, tag, cap } => {
                    let at = at % n;
                    let src = src.map_or(ANY_SOURCE, |s| s % n);
                    let tag = tag.unwrap_or(ANY_TAG);
                    let h = net.recv(at, src, tag, cap.max(40));
                    recvs.push((at, src, tag, h));
                }
                Step::Run => {
                    let mut o = || if reorder { next() } else { 0 };
                    net.run(&mut o);
                }
            }
        }
        // Post one exact receive for every send, then drain. With wildcard
        // receives posted too, some of these may stay unmatched: cancel them.
        let exact: Vec<_> = sent.iter().map(|(f, t, tag, _, _)| (*t, net.recv(*t, *f, *tag, 40), *f, *tag)).collect();
        let mut o = || if reorder { next() } else { 0 };
        net.run(&mut o);
        let mut got: Vec<(u32, u32, Vec<u8>, Status)> = Vec::new();
        let mut order: Vec<(u32, u32, u32, Status)> = Vec::new();
        let mut ids: Vec<Option<u8>> = Vec::new();
        for (at, src, tag, h) in recvs.iter().copied().chain(exact.iter().map(|&(t, h, f, tag)| (t, f, tag, h))) {
            let ph = net.e(at as usize).phase(h);
            if ph == Some(Phase::Posted) {
                prop_assert!(net.e(at as usize).cancel(h));
                let _ = net.take(at, h);
                continue;
            }
            let (st, buf) = net.take(at, h);
            let st = st.unwrap();
            prop_assert!(src == ANY_SOURCE || st.source == src);
            prop_assert!(tag == ANY_TAG || st.tag == tag);
            got.push((at, st.source, buf[..st.len as usize].to_vec(), st));
            order.push((at, src, tag, st));
            ids.push(buf.first().copied().filter(|_| st.len > 0));
        }
        // Non-overtaking: of two receives at one rank, the earlier posted
        // never gets the later-sent of two messages from one sender when
        // the earlier-sent one would also have matched it.
        let sent_at = |id: u8| sent.iter().position(|(_, _, _, d, _)| d.first() == Some(&id));
        for a in 0..order.len() {
            for b in a + 1..order.len() {
                let ((ra, sa, ta, ma), (rb, _, _, mb)) = (order[a], order[b]);
                if ra != rb || ma.source != mb.source {
                    continue;
                }
                let (Some(ia), Some(ib)) = (ids[a].and_then(sent_at), ids[b].and_then(sent_at)) else {
                    continue;
                };
                let fits_a = (sa == ANY_SOURCE || sa == mb.source) && (ta == ANY_TAG || ta == mb.tag);
                prop_assert!(!(ib < ia && fits_a), "message {} overtook {} at rank {}", ia, ib, ra);
            }
        }
        // Exactly once, byte-exact.
        prop_assert_eq!(got.len(), sent.len());
        for (f, t, _, data, h) in &sent {
            let (res, _) = net.take(*f, *h);
            let _ = data;
            prop_assert!(res.is_ok());
            let hits = got.iter().filter(|(at, src, d, _)| at == t && src == f && d == data).count();
            prop_assert!(hits >= 1, "message from {} to {} lost", f, t);
        }
        prop_assert!(net.max_outstanding <= credits as u64);
        for e in &net.net.engines { prop_assert_eq!(e.in_use(), 0); }
    }
}

/// MPI's progress rule with one eager credit: unreceived earlier messages
/// must not keep a later one, whose receive is posted, from being sent.
#[test]
fn out_of_eager_credit_a_matchable_message_still_goes_as_rts() {
    for pull_ok in [true, false] {
        let mut net = Net::new(2, 1, 16, pull_ok);
        let sends: Vec<_> = (0..4)
            .map(|t| net.send(0, 1, t, bytes(t as u8, 8), false))
            .collect();
        net.run(|| 0);
        // Receive the last first: it must arrive although tags 0..2 wait.
        let r = net.recv(1, 0, 3, 8);
        net.run(|| 0);
        assert_eq!(net.take(1, r).1, bytes(3, 8));
        for t in (0..3).rev() {
            let r = net.recv(1, 0, t, 8);
            net.run(|| 0);
            assert_eq!(net.take(1, r).1, bytes(t as u8, 8));
        }
        for s in sends {
            assert!(net.take(0, s).0.is_ok());
        }
        assert!(net.max_outstanding <= 1);
    }
}
