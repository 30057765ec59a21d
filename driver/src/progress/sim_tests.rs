//! Deterministic simulation of the progress layer (issue 12, item 3): the
//! real [`Engine`] of 2-3 ranks, in one thread, over the seeded simulated
//! transport of [`crate::transport::sim`], under a seeded scheduler.
//!
//! # What runs
//!
//! Per seed, a random job: 2 or 3 ranks, a random protocol (eager limit,
//! credits, entries) and a random transport (pipe capacity, delays, jams,
//! partial streams, per-link pulls: none, at once, or later), and a program
//! per rank in rounds. Each round uses its own context (as a fresh
//! communicator would), so rounds never match each other's messages, and
//! is built the way the comm layer uses the engine:
//!
//! * first the non-blocking operations, in random order: `isend`/`issend`
//!   ([`Engine::post_send`]), `irecv` ([`Engine::post_recv`]), `iprobe`
//!   ([`Engine::probe`]) and `Request::cancel` ([`Engine::cancel_recv`],
//!   with a new receive posted for a cancelled one);
//! * then blocking ones: `send` tries [`Engine::try_send_now`] before
//!   posting, `recv` from one source spins on [`Engine::try_recv_now`]
//!   (with `progress` while operations are in flight) before posting, and a
//!   posted blocking operation is waited for with `progress` / `take` /
//!   `check_peers`;
//! * then the end of the scope: every operation is taken.
//!
//! Waits may time out ([`Engine::withdraw`], then a new receive or send in
//! place of one that never matched or went out), as `wait_one` and a
//! panicking scope do. Receives are generated in classes whose filters
//! (exact, any tag, any source, both) never overlap, each class holding
//! exactly as many receives as messages, and blocking receives only wait
//! for non-blocking sends and blocking sends only for non-blocking
//! receives; with at most `envelopes - credits - 1` messages per pair and
//! round, every legal MPI execution of the program completes.
//!
//! The scheduler picks, step by step, a rank and what it does next: its
//! next program step, a `progress` pass, a `take` poll, a peer check, a
//! scope walk, a cancel or a timeout. Scenarios: a normal run; a run in
//! which one rank is killed at a random step; a run in which a wait on a
//! rendezvous send times out, which breaks the channel to its peer.
//! When nothing moves for a while the transport turns calm (no more
//! adversity); when still nothing moves, only operations that may
//! legitimately wait forever (a wildcard receive whose message may never
//! come, an operation with a peer that broke the channel without telling)
//! may time out, else the run hangs: a failure.
//!
//! # Oracles
//!
//! * every receive gets the right message: receives are replayed in
//!   posting order and each must have the earliest message of its source
//!   that it matches and that no earlier receive took (MPI's non-overtaking
//!   order), byte-exact, with the right status, truncated exactly when the
//!   message is longer than the buffer; a receive withdrawn after it
//!   matched consumes that message; the guard bytes around every receive
//!   buffer and the bytes past the message stay untouched, and so does the
//!   whole buffer once its operation was taken or withdrawn (a cancelled
//!   one, or one withdrawn before it matched, is never written at all);
//! * every message between live ranks on an intact channel is received
//!   exactly once; a cancelled receive's message goes to a later one;
//! * a send completes with its own status, a synchronous or rendezvous send
//!   only after its receive was posted; send buffers are never written;
//! * a probe reports a message that was sent and not yet received;
//! * `cancel_recv` and the results agree, the scope walk lists exactly the
//!   scope's operations;
//! * after a kill, every survivor operation with the dead rank ends with
//!   `PeerLost` by itself (no timeout), traffic between survivors still
//!   completes, and only failed relations ever see errors;
//! * at the end: no operation left (`in_use() == 0`), the core's own audit
//!   passes, no stream, pull or registration left, no frame in flight
//!   between live ranks; and the transport saw no breach of its contract
//!   (release without describe, a stream past the buffer its CTS described,
//!   a consume of the wrong length).
//!
//! `sim_progress_layer` prints `sim: N seeds, M scheduler steps, K ops
//! checked` (`--nocapture`), and what the runs exercised;
//! `TANDEM_SIM_SEEDS` sets the number of seeds, `TANDEM_SIM_SEED=n` runs
//! only seed `n` (`TANDEM_SIM_TRACE=1` traces it).
//! `sim_catches_broken_transports` proves the oracles catch a transport
//! that drops, duplicates or corrupts a message or swaps two stream
//! chunks.
//!
//! # Bugs it found
//!
//! Two bugs of the progress layer, both about empty buffer descriptions,
//! fixed since; `regression_cts_after_withdraw` and
//! `regression_empty_buffer_description` replay them.

use super::{delivered, Engine, Fast, OpId, Protocol, Status, ANY_SOURCE, ANY_TAG};
use crate::config::Config;
use crate::error::Error;
use crate::transport::sim::{lock, Fault, Net, PullMode, Rng, Shared, SimOptions};
use std::collections::{HashMap, VecDeque};
use tandem_core::proto::Phase;

/// Guard bytes on each side of a receive buffer.
const GUARD: usize = 16;
/// Scheduler steps one seed may take.
const MAX_STEPS: u64 = 400_000;
/// Steps without any movement before the transport turns calm, and again
/// before the run counts as stuck.
const IDLE: u32 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Normal,
    /// `victim` dies at scheduler step `at`.
    Kill {
        victim: usize,
        at: u64,
    },
    /// A timed-out rendezvous send breaks its channel (once).
    Abandon,
}

#[derive(Debug, Clone)]
struct Setup {
    n: usize,
    eager: usize,
    credits: u32,
    envelopes: u32,
    scenario: Scenario,
    opts: SimOptions,
    /// Per mille of background actions that time out a wait.
    timeouts: u32,
    /// How often each rank is scheduled, relatively.
    speed: Vec<usize>,
}

#[derive(Debug, Clone)]
enum Step {
    Send {
        dst: usize,
        tag: u32,
        len: usize,
        sync: bool,
        blocking: bool,
    },
    Recv {
        src: u32,
        tag: u32,
        cap: usize,
        blocking: bool,
    },
    Probe {
        src: u32,
        tag: u32,
    },
    Cancel,
}

/// One rank's part of one round.
#[derive(Debug, Clone, Default)]
struct RoundPlan {
    post: Vec<Step>,
    tail: Vec<Step>,
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i + 1);
        v.swap(i, j);
    }
}

fn gen_len(rng: &mut Rng, eager: usize) -> usize {
    match rng.below(10) {
        0 => 0,
        1..=3 => rng.range(1, eager),
        4 => eager,
        5 => eager + 1,
        6..=8 => rng.range(eager + 1, 4 * eager),
        _ => rng.range(200, 3000),
    }
}

fn gen_cap(rng: &mut Rng, len: usize, eager: usize, wild_src: bool) -> usize {
    let cap = match rng.below(20) {
        0..=7 => len,
        8..=12 => len + rng.below(17),
        13..=15 => rng.below(len + 1),
        _ => rng.below(4 * eager + 1),
    };
    // A truncated message from an unknown source is told apart by its
    // first 8 bytes (its number).
    if wild_src {
        cap.max(8)
    } else {
        cap
    }
}

/// The job's setup and every rank's program.
fn generate(seed: u64, fault: Fault) -> (Setup, Vec<Vec<RoundPlan>>) {
    let mut rng = crate::transport::sim::rng(seed);
    let n = if rng.chance_per_mille(500) { 3 } else { 2 };
    let eager = [8, 16, 32, 64][rng.below(4)];
    let credits = rng.range(1, 3) as u32;
    let envelopes = credits + rng.range(1, 4) as u32;
    let rounds = rng.range(1, 6);
    let scenario = match (fault, rng.below(10)) {
        (Fault::None, 0..=2) => Scenario::Kill {
            victim: rng.below(n),
            at: rng.range(5, 100 * rounds) as u64,
        },
        (Fault::None, 3..=4) => Scenario::Abandon,
        _ => Scenario::Normal,
    };
    let pulls = (0..n * n)
        .map(|_| match rng.below(4) {
            0 => PullMode::Now,
            // A later pull into a receive that times out is waited for
            // (the link places directly); a stream fallback, which only a
            // broken channel causes, would wait seconds.
            1 if scenario != Scenario::Abandon => PullMode::Later,
            _ => PullMode::Stream,
        })
        .collect();
    let min_cap = 8 + tandem_core::wire::HEADER_LEN + eager.max(crate::transport::DESC_LEN);
    let opts = SimOptions {
        cap: min_cap + [0, 16, 100, 600, 5000][rng.below(5)],
        delay: [0, 100, 300, 600][rng.below(4)],
        jam: [0, 100, 300][rng.below(3)],
        partial: [0, 300, 800][rng.below(3)],
        pull_done: [100, 500][rng.below(2)],
        lost_at_once: rng.chance_per_mille(500),
        pulls,
        fault,
        fault_after: rng.below(4) as u32,
    };
    let timeouts = [0, 5, 20][rng.below(3)];
    let setup = Setup {
        n,
        eager,
        credits,
        envelopes,
        scenario,
        opts,
        timeouts,
        speed: (0..n).map(|_| [1, 2, 4, 8][rng.below(4)]).collect(),
    };

    let per_pair = (envelopes - credits - 1).clamp(1, 3) as usize;
    let mut plan = vec![Vec::new(); n];
    for _ in 0..rounds {
        let mut rp = vec![RoundPlan::default(); n];
        for d in 0..n {
            // The messages to `d` this round.
            let mut msgs = Vec::new();
            for s in 0..n {
                for _ in 0..rng.below(per_pair + 1) {
                    let tag = rng.below(3) as u32;
                    let len = gen_len(&mut rng, eager);
                    msgs.push((s, tag, len, rng.chance_per_mille(200)));
                }
            }
            // Receive filters that never overlap: all exact, any tag per
            // source, any source per tag, or one wildcard for all. A rank
            // that may lose a peer gets no wildcard source where that
            // peer's message could be due: it could wait forever, legally.
            let may_lose = match scenario {
                Scenario::Normal => false,
                Scenario::Abandon => true,
                Scenario::Kill { victim, .. } => msgs.iter().any(|m| m.0 == victim),
            };
            let shape = rng.below(if may_lose { 2 } else { 4 });
            let by_src: Vec<bool> = (0..n).map(|_| rng.chance_per_mille(500)).collect();
            let by_tag: Vec<bool> = (0..3).map(|_| rng.chance_per_mille(500)).collect();
            let filter = |s: usize, t: u32| -> (u32, u32) {
                match shape {
                    1 if by_src[s] => (s as u32, ANY_TAG),
                    2 if by_tag[t as usize] => (ANY_SOURCE, t),
                    3 => (ANY_SOURCE, ANY_TAG),
                    _ => (s as u32, t),
                }
            };
            let mut classes: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
            let mut keys = Vec::new();
            for (i, &(s, t, _, _)) in msgs.iter().enumerate() {
                let k = filter(s, t);
                if !classes.contains_key(&k) {
                    keys.push(k);
                }
                classes.entry(k).or_default().push(i);
            }
            // How much of the round blocks (blocking receives with nothing
            // else posted are what the fast paths need).
            let blocks = [0, 300, 700, 1000][rng.below(4)];
            let all_recvs_block = rng.chance_per_mille(250);
            for k in keys {
                // Either its receives never block (and its sends may), or
                // its sends never block (and its receives may).
                let blocking_recvs = all_recvs_block || rng.chance_per_mille(500);
                for &i in &classes[&k] {
                    let (s, tag, len, sync) = msgs[i];
                    let send_blocks = !blocking_recvs && rng.chance_per_mille(blocks);
                    let recv_blocks = blocking_recvs && rng.chance_per_mille(blocks);
                    let send = Step::Send {
                        dst: d,
                        tag,
                        len,
                        sync,
                        blocking: send_blocks,
                    };
                    match send_blocks {
                        true => rp[s].tail.push(send),
                        false => rp[s].post.push(send),
                    }
                    let cap = gen_cap(&mut rng, len, eager, k.0 == ANY_SOURCE);
                    let recv = Step::Recv {
                        src: k.0,
                        tag: k.1,
                        cap,
                        blocking: recv_blocks,
                    };
                    match recv_blocks {
                        true => rp[d].tail.push(recv),
                        false => rp[d].post.push(recv),
                    }
                }
            }
        }
        for (r, mut p) in rp.into_iter().enumerate() {
            for _ in 0..rng.below(3) {
                let src = match rng.below(3) {
                    0 => ANY_SOURCE,
                    _ => rng.below(n) as u32,
                };
                let tag = match rng.below(3) {
                    0 => ANY_TAG,
                    _ => rng.below(3) as u32,
                };
                p.post.push(Step::Probe { src, tag });
            }
            for _ in 0..rng.below(3) {
                p.post.push(Step::Cancel);
            }
            shuffle(&mut rng, &mut p.post);
            shuffle(&mut rng, &mut p.tail);
            plan[r].push(p);
        }
    }
    (setup, plan)
}

fn payload(seed: u64, id: usize, len: usize) -> Box<[u8]> {
    let mut rng =
        crate::transport::sim::rng(seed ^ (id as u64).wrapping_mul(0xa076_1d64_78bd_642f));
    let head = (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|i| match i {
            0..=7 => (head >> (8 * i)) as u8,
            _ => rng.next_u64() as u8,
        })
        .collect()
}

/// The byte at `j` of receive `i`'s memory before anything writes it.
fn pattern(i: usize, j: usize) -> u8 {
    0xa5 ^ (j as u8).wrapping_mul(29) ^ (i as u8).wrapping_mul(101) ^ (j >> 8) as u8
}

struct Msg {
    src: usize,
    dst: usize,
    ctx: u16,
    tag: u32,
    len: usize,
    sync: bool,
    buf: Box<[u8]>,
    /// Posted, and part of the pair's order (not refused, not withdrawn
    /// before it went out).
    sent: bool,
    posted: u64,
    result: Option<Result<Status, Error>>,
    done_at: u64,
    withdrawn: Option<Phase>,
    /// The receive that got (or consumed) it.
    got_by: Option<usize>,
    /// Skipped by a receive on a failed relation: never receivable again.
    lost: bool,
}

struct Recv {
    rank: usize,
    ctx: u16,
    src: u32,
    tag: u32,
    cap: usize,
    mem: Box<[u8]>,
    posted: u64,
    result: Option<Result<Status, Error>>,
    withdrawn: Option<Phase>,
    cancel_said: Option<bool>,
    /// The buffer when its operation ended: it must never change again.
    snapshot: Option<Box<[u8]>>,
}

impl Recv {
    fn buf(&mut self) -> &mut [u8] {
        &mut self.mem[GUARD..GUARD + self.cap]
    }
    fn matches(&self, m: &Msg) -> bool {
        m.dst == self.rank
            && m.ctx == self.ctx
            && (self.src == ANY_SOURCE || self.src as usize == m.src)
            && (self.tag == ANY_TAG || self.tag == m.tag)
    }
}

struct ProbeRec {
    rank: usize,
    ctx: u16,
    src: u32,
    tag: u32,
    st: Status,
    at: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    Send(usize),
    Recv(usize),
}

#[derive(Clone, Copy, Debug)]
struct Op {
    id: OpId,
    what: What,
    blocking: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ready,
    /// A blocking receive on its fast path.
    Fast {
        recv: usize,
        spins: u32,
    },
    /// In a blocking wait for this operation.
    Blocked(OpId),
}

struct Rank {
    plan: Vec<RoundPlan>,
    round: usize,
    queue: VecDeque<Step>,
    state: State,
    ops: Vec<Op>,
    finished: bool,
}

/// What one seed did.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    steps: u64,
    ops: u64,
    cov: Cov,
}

/// What the runs exercised, to see the scheduler reaches the paths that
/// matter.
#[derive(Debug, Default, Clone, Copy)]
struct Cov {
    kills: u64,
    broken: u64,
    fast_sends: u64,
    fast_recvs: u64,
    rendezvous: u64,
    truncated: u64,
    cancelled: u64,
    timeouts: u64,
    lost: u64,
    probes: u64,
    pulls: u64,
}

impl Cov {
    fn add(&mut self, o: &Cov) {
        self.kills += o.kills;
        self.broken += o.broken;
        self.fast_sends += o.fast_sends;
        self.fast_recvs += o.fast_recvs;
        self.rendezvous += o.rendezvous;
        self.truncated += o.truncated;
        self.cancelled += o.cancelled;
        self.timeouts += o.timeouts;
        self.lost += o.lost;
        self.probes += o.probes;
        self.pulls += o.pulls;
    }
}

struct World {
    seed: u64,
    setup: Setup,
    rng: Rng,
    net: Shared,
    eng: Vec<Engine>,
    ranks: Vec<Rank>,
    msgs: Vec<Msg>,
    recvs: Vec<Recv>,
    probes: Vec<ProbeRec>,
    /// Logical time: every posting, completion and probe gets a tick.
    clock: u64,
    dead: Vec<bool>,
    /// Channels a rank broke itself: (rank, peer).
    broke: Vec<(usize, usize)>,
    /// Harness events (posts, completions, ...), for idle detection.
    events: u64,
    steps: u64,
    errors: Vec<String>,
    cov: Cov,
    trace: bool,
}

impl Drop for World {
    fn drop(&mut self) {
        // Engines drop after this: with every link reporting its peer
        // gone, they do not wait to deliver answers.
        lock(&self.net).shutdown = true;
    }
}

macro_rules! trace {
    ($w:expr, $($t:tt)*) => {
        if $w.trace {
            eprintln!("[{:>6}] {}", $w.steps, format!($($t)*));
        }
    };
}

fn is_lost_error(e: &Error, peer: usize) -> bool {
    matches!(e, Error::PeerLost { rank } if *rank == peer)
        || matches!(e, Error::ChannelBroken { peer: p, .. } if *p == peer)
}

impl World {
    fn new(seed: u64, fault: Fault, trace: bool) -> World {
        let (setup, plan) = generate(seed, fault);
        let net = Net::new(setup.n, seed, setup.opts.clone());
        let protocol = Protocol {
            eager_limit: setup.eager as u32,
            credits: setup.credits,
            envelopes: setup.envelopes,
        };
        let cfg = Config::default().max_requests(64);
        let eng = (0..setup.n)
            .map(|r| Engine::new(r, Net::links(&net, r), protocol, &cfg, None).expect("engine"))
            .collect();
        let ranks = plan
            .into_iter()
            .map(|plan| {
                let mut queue = VecDeque::new();
                if let Some(p) = plan.first() {
                    queue.extend(p.post.iter().cloned());
                    queue.extend(p.tail.iter().cloned());
                }
                Rank {
                    plan,
                    round: 0,
                    queue,
                    state: State::Ready,
                    ops: Vec::new(),
                    finished: false,
                }
            })
            .collect();
        if trace {
            eprintln!("sim seed {seed}: {setup:?}");
        }
        World {
            seed,
            rng: crate::transport::sim::rng(seed ^ 0x0bad_cafe),
            dead: vec![false; setup.n],
            setup,
            net,
            eng,
            ranks,
            msgs: Vec::new(),
            recvs: Vec::new(),
            probes: Vec::new(),
            clock: 0,
            broke: Vec::new(),
            events: 0,
            steps: 0,
            errors: Vec::new(),
            cov: Cov::default(),
            trace,
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn activity(&self) -> u64 {
        lock(&self.net).activity + self.events
    }

    fn ctx(&self, r: usize) -> u16 {
        self.ranks[r].round as u16 + 1
    }

    fn scope(&self, r: usize, blocking: bool) -> u32 {
        // Blocking calls post outside any scope, as the comm layer does.
        match blocking {
            true => 0,
            false => self.ranks[r].round as u32 + 1,
        }
    }

    /// Whether traffic between `a` and `b` may fail: one of them died, or
    /// one broke the channel.
    fn failed(&self, a: usize, b: usize) -> bool {
        self.dead[a]
            || self.dead[b]
            || self
                .broke
                .iter()
                .any(|&(x, y)| (x, y) == (a, b) || (x, y) == (b, a))
    }

    fn live(&self) -> Vec<usize> {
        (0..self.setup.n).filter(|&r| !self.dead[r]).collect()
    }

    fn fail(&mut self, why: String) {
        trace!(self, "ORACLE: {why}");
        self.errors.push(why);
    }

    // ---- the run ----

    fn run(&mut self) -> Result<(), String> {
        let mut idle = 0u32;
        let mut calm_left = 0u32;
        let mut last = self.activity();
        loop {
            if !self.errors.is_empty() {
                return Err(self.errors[0].clone());
            }
            if self.steps >= MAX_STEPS {
                return Err(format!("step bound hit\n{}", self.report()));
            }
            self.steps += 1;
            if let Scenario::Kill { victim, at } = self.setup.scenario {
                if self.steps == at && !self.dead[victim] {
                    trace!(self, "KILL rank {victim}");
                    self.dead[victim] = true;
                    self.cov.kills += 1;
                    lock(&self.net).kill(victim);
                    self.events += 1;
                    // A survivor in a wait may check its peers at once,
                    // before any progress drained what the victim sent.
                    for r in self.live() {
                        if self.rng.chance_per_mille(500) {
                            self.eng[r].check_peers();
                        }
                    }
                }
            }
            let live = self.live();
            if live
                .iter()
                .all(|&r| self.ranks[r].finished && self.ranks[r].ops.is_empty())
            {
                return Ok(());
            }
            // Ranks run at their own speeds.
            let total: usize = live.iter().map(|&r| self.setup.speed[r]).sum();
            let mut pick = self.rng.below(total);
            let mut r = live[0];
            for &q in &live {
                if pick < self.setup.speed[q] {
                    r = q;
                    break;
                }
                pick -= self.setup.speed[q];
            }
            self.step(r);
            let a = self.activity();
            if a != last {
                last = a;
                idle = 0;
                if calm_left > 0 {
                    calm_left -= 1;
                    if calm_left == 0 {
                        lock(&self.net).calm = false;
                    }
                }
                continue;
            }
            idle += 1;
            if idle == IDLE {
                trace!(self, "calm");
                lock(&self.net).calm = true;
                calm_left = 1000;
            } else if idle >= 2 * IDLE {
                // Truly stuck? One last sweep over every rank.
                for &r in &live {
                    self.eng[r].check_peers();
                    self.eng[r].progress();
                    self.take_all(r);
                }
                // A rank that can take its next program step is not stuck
                // (a timeout just freed it, say).
                let movable = live.iter().any(|&r| {
                    let rk = &self.ranks[r];
                    match rk.state {
                        State::Fast { .. } => true,
                        State::Ready => !rk.queue.is_empty() || (rk.ops.is_empty() && !rk.finished),
                        State::Blocked(_) => false,
                    }
                });
                if self.activity() != last || movable {
                    idle = 0;
                    continue;
                }
                if !self.time_out_excused() {
                    return Err(format!("hang: nothing moves\n{}", self.report()));
                }
                idle = 0;
            }
        }
    }

    fn step(&mut self, r: usize) {
        let roll = self.rng.below(100);
        let state = self.ranks[r].state;
        match state {
            State::Fast { .. } if roll < 60 => self.fast_attempt(r),
            State::Ready if !self.ranks[r].queue.is_empty() && roll < 50 => {
                let s = self.ranks[r].queue.pop_front().expect("checked");
                self.exec(r, s);
            }
            State::Ready
                if self.ranks[r].queue.is_empty()
                    && self.ranks[r].ops.is_empty()
                    && !self.ranks[r].finished =>
            {
                self.next_round(r)
            }
            _ => self.background(r),
        }
    }

    fn next_round(&mut self, r: usize) {
        let rk = &mut self.ranks[r];
        rk.round += 1;
        self.events += 1;
        match rk.plan.get(rk.round) {
            Some(p) => {
                rk.queue.extend(p.post.iter().cloned());
                rk.queue.extend(p.tail.iter().cloned());
                trace!(self, "rank {r}: round {}", self.ranks[r].round);
            }
            None => {
                rk.finished = true;
                trace!(self, "rank {r}: finished");
            }
        }
    }

    fn exec(&mut self, r: usize, s: Step) {
        match s {
            Step::Send {
                dst,
                tag,
                len,
                sync,
                blocking,
            } => self.send(r, dst, tag, len, sync, blocking),
            Step::Recv {
                src,
                tag,
                cap,
                blocking,
            } => self.recv(r, src, tag, cap, blocking),
            Step::Probe { src, tag } => {
                let ctx = self.ctx(r);
                if let Some(st) = self.eng[r].probe(src, ctx, tag) {
                    let at = self.tick();
                    self.cov.probes += 1;
                    trace!(self, "rank {r}: probe({src:#x},{tag:#x}) = {st:?}");
                    self.probes.push(ProbeRec {
                        rank: r,
                        ctx,
                        src,
                        tag,
                        st,
                        at,
                    });
                }
            }
            Step::Cancel => self.cancel_some(r),
        }
    }

    fn send(&mut self, r: usize, dst: usize, tag: u32, len: usize, sync: bool, blocking: bool) {
        let m = self.msgs.len();
        let ctx = self.ctx(r);
        let posted = self.tick();
        self.msgs.push(Msg {
            src: r,
            dst,
            ctx,
            tag,
            len,
            sync,
            buf: payload(self.seed, m, len),
            sent: false,
            posted,
            result: None,
            done_at: 0,
            withdrawn: None,
            got_by: None,
            lost: false,
        });
        self.events += 1;
        if blocking && !sync && self.eng[r].try_send_now(&self.msgs[m].buf, dst, ctx, tag) {
            trace!(
                self,
                "rank {r}: send#{m} to {dst} tag {tag} len {len}: fast"
            );
            self.cov.fast_sends += 1;
            let msg = &mut self.msgs[m];
            msg.sent = true;
            msg.result = Some(Ok(Status {
                source: dst,
                tag,
                len,
            }));
            msg.done_at = posted;
            return;
        }
        let scope = self.scope(r, blocking);
        match self.eng[r].post_send(&self.msgs[m].buf, dst, ctx, tag, sync, scope) {
            Ok(id) => {
                trace!(
                    self,
                    "rank {r}: send#{m} to {dst} tag {tag} len {len} sync {sync} blocking {blocking}"
                );
                self.msgs[m].sent = true;
                self.ranks[r].ops.push(Op {
                    id,
                    what: What::Send(m),
                    blocking,
                });
                if blocking {
                    self.ranks[r].state = State::Blocked(id);
                }
            }
            Err(e) => {
                trace!(self, "rank {r}: send#{m} to {dst} refused: {e}");
                self.msgs[m].result = Some(Err(e));
                self.msgs[m].done_at = posted;
            }
        }
    }

    fn recv(&mut self, r: usize, src: u32, tag: u32, cap: usize, blocking: bool) {
        let i = self.recvs.len();
        let ctx = self.ctx(r);
        self.recvs.push(Recv {
            rank: r,
            ctx,
            src,
            tag,
            cap,
            mem: (0..cap + 2 * GUARD).map(|j| pattern(i, j)).collect(),
            posted: 0,
            result: None,
            withdrawn: None,
            cancel_said: None,
            snapshot: None,
        });
        self.events += 1;
        if blocking && src != ANY_SOURCE {
            let most = [16, 64, 512][self.rng.below(3)];
            let spins = self.rng.range(1, most) as u32;
            self.ranks[r].state = State::Fast { recv: i, spins };
            return;
        }
        self.post_recv(r, i, blocking);
    }

    fn post_recv(&mut self, r: usize, i: usize, blocking: bool) {
        self.recvs[i].posted = self.tick();
        self.events += 1;
        let scope = self.scope(r, blocking);
        let rv = &mut self.recvs[i];
        let (src, ctx, tag, cap) = (rv.src, rv.ctx, rv.tag, rv.cap);
        match self.eng[r].post_recv(rv.buf(), src, ctx, tag, scope) {
            Ok(id) => {
                trace!(
                    self,
                    "rank {r}: recv#{i} from {src:#x} tag {tag:#x} cap {cap} blocking {blocking}"
                );
                self.ranks[r].ops.push(Op {
                    id,
                    what: What::Recv(i),
                    blocking,
                });
                self.ranks[r].state = match blocking {
                    true => State::Blocked(id),
                    false => State::Ready,
                };
            }
            Err(e) => {
                self.fail(format!("rank {r}: post_recv failed: {e}"));
                self.ranks[r].state = State::Ready;
            }
        }
    }

    fn fast_attempt(&mut self, r: usize) {
        let State::Fast { recv: i, spins } = self.ranks[r].state else {
            return;
        };
        let rv = &mut self.recvs[i];
        let (src, ctx, tag) = (rv.src as usize, rv.ctx, rv.tag);
        match self.eng[r].try_recv_now(rv.buf(), src, ctx, tag) {
            Fast::Done(st) => {
                let res = delivered(st, rv.buf().len());
                let at = self.tick();
                trace!(self, "rank {r}: recv#{i} fast: {res:?}");
                let rv = &mut self.recvs[i];
                rv.posted = at;
                self.cov.fast_recvs += 1;
                rv.snapshot = Some(rv.mem.clone());
                rv.result = Some(res);
                self.ranks[r].state = State::Ready;
                self.events += 1;
            }
            Fast::Failed => {
                let e = self.eng[r].lost(src);
                trace!(self, "rank {r}: recv#{i} fast: torn: {e}");
                let rv = &mut self.recvs[i];
                rv.snapshot = Some(rv.mem.clone());
                rv.result = Some(Err(e));
                self.ranks[r].state = State::Ready;
                self.events += 1;
            }
            Fast::NotYet if spins > 1 => {
                self.ranks[r].state = State::Fast {
                    recv: i,
                    spins: spins - 1,
                };
                if self.rng.chance_per_mille(250) && self.eng[r].in_use() > 0 {
                    self.eng[r].progress();
                }
            }
            Fast::NotYet | Fast::Fallback => self.post_recv(r, i, true),
        }
    }

    /// A receive in place of one cancelled or withdrawn before it matched.
    fn replace_recv(&mut self, r: usize, i: usize) {
        let rv = &self.recvs[i];
        let (src, tag, cap) = (rv.src, rv.tag, rv.cap);
        self.recv(r, src, tag, cap, false);
    }

    fn background(&mut self, r: usize) {
        let state = self.ranks[r].state;
        // Between the steps of a round, or waiting at its end (user code
        // that may test, cancel or time out its requests).
        let ready = state == State::Ready;
        let waiting = ready && self.ranks[r].queue.is_empty();
        let roll = self.rng.below(1000) as u32;
        if let State::Fast { .. } = state {
            // The fast-path loop drives progress while others' operations
            // are in flight.
            if self.eng[r].in_use() > 0 {
                self.eng[r].progress();
            }
        } else if roll < 500 {
            self.eng[r].progress();
        } else if roll < 800 {
            match state {
                State::Blocked(id) => {
                    if let Some(k) = self.ranks[r].ops.iter().position(|o| o.id == id) {
                        self.take(r, k);
                    }
                }
                _ if !self.ranks[r].ops.is_empty() => {
                    let k = self.rng.below(self.ranks[r].ops.len());
                    self.take(r, k);
                }
                _ => {}
            }
        } else if roll < 860 {
            self.eng[r].check_peers();
        } else if roll < 880 && ready {
            self.check_scope(r);
        } else if roll < 900 && waiting {
            self.cancel_some(r);
        } else if (900..900 + self.setup.timeouts).contains(&roll) {
            match state {
                State::Blocked(id) => {
                    if let Some(k) = self.ranks[r].ops.iter().position(|o| o.id == id) {
                        self.time_out(r, k);
                    }
                }
                _ if waiting && !self.ranks[r].ops.is_empty() => {
                    let k = self.rng.below(self.ranks[r].ops.len());
                    self.time_out(r, k);
                }
                _ => {}
            }
        } else {
            self.eng[r].progress();
        }
    }

    fn take_all(&mut self, r: usize) {
        let mut k = 0;
        while k < self.ranks[r].ops.len() {
            if !self.take(r, k) {
                k += 1;
            }
        }
    }

    /// Polls operation `k` of rank `r`; `true` if it finished (and is gone
    /// from the list).
    fn take(&mut self, r: usize, k: usize) -> bool {
        let op = self.ranks[r].ops[k];
        let Some(res) = self.eng[r].take(op.id) else {
            return false;
        };
        self.ranks[r].ops.remove(k);
        if self.ranks[r].state == State::Blocked(op.id) {
            self.ranks[r].state = State::Ready;
        }
        if !matches!(res, Err(Error::Cancelled)) {
            self.events += 1;
        }
        let at = self.tick();
        match op.what {
            What::Send(m) => {
                trace!(self, "rank {r}: send#{m} done: {res:?}");
                let msg = &self.msgs[m];
                if let Ok(st) = &res {
                    let want = Status {
                        source: msg.dst,
                        tag: msg.tag,
                        len: msg.len,
                    };
                    if *st != want {
                        let e = format!("rank {r}: send#{m} completed with {st:?}, not {want:?}");
                        self.fail(e);
                    }
                }
                let msg = &mut self.msgs[m];
                msg.result = Some(res);
                msg.done_at = at;
            }
            What::Recv(i) => {
                trace!(self, "rank {r}: recv#{i} done: {res:?}");
                let rv = &mut self.recvs[i];
                let cancelled = matches!(res, Err(Error::Cancelled));
                let said = rv.cancel_said == Some(true);
                rv.snapshot = Some(rv.mem.clone());
                rv.result = Some(res);
                if cancelled != said {
                    let e = format!(
                        "rank {r}: recv#{i}: cancel_recv said {:?} but the receive ended {:?}",
                        self.recvs[i].cancel_said, self.recvs[i].result
                    );
                    self.fail(e);
                }
            }
        }
        true
    }

    /// `Request::cancel` on a pending non-blocking receive; a cancelled
    /// one is replaced.
    fn cancel_some(&mut self, r: usize) {
        // As for timeouts: cancelling and replacing is no progress.
        let events = self.events;
        self.cancel_one(r);
        self.events = events;
    }

    fn cancel_one(&mut self, r: usize) {
        let cands: Vec<usize> = (0..self.ranks[r].ops.len())
            .filter(|&k| {
                let o = self.ranks[r].ops[k];
                matches!(o.what, What::Recv(_)) && !o.blocking
            })
            .collect();
        if cands.is_empty() {
            return;
        }
        let op = self.ranks[r].ops[cands[self.rng.below(cands.len())]];
        let What::Recv(i) = op.what else {
            unreachable!()
        };
        if self.recvs[i].cancel_said == Some(true) {
            return;
        }
        let ok = self.eng[r].cancel_recv(op.id);
        trace!(self, "rank {r}: cancel recv#{i}: {ok}");
        self.recvs[i].cancel_said = Some(ok);
        if ok {
            self.cov.cancelled += 1;
            self.replace_recv(r, i);
        }
    }

    /// The scope walk lists exactly this round's pending non-blocking
    /// operations.
    fn check_scope(&mut self, r: usize) {
        let scope = self.scope(r, false);
        let mut listed = Vec::new();
        let mut from = 0;
        while let Some((op, resume)) = self.eng[r].next_scope_op(scope, from) {
            listed.push(op);
            from = resume;
        }
        let mut mine: Vec<OpId> = self.ranks[r]
            .ops
            .iter()
            .filter(|o| !o.blocking)
            .map(|o| o.id)
            .collect();
        let key = |h: &OpId| h.token();
        listed.sort_by_key(key);
        mine.sort_by_key(key);
        if listed != mine {
            self.fail(format!(
                "rank {r}: the scope walk lists {listed:?}, the scope holds {mine:?}"
            ));
        }
    }

    /// A wait on operation `k` times out (as `wait_one` and a panicking
    /// scope withdraw), where the scenario allows it.
    fn time_out(&mut self, r: usize, k: usize) {
        // A timeout and what replaces the operation are no progress: a
        // run stuck but for them must still be seen as stuck.
        let events = self.events;
        self.maybe_time_out(r, k);
        self.events = events;
    }

    fn maybe_time_out(&mut self, r: usize, k: usize) {
        let op = self.ranks[r].ops[k];
        let Some(info) = self.eng[r].info(op.id) else {
            return self.fail(format!("rank {r}: no info for a pending operation"));
        };
        let allowed = match op.what {
            // A wildcard receive that matched would consume a message from
            // a source the test cannot tell.
            What::Recv(i) if self.recvs[i].src == ANY_SOURCE => info.phase == Phase::Posted,
            What::Recv(_) => info.phase != Phase::Done || self.rng.chance_per_mille(300),
            What::Send(_) => match info.phase {
                Phase::Queued | Phase::WaitAck | Phase::Done => true,
                Phase::WaitReceiver | Phase::Streaming => {
                    self.setup.scenario == Scenario::Abandon && self.broke.is_empty()
                }
                _ => false,
            },
        };
        if allowed {
            self.cov.timeouts += 1;
            self.withdraw(r, k, info.phase, true);
        }
    }

    fn withdraw(&mut self, r: usize, k: usize, phase: Phase, replace: bool) {
        let op = self.ranks[r].ops.remove(k);
        trace!(self, "rank {r}: withdraw {:?} in {phase:?}", op.what);
        let why = Error::Internal("sim: the wait timed out".into());
        self.eng[r].withdraw(op.id, &why);
        if self.ranks[r].state == State::Blocked(op.id) {
            self.ranks[r].state = State::Ready;
        }
        self.events += 1;
        self.tick();
        match op.what {
            What::Recv(i) => {
                let rv = &mut self.recvs[i];
                rv.withdrawn = Some(phase);
                rv.snapshot = Some(rv.mem.clone());
                if replace && phase == Phase::Posted {
                    self.replace_recv(r, i);
                }
            }
            What::Send(m) => {
                self.msgs[m].withdrawn = Some(phase);
                let (dst, tag, len, sync) = {
                    let msg = &self.msgs[m];
                    (msg.dst, msg.tag, msg.len, msg.sync)
                };
                match phase {
                    Phase::Queued => {
                        // It never went out: send it again.
                        self.msgs[m].sent = false;
                        if replace {
                            self.send(r, dst, tag, len, sync, false);
                        }
                    }
                    Phase::WaitReceiver | Phase::Streaming => {
                        if self.eng[r].peers[dst].broken.is_none() {
                            self.fail(format!(
                                "rank {r}: withdrawing a rendezvous send to {dst} did not break \
                                 the channel"
                            ));
                        }
                        self.broke.push((r, dst));
                        self.cov.broken += 1;
                    }
                    _ => {}
                }
            }
        }
    }

    /// Times out what may legitimately wait forever: every operation
    /// with a peer that broke the channel without telling (it will never
    /// answer); `false` if there is none. (Programs never leave a wildcard
    /// receive waiting for a message from a peer that may fail.)
    fn time_out_excused(&mut self) -> bool {
        let mut picked = Vec::new();
        for r in self.live() {
            for (k, op) in self.ranks[r].ops.iter().enumerate() {
                let Some(info) = self.eng[r].info(op.id) else {
                    continue;
                };
                let deserted = match op.what {
                    What::Recv(i) => self.broke.contains(&(self.recvs[i].src as usize, r)),
                    What::Send(m) => self.broke.contains(&(self.msgs[m].dst, r)),
                };
                if deserted {
                    picked.push((r, k, info.phase));
                }
            }
        }
        // Back to front, so the indices stay valid.
        picked.sort_by_key(|&(r, k, _)| (r, std::cmp::Reverse(k)));
        for &(r, k, phase) in &picked {
            trace!(
                self,
                "rank {r}: excused timeout of {:?}",
                self.ranks[r].ops[k].what
            );
            self.withdraw(r, k, phase, false);
        }
        !picked.is_empty()
    }

    fn coverage(&self) -> Cov {
        let mut c = self.cov;
        c.pulls = lock(&self.net).pulls_started;
        for g in &self.msgs {
            c.rendezvous += (g.sent && g.len > self.setup.eager) as u64;
            c.lost += matches!(&g.result, Some(Err(e)) if is_lost_error(e, g.dst)) as u64;
        }
        for rv in &self.recvs {
            c.truncated += matches!(rv.result, Some(Err(Error::Truncated { .. }))) as u64;
            c.lost += matches!(&rv.result, Some(Err(e))
                if matches!(e, Error::PeerLost { .. } | Error::ChannelBroken { .. }))
                as u64;
        }
        c
    }

    fn report(&self) -> String {
        let mut s = String::new();
        for r in 0..self.setup.n {
            let rk = &self.ranks[r];
            s += &format!(
                "  rank {r}{}: round {} state {:?} steps left {} finished {} in_use {}\n",
                if self.dead[r] { " (dead)" } else { "" },
                rk.round,
                rk.state,
                rk.queue.len(),
                rk.finished,
                self.eng[r].in_use()
            );
            for o in &rk.ops {
                let info = self.eng[r].info(o.id);
                s += &format!("    {:?} blocking {} {:?}\n", o.what, o.blocking, info);
            }
            let net = lock(&self.net);
            for p in 0..self.setup.n {
                let q = net.queued(r, p);
                if q > 0 {
                    s += &format!("    {q} frames queued to rank {p}\n");
                }
            }
        }
        s += &format!("  broken channels {:?}", self.broke);
        s
    }

    // ---- the oracles at the end ----

    fn drain(&mut self) {
        lock(&self.net).calm = true;
        let mut last = self.activity();
        let mut quiet = 0;
        while quiet < 3 {
            for r in self.live() {
                self.eng[r].progress();
            }
            let a = self.activity();
            quiet = if a == last { quiet + 1 } else { 0 };
            last = a;
        }
    }

    fn check(&mut self) -> Result<u64, String> {
        let mut errs = std::mem::take(&mut self.errors);
        errs.extend(lock(&self.net).violations.iter().cloned());
        let n = self.setup.n;
        let live = self.live();
        for &r in &live {
            let e = &self.eng[r];
            // Only an operation on a failed relation may be left (one
            // withdrawn, orphaned, waiting for a peer that stopped reading).
            for i in 0..e.side.len() {
                let Some(info) = e.proto.handle_at(i).and_then(|h| e.proto.info(h)) else {
                    continue;
                };
                let excused = info.peer != ANY_SOURCE && self.failed(r, info.peer as usize);
                if !excused {
                    errs.push(format!("rank {r}: operation left at the end: {info:?}"));
                }
            }
            if let Err(a) = e.proto.audit() {
                errs.push(format!("rank {r}: core audit: {a}"));
            }
            if !e.pending_pulls.is_empty() {
                errs.push(format!("rank {r}: pulls left at the end"));
            }
            for p in 0..n {
                let c = &e.peers[p];
                let streams = !c.tx_streams.is_empty() || !c.rx_streams.is_empty();
                if streams && !self.failed(r, p) {
                    errs.push(format!("rank {r}: streams with rank {p} left at the end"));
                }
                let (regs, empty) = lock(&self.net).registered(r, p);
                if regs != 0 || empty != 0 {
                    errs.push(format!(
                        "rank {r}: {} buffer registrations ({empty} of empty buffers) with rank \
                         {p} never released",
                        regs + empty
                    ));
                }
                // Everything a peer sent is taken, a dead one's included
                // (what it sent before it went), unless this rank broke the
                // channel and stopped reading.
                let queued = lock(&self.net).queued(p, r);
                if queued != 0 && !self.broke.contains(&(r, p)) {
                    errs.push(format!(
                        "{queued} frames from rank {p} to rank {r} left in flight"
                    ));
                }
            }
        }
        self.attribute(&mut errs);
        self.check_sends(&mut errs);
        self.check_probes(&mut errs);
        self.check_buffers(&mut errs);
        match errs.is_empty() {
            true => Ok((self.msgs.len() + self.recvs.len() + self.probes.len()) as u64),
            false => Err(errs.join("\n")),
        }
    }

    /// Whether `m` is what receive `i` reports (`res`), bytes included.
    fn verify(&self, i: usize, m: usize, res: &Result<Status, Error>) -> Result<(), String> {
        let (rv, msg) = (&self.recvs[i], &self.msgs[m]);
        let got = &rv.mem[GUARD..GUARD + rv.cap];
        let n = msg.len.min(rv.cap);
        match res {
            Ok(st) => {
                let want = Status {
                    source: msg.src,
                    tag: msg.tag,
                    len: msg.len,
                };
                if *st != want || msg.len > rv.cap {
                    return Err(format!(
                        "recv#{i} reports {st:?}; due is msg#{m} {want:?} (cap {})",
                        rv.cap
                    ));
                }
            }
            Err(Error::Truncated { needed, got, .. }) => {
                if *needed != msg.len || *got != rv.cap || msg.len <= rv.cap {
                    return Err(format!(
                        "recv#{i} reports truncation {needed}/{got}; due is msg#{m} of {} \
                         bytes (cap {})",
                        msg.len, rv.cap
                    ));
                }
            }
            Err(e) => return Err(format!("recv#{i}: unexpected {e}")),
        }
        if got[..n] != msg.buf[..n] {
            let at = (0..n).find(|&j| got[j] != msg.buf[j]).unwrap_or(0);
            return Err(format!(
                "recv#{i}: payload of msg#{m} differs at byte {at} of {n}"
            ));
        }
        if (n..rv.cap).any(|j| got[j] != pattern(i, GUARD + j)) {
            return Err(format!("recv#{i}: bytes past the message were written"));
        }
        Ok(())
    }

    /// The messages receive `i` could get from `s`, oldest first: sent to
    /// it, matching it, and neither received nor lost yet.
    fn due(
        &self,
        order: &HashMap<(usize, usize, u16), Vec<usize>>,
        i: usize,
        s: usize,
    ) -> Vec<usize> {
        let rv = &self.recvs[i];
        order
            .get(&(s, rv.rank, rv.ctx))
            .map(|l| {
                l.iter()
                    .copied()
                    .filter(|&m| {
                        let g = &self.msgs[m];
                        g.got_by.is_none() && !g.lost && rv.matches(g)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Replays every rank's receives in posting order against the
    /// messages sent to it (see the module docs).
    fn attribute(&mut self, errs: &mut Vec<String>) {
        let n = self.setup.n;
        // Each pair's messages in the order they were posted.
        let mut order: HashMap<(usize, usize, u16), Vec<usize>> = HashMap::new();
        let mut sent: Vec<usize> = (0..self.msgs.len())
            .filter(|&m| self.msgs[m].sent)
            .collect();
        sent.sort_by_key(|&m| self.msgs[m].posted);
        for m in sent {
            let g = &self.msgs[m];
            order.entry((g.src, g.dst, g.ctx)).or_default().push(m);
        }
        let mut recvs: Vec<usize> = (0..self.recvs.len()).collect();
        recvs.sort_by_key(|&i| (self.recvs[i].rank, self.recvs[i].posted));
        for i in recvs {
            let (r, src, withdrawn, res) = {
                let rv = &self.recvs[i];
                (rv.rank, rv.src, rv.withdrawn, rv.result.clone())
            };
            if self.recvs[i].cancel_said == Some(true) {
                // Cancelled (and perhaps withdrawn before it was taken).
                let ended = withdrawn.is_some() || matches!(res, Some(Err(Error::Cancelled)));
                if !ended && !self.dead[r] {
                    errs.push(format!("rank {r}: recv#{i} cancelled but ended {res:?}"));
                }
                continue;
            }
            if let Some(phase) = withdrawn {
                // Withdrawn after it matched: it consumed the message due.
                let s = src as usize;
                if phase != Phase::Posted && src != ANY_SOURCE && !self.failed(s, r) {
                    match self.due(&order, i, s).first() {
                        Some(&m) => self.msgs[m].got_by = Some(i),
                        None => errs.push(format!(
                            "rank {r}: recv#{i} was withdrawn in {phase:?}, but no message from \
                             {s} was due"
                        )),
                    }
                }
                continue;
            }
            let Some(res) = res else {
                if !self.dead[r] {
                    errs.push(format!("rank {r}: recv#{i} never finished"));
                }
                continue;
            };
            let sources: Vec<usize> = match (&res, src) {
                (Ok(st), _) => vec![st.source],
                (Err(Error::Truncated { .. }), ANY_SOURCE) => (0..n).collect(),
                (Err(Error::Truncated { .. }), s) => vec![s as usize],
                (Err(Error::Cancelled), _) => continue,
                (Err(e), src) => {
                    let ok = (0..n).any(|p| {
                        is_lost_error(e, p)
                            && self.failed(p, r)
                            && (src == ANY_SOURCE || src as usize == p)
                    });
                    if !ok {
                        errs.push(format!("rank {r}: recv#{i} failed: {e}"));
                    }
                    continue;
                }
            };
            let mut found = None;
            let mut why = String::new();
            for s in sources {
                if s >= n || (src != ANY_SOURCE && src as usize != s) {
                    why = format!("recv#{i} reports source {s}");
                    continue;
                }
                let cands = self.due(&order, i, s);
                if cands.is_empty() {
                    why = format!("recv#{i} reports {res:?} but nothing from {s} was due");
                }
                // On a failed relation messages may have gone missing
                // (announcements dropped when the peer was declared lost):
                // the receive may skip them, and they are lost for good.
                let tries = match self.failed(s, r) {
                    false => cands.len().min(1),
                    true => cands.len(),
                };
                for (k, &m) in cands.iter().enumerate().take(tries) {
                    match self.verify(i, m, &res) {
                        Ok(()) => {
                            found = Some((m, cands[..k].to_vec()));
                            break;
                        }
                        Err(e) => why = e,
                    }
                }
                if found.is_some() {
                    break;
                }
            }
            match found {
                Some((m, skipped)) => {
                    self.msgs[m].got_by = Some(i);
                    for s in skipped {
                        self.msgs[s].lost = true;
                    }
                }
                None => errs.push(format!("rank {r}: {why}")),
            }
        }
        for (m, g) in self.msgs.iter().enumerate() {
            if g.sent && g.got_by.is_none() && !g.lost && !self.failed(g.src, g.dst) {
                errs.push(format!(
                    "msg#{m} ({} -> {}, ctx {} tag {} len {}) was never received",
                    g.src, g.dst, g.ctx, g.tag, g.len
                ));
            }
        }
    }

    fn check_sends(&self, errs: &mut Vec<String>) {
        for (m, g) in self.msgs.iter().enumerate() {
            if self.dead[g.src] || g.withdrawn.is_some() {
                continue;
            }
            match &g.result {
                None => errs.push(format!("rank {}: send msg#{m} never finished", g.src)),
                Some(Ok(_)) => {
                    let rendezvous = g.sync || g.len > self.setup.eager;
                    if rendezvous && !self.failed(g.src, g.dst) {
                        match g.got_by {
                            Some(i) if self.recvs[i].posted < g.done_at => {}
                            other => errs.push(format!(
                                "rank {}: send msg#{m} (sync {}, len {}) completed at {} before \
                                 its receive {other:?} was posted",
                                g.src, g.sync, g.len, g.done_at
                            )),
                        }
                    }
                }
                Some(Err(e)) => {
                    if !(self.failed(g.src, g.dst) && is_lost_error(e, g.dst)) {
                        errs.push(format!("rank {}: send msg#{m} failed: {e}", g.src));
                    }
                }
            }
        }
    }

    fn check_probes(&self, errs: &mut Vec<String>) {
        for p in &self.probes {
            let st = p.st;
            let ok = self.msgs.iter().any(|g| {
                g.sent
                    && g.dst == p.rank
                    && g.ctx == p.ctx
                    && g.src == st.source
                    && g.tag == st.tag
                    && g.len == st.len
                    && (p.src == ANY_SOURCE || p.src as usize == g.src)
                    && (p.tag == ANY_TAG || p.tag == g.tag)
                    && g.posted < p.at
                    && g.got_by.is_none_or(|i| self.recvs[i].posted > p.at)
            });
            if !ok {
                errs.push(format!(
                    "rank {}: probe({:#x},{:#x}) reported {st:?}, which no unreceived message is",
                    p.rank, p.src, p.tag
                ));
            }
        }
    }

    fn check_buffers(&self, errs: &mut Vec<String>) {
        for (i, rv) in self.recvs.iter().enumerate() {
            let total = rv.mem.len();
            let guards = (0..GUARD).chain(total - GUARD..total);
            if guards.into_iter().any(|j| rv.mem[j] != pattern(i, j)) {
                errs.push(format!(
                    "rank {}: recv#{i}: guard bytes overwritten",
                    rv.rank
                ));
            }
            if let Some(s) = &rv.snapshot {
                if *s != rv.mem {
                    errs.push(format!(
                        "rank {}: recv#{i}: buffer written after its operation ended ({:?}, \
                         withdrawn {:?})",
                        rv.rank, rv.result, rv.withdrawn
                    ));
                }
            }
            let untouched = rv.cancel_said == Some(true) || rv.withdrawn == Some(Phase::Posted);
            if untouched && (0..total).any(|j| rv.mem[j] != pattern(i, j)) {
                errs.push(format!(
                    "rank {}: recv#{i} never matched but its buffer was written",
                    rv.rank
                ));
            }
        }
        for (m, g) in self.msgs.iter().enumerate() {
            if g.buf != payload(self.seed, m, g.len) {
                errs.push(format!(
                    "rank {}: send buffer of msg#{m} was written",
                    g.src
                ));
            }
        }
    }
}

/// Runs one seed: its statistics, or why it failed; and whether the fault
/// struck.
fn run_seed(seed: u64, fault: Fault, trace: bool) -> (Result<Stats, String>, bool) {
    let fired = std::cell::Cell::new(false);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut w = World::new(seed, fault, trace);
        let r = w.run();
        fired.set(lock(&w.net).fault_fired);
        r?;
        w.drain();
        let ops = w.check()?;
        fired.set(lock(&w.net).fault_fired);
        Ok(Stats {
            steps: w.steps,
            ops,
            cov: w.coverage(),
        })
    }));
    match out {
        Ok(r) => (r, fired.get()),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (Err(format!("panicked: {msg}")), fired.get())
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The seeds to run: `TANDEM_SIM_SEED` alone, or `TANDEM_SIM_SEEDS`
/// (else `default`) from 0.
fn seeds(default: u64) -> Vec<u64> {
    match env_u64("TANDEM_SIM_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("TANDEM_SIM_SEEDS").unwrap_or(default)).collect(),
    }
}

fn run_seeds(seeds: &[u64]) -> Stats {
    let trace = std::env::var("TANDEM_SIM_TRACE").is_ok_and(|v| v == "1");
    let mut all = Stats::default();
    for &seed in seeds {
        match run_seed(seed, Fault::None, trace).0 {
            Ok(st) => {
                all.steps += st.steps;
                all.ops += st.ops;
                all.cov.add(&st.cov);
            }
            Err(e) => panic!(
                "sim: seed {seed} failed: {e}\n  reproduce: TANDEM_SIM_SEED={seed} \
                 TANDEM_SIM_TRACE=1 cargo test -p tandem-driver --lib sim_ -- --nocapture"
            ),
        }
    }
    all
}

#[test]
fn sim_progress_layer() {
    let seeds = seeds(if cfg!(debug_assertions) { 5000 } else { 20000 });
    let st = run_seeds(&seeds);
    println!(
        "sim: {} seeds, {} scheduler steps, {} ops checked",
        seeds.len(),
        st.steps,
        st.ops
    );
    let c = st.cov;
    println!(
        "sim: exercised {} kills, {} broken channels, {} fast sends, {} fast receives, {} \
         rendezvous, {} pulls, {} truncations, {} cancels, {} timeouts, {} peer-lost errors, {} \
         probe hits",
        c.kills,
        c.broken,
        c.fast_sends,
        c.fast_recvs,
        c.rendezvous,
        c.pulls,
        c.truncated,
        c.cancelled,
        c.timeouts,
        c.lost,
        c.probes
    );
}

#[test]
fn sim_catches_broken_transports() {
    let seeds = env_u64("TANDEM_SIM_FAULT_SEEDS").unwrap_or(300);
    let faults = [
        Fault::Drop,
        Fault::Duplicate,
        Fault::Corrupt,
        Fault::SwapChunks,
        Fault::Swap,
    ];
    for fault in faults {
        let (mut fired, mut caught) = (0, 0);
        for seed in 0..seeds {
            let (r, f) = run_seed(seed, fault, false);
            if f {
                fired += 1;
                caught += r.is_err() as u32;
            } else {
                assert!(
                    r.is_ok(),
                    "sim: {fault:?} seed {seed} failed without the fault: {r:?}"
                );
            }
        }
        println!("sim: fault {fault:?} struck in {fired} of {seeds} seeds, caught in {caught}");
        if fault != Fault::Swap {
            assert!(
                fired >= seeds as u32 / 4,
                "{fault:?} struck in only {fired} seeds"
            );
            assert!(
                caught * 10 >= fired * 9,
                "{fault:?}: only {caught} of {fired} runs caught"
            );
        }
    }
}

/// Two engines over a calm, strictly checking net whose links never pull
/// (the sender streams), eager limit 16.
fn strict_pair() -> (Shared, Vec<Engine>) {
    strict_pair_with(Fault::None)
}

/// [`strict_pair`] whose net plays `fault` at its first chance.
fn strict_pair_with(fault: Fault) -> (Shared, Vec<Engine>) {
    let opts = SimOptions {
        cap: 4096,
        delay: 0,
        jam: 0,
        partial: 0,
        pull_done: 1000,
        lost_at_once: false,
        pulls: vec![PullMode::Stream; 4],
        fault,
        fault_after: 0,
    };
    let net = Net::new(2, 1, opts);
    lock(&net).calm = true;
    let protocol = Protocol {
        eager_limit: 16,
        credits: 2,
        envelopes: 4,
    };
    let cfg = Config::default().max_requests(8);
    let eng = (0..2)
        .map(|r| Engine::new(r, Net::links(&net, r), protocol, &cfg, None).expect("engine"))
        .collect();
    (net, eng)
}

/// An eager message whose sender dies in the middle of writing it is never
/// delivered as if whole: the receive it matches fails with the peer lost,
/// whether it was posted before the message came, posted after the message
/// was stored, or polled for on the fast path.
#[test]
fn a_torn_eager_message_fails_its_receive() {
    for when in ["posted", "stored", "polled"] {
        let (net, mut eng) = strict_pair_with(Fault::Tear);
        let data = [9u8; 12];
        let mut buf = [0u8; 16];
        eng[0].post_send(&data, 1, 1, 5, false, 0).unwrap();
        let got = match when {
            "posted" => {
                let r = eng[1].post_recv(&mut buf, 0, 1, 5, 0).unwrap();
                settle(&mut eng);
                eng[1].take(r).expect("finished")
            }
            "stored" => {
                settle(&mut eng);
                assert!(lock(&net).fault_fired, "torn while stored");
                let r = eng[1].post_recv(&mut buf, 0, 1, 5, 0).unwrap();
                settle(&mut eng);
                eng[1].take(r).expect("finished")
            }
            _ => loop {
                eng[0].progress();
                match eng[1].try_recv_now(&mut buf, 0, 1, 5) {
                    Fast::Failed => break Err(eng[1].lost(0)),
                    Fast::Done(st) => break Ok(st),
                    Fast::NotYet => {}
                    Fast::Fallback => panic!("the fast path handles an eager message"),
                }
            },
        };
        assert!(lock(&net).fault_fired, "{when}: the fault struck");
        match got {
            Err(Error::PeerLost { rank: 0 }) => {}
            other => panic!("{when}: a torn message gave {other:?}"),
        }
        // Nothing from the dead sender is received after it either.
        let r = eng[1].post_recv(&mut buf, 0, 1, 6, 0);
        if let Ok(r) = r {
            settle(&mut eng);
            assert!(
                matches!(eng[1].take(r), Some(Err(_))),
                "{when}: a receive from the lost peer fails"
            );
        }
        let v = lock(&net).violations.clone();
        assert!(v.is_empty(), "{when}: {v:#?}");
    }
}

fn settle(eng: &mut [Engine]) {
    for _ in 0..20 {
        for e in eng.iter_mut() {
            e.progress();
        }
    }
}

fn leftover_report(net: &Shared) -> Vec<String> {
    let mut v = lock(net).violations.clone();
    for (r, p) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let (regs, empty) = lock(net).registered(r, p);
        if regs + empty != 0 {
            v.push(format!(
                "rank {r}: {regs} + {empty} (empty) registrations toward {p} left"
            ));
        }
    }
    v
}

/// Regression (found by the simulation, seed 460): rank 1 withdraws a
/// receive that matched a rendezvous while its CTS could not go out yet
/// (rank 0 reads nothing for a while). The CTS used to leave afterwards
/// with the full length and a zero-byte description of the emptied buffer
/// view, never released, and rank 0 streamed 100 bytes toward it (an RDMA
/// link breaks the channel on that: "CTS offers 0 bytes for a 100-byte
/// stream"). Now it asks for nothing and both operations finish.
#[test]
fn regression_cts_after_withdraw() {
    let (net, mut eng) = strict_pair();
    let data = vec![7u8; 100];
    let mut buf = vec![0u8; 100];
    let s = eng[0].post_send(&data, 1, 1, 5, false, 0).unwrap();
    let r = eng[1].post_recv(&mut buf, 0, 1, 5, 0).unwrap();
    lock(&net).hold(1, 0, true);
    settle(&mut eng);
    assert_eq!(
        eng[1].info(r).unwrap().phase,
        Phase::Streaming,
        "CTS queued"
    );
    eng[1].withdraw(r, &Error::Internal("timed out".into()));
    lock(&net).hold(1, 0, false);
    settle(&mut eng);
    assert!(eng[0].take(s).unwrap().is_ok());
    assert_eq!(eng[1].in_use(), 0);
    let v = leftover_report(&net);
    assert!(v.is_empty(), "{v:#?}");
}

/// Regression (found by the simulation, seed 32): an empty receive buffer
/// (a legal receive, truncating) matched with a rendezvous message is
/// was described by its CTS at the address of a static empty slice
/// (`UserBuf::dst` returned `&mut []` for an empty buffer) but released
/// at its own address, so the description never ended. Now both use the
/// buffer's own address.
#[test]
fn regression_empty_buffer_description() {
    let (net, mut eng) = strict_pair();
    let data = vec![7u8; 100];
    let mut buf = [0u8; 8];
    let s = eng[0].post_send(&data, 1, 1, 5, false, 0).unwrap();
    let r = eng[1].post_recv(&mut buf[4..4], 0, 1, 5, 0).unwrap();
    settle(&mut eng);
    assert!(matches!(
        eng[1].take(r),
        Some(Err(Error::Truncated {
            needed: 100,
            got: 0,
            source: 0,
            tag: 5,
        }))
    ));
    assert!(eng[0].take(s).unwrap().is_ok());
    let v = leftover_report(&net);
    assert!(v.is_empty(), "{v:#?}");
}
