//! Exhaustive model checks of the fault-tolerance protocols, with ranks
//! dying at every step:
//!
//! * **agreement** ([`check_agree`]): `n` ranks run
//!   [`tandem_core::agree::Agree`] — the very machine the driver's
//!   `Comm::agree` and `Comm::shrink` run — with estimates as the driver
//!   keeps them (flags ANDed, failed ranks united);
//! * **revocation** ([`check_revoke`]): the driver's rule for revocation
//!   notices (mark the context; on the first notice, forward it to every
//!   peer but its sender).
//!
//! The network is FIFO per ordered pair of ranks. A rank may crash before
//! any of its steps — in the middle of sending to everyone, too — up to
//! `n - 1` of them; what a crashed rank had sent may still arrive, or the
//! tail of it be lost. A rank waiting for a crashed one may give up on it
//! at any moment after the crash, even while its message is still on the
//! way (each survivor's detector reports at a moment of its own; it is
//! accurate: only crashed ranks are reported, as ULFM assumes; a rank
//! acts on a report only when it waits for that rank, so that is the one
//! moment the model needs). The checker
//! explores every interleaving of all of that; states are fingerprinted
//! (64-bit SipHash) and expanded once.
//!
//! Checked in every terminal state (nothing can move any more):
//! * **termination**: every survivor decided (none blocks for ever);
//! * **agreement**: every survivor decided the same flags and the same
//!   failed set;
//! * **validity**: the flags are the AND of a set of contributions that
//!   holds every survivor's; only crashed ranks are in the failed set;
//! * **revocation**: if one survivor saw the context revoked, every
//!   survivor did (and all did if the revoker survived).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use tandem_core::agree::{Action, Agree, Effect, Kind};

/// What an exhaustive run found.
#[derive(Debug, Clone)]
pub struct FtReport {
    /// What was checked.
    pub name: String,
    /// Distinct states expanded.
    pub states: u64,
    /// Terminal states checked.
    pub terminals: u64,
    /// The first violation, with the path of steps that led to it.
    pub violation: Option<String>,
}

impl FtReport {
    /// Whether every property held (and the state bound was not hit).
    pub fn ok(&self) -> bool {
        self.violation.is_none()
    }
}

/// An estimate: flags (a bit per rank's contribution) and failed ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Est {
    flags: u8,
    failed: u8,
}

impl Est {
    fn merge(&mut self, o: &Est) {
        self.flags &= o.flags;
        self.failed |= o.failed;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Rank {
    m: Agree,
    est: Est,
    alive: bool,
    /// In a send to everyone: the next peer to send to.
    cursor: Option<u8>,
    decided: Option<Est>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    ranks: Vec<Rank>,
    /// `chan[a * n + b]`: messages from `a` to `b`, oldest first.
    chan: Vec<Vec<(Kind, Est)>>,
    crashes: u8,
}

/// Rank `i`'s contribution: every flag but its own bit, so the AND of a
/// set of contributions names the ranks in it.
fn input(n: usize, i: usize) -> u8 {
    (((1u16 << n) - 1) as u8) & !(1 << i)
}

fn fingerprint<T: Hash>(s: &T) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Every state reachable in one step from `st`, each with what happened.
fn agree_successors(st: &State) -> Vec<(String, State)> {
    let n = st.ranks.len();
    let mut out = Vec::new();
    for r in 0..n {
        let rk = &st.ranks[r];
        if !rk.alive {
            continue;
        }
        // A crash, before this rank's next step (undecided ranks: once
        // decided, a rank has sent all it ever sends).
        if rk.decided.is_none() && (st.crashes as usize) < n - 1 {
            let mut s = st.clone();
            s.ranks[r].alive = false;
            s.crashes += 1;
            out.push((format!("rank {r} crashes"), s));
        }
        if rk.decided.is_some() {
            continue;
        }
        match rk.m.action() {
            Action::SendToAll(kind) => {
                let mut s = st.clone();
                let me = &mut s.ranks[r];
                let mut next = me.cursor.unwrap_or(0) as usize;
                if next == r {
                    next += 1;
                }
                if next >= n {
                    me.cursor = None;
                    me.m.sent();
                    out.push((format!("rank {r} has sent {kind:?} to all"), s));
                } else {
                    let est = me.est;
                    me.cursor = Some(next as u8 + 1);
                    s.chan[r * n + next].push((kind, est));
                    out.push((format!("rank {r} sends {kind:?} {est:?} to {next}"), s));
                }
            }
            Action::Await { kind, from } => {
                // The first message of that kind from `from` (tags match
                // within the pair's FIFO order).
                if let Some(i) = st.chan[from * n + r].iter().position(|m| m.0 == kind) {
                    let mut s = st.clone();
                    let (_, v) = s.chan[from * n + r].remove(i);
                    apply(&mut s.ranks[r], Some(v));
                    out.push((format!("rank {r} gets {kind:?} {v:?} from {from}"), s));
                }
                // The detector reports `from`'s crash at a moment of this
                // rank's own: as late as this, whether or not `from`'s
                // message is still on the way.
                if !st.ranks[from].alive {
                    let mut s = st.clone();
                    apply(&mut s.ranks[r], None);
                    out.push((format!("rank {r} gives up on {from}"), s));
                }
            }
            Action::Decide => {
                let mut s = st.clone();
                s.ranks[r].decided = Some(rk.est);
                out.push((format!("rank {r} decides {:?}", rk.est), s));
            }
        }
    }
    // What a crashed rank sent may be lost: the tail of a pair's queue.
    for a in 0..n {
        if st.ranks[a].alive {
            continue;
        }
        for b in 0..n {
            if !st.chan[a * n + b].is_empty() {
                let mut s = st.clone();
                s.chan[a * n + b].pop();
                out.push((format!("the last message from {a} to {b} is lost"), s));
            }
        }
    }
    out
}

fn apply(rk: &mut Rank, v: Option<Est>) {
    match (rk.m.heard(v.is_some()), v) {
        (Some(Effect::Merge), Some(v)) => rk.est.merge(&v),
        (Some(Effect::Adopt), Some(v)) => rk.est = v,
        (Some(Effect::MarkFailed(x)), _) => rk.est.failed |= 1 << x,
        _ => {}
    }
}

/// The properties of a terminal state of the agreement.
fn agree_terminal(st: &State) -> Result<(), String> {
    let n = st.ranks.len();
    let crashed: u8 = (0..n)
        .filter(|&r| !st.ranks[r].alive)
        .map(|r| 1u8 << r)
        .sum();
    let all_inputs = (0..n).fold(0xffu8, |a, i| a & input(n, i));
    let mut first: Option<Est> = None;
    for (r, rk) in st.ranks.iter().enumerate().filter(|(_, rk)| rk.alive) {
        let Some(d) = rk.decided else {
            return Err(format!(
                "termination: survivor rank {r} is blocked in {:?}",
                rk.m.action()
            ));
        };
        if let Some(f) = first {
            if f != d {
                return Err(format!("agreement: survivors decided {f:?} and {d:?}"));
            }
        }
        first = Some(d);
        for (s, sk) in st.ranks.iter().enumerate() {
            if sk.alive && d.flags & !input(n, s) != 0 {
                return Err(format!(
                    "validity: survivor rank {s}'s contribution is missing from {d:?}"
                ));
            }
        }
        if all_inputs & !d.flags != 0 {
            return Err(format!("validity: {d:?} has flags nobody gave"));
        }
        if d.failed & !crashed != 0 {
            return Err(format!(
                "validity: a live rank is in the failed set of {d:?}"
            ));
        }
    }
    Ok(())
}

/// Explores every execution from `init`, checking `terminal` in each
/// terminal state; at most `max_states` states.
fn explore<S: Clone + Hash>(
    name: &str,
    init: S,
    succ: impl Fn(&S) -> Vec<(String, S)>,
    terminal: impl Fn(&S) -> Result<(), String>,
    max_states: u64,
) -> FtReport {
    let mut seen = HashSet::new();
    let mut report = FtReport {
        name: name.into(),
        states: 0,
        terminals: 0,
        violation: None,
    };
    // Depth first, keeping the steps that led to each state.
    let mut stack: Vec<(S, Vec<String>)> = vec![(init, Vec::new())];
    while let Some((st, path)) = stack.pop() {
        if !seen.insert(fingerprint(&st)) {
            continue;
        }
        report.states += 1;
        if report.states > max_states {
            report.violation = Some(format!("more than {max_states} states: raise the bound"));
            return report;
        }
        let next = succ(&st);
        if next.is_empty() {
            report.terminals += 1;
            if let Err(e) = terminal(&st) {
                report.violation = Some(format!("{e}\n  after: {}", path.join("; ")));
                return report;
            }
            continue;
        }
        for (what, s) in next {
            let mut p = path.clone();
            p.push(what);
            stack.push((s, p));
        }
    }
    report
}

/// The agreement among `n` ranks (2 to 4), every crash pattern.
pub fn check_agree(n: usize, max_states: u64) -> FtReport {
    assert!((2..=4).contains(&n));
    let init = State {
        ranks: (0..n)
            .map(|i| Rank {
                m: Agree::new(n, i),
                est: Est {
                    flags: input(n, i),
                    failed: 0,
                },
                alive: true,
                cursor: None,
                decided: None,
            })
            .collect(),
        chan: vec![Vec::new(); n * n],
        crashes: 0,
    };
    explore(
        &format!("agreement, {n} ranks"),
        init,
        agree_successors,
        agree_terminal,
        max_states,
    )
}

/// One rank of the revocation model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RevRank {
    alive: bool,
    marked: bool,
    /// Peers still to send the notice to (a bit each).
    to_send: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RevState {
    ranks: Vec<RevRank>,
    /// Notices in flight: `chan[a * n + b]` counts those from `a` to `b`.
    chan: Vec<u8>,
    crashes: u8,
}

/// The driver's rule for a rank that marks the context revoked (`from`:
/// the notice's sender, `None` for the revoker): send the notice to every
/// peer but `from` (`Engine::revoke`, `Engine::poll_notices`).
fn forward(n: usize, me: usize, from: Option<usize>) -> u8 {
    (0..n)
        .filter(|&p| p != me && Some(p) != from)
        .map(|p| 1u8 << p)
        .sum()
}

fn revoke_successors(st: &RevState) -> Vec<(String, RevState)> {
    let n = st.ranks.len();
    let mut out = Vec::new();
    for r in 0..n {
        let rk = &st.ranks[r];
        if !rk.alive {
            continue;
        }
        if (st.crashes as usize) < n - 1 {
            let mut s = st.clone();
            s.ranks[r].alive = false;
            s.crashes += 1;
            out.push((format!("rank {r} crashes"), s));
        }
        if let Some(p) = (0..n).find(|&p| rk.to_send & (1 << p) != 0) {
            let mut s = st.clone();
            s.ranks[r].to_send &= !(1 << p);
            s.chan[r * n + p] += 1;
            out.push((format!("rank {r} sends the notice to {p}"), s));
        }
        for a in 0..n {
            if st.chan[a * n + r] > 0 {
                let mut s = st.clone();
                s.chan[a * n + r] -= 1;
                if !s.ranks[r].marked {
                    s.ranks[r].marked = true;
                    s.ranks[r].to_send = forward(n, r, Some(a));
                }
                out.push((format!("rank {r} takes a notice from {a}"), s));
            }
        }
    }
    for a in 0..n {
        for b in 0..n {
            if !st.ranks[a].alive && st.chan[a * n + b] > 0 {
                let mut s = st.clone();
                s.chan[a * n + b] -= 1;
                out.push((format!("a notice from {a} to {b} is lost"), s));
            }
        }
    }
    out
}

/// Revocation among `n` ranks (2 to 4), rank 0 revoking, every crash
/// pattern.
pub fn check_revoke(n: usize, max_states: u64) -> FtReport {
    assert!((2..=4).contains(&n));
    let mut ranks = vec![
        RevRank {
            alive: true,
            marked: false,
            to_send: 0,
        };
        n
    ];
    ranks[0].marked = true;
    ranks[0].to_send = forward(n, 0, None);
    let init = RevState {
        ranks,
        chan: vec![0; n * n],
        crashes: 0,
    };
    explore(
        &format!("revocation, {n} ranks"),
        init,
        revoke_successors,
        |st: &RevState| {
            let live: Vec<&RevRank> = st.ranks.iter().filter(|r| r.alive).collect();
            let marked = live.iter().filter(|r| r.marked).count();
            if marked != 0 && marked != live.len() {
                return Err(format!(
                    "revocation: {marked} of {} survivors saw it",
                    live.len()
                ));
            }
            if st.ranks[0].alive && marked == 0 {
                return Err("revocation: the revoker survived and nobody saw it".into());
            }
            Ok(())
        },
        max_states,
    )
}

/// Every fault-tolerance model this crate checks: agreement on 2 and 3
/// ranks (4 ranks, every crash pattern included, passes 30 million states
/// without end: out of reach of an exhaustive search), revocation on 2, 3
/// and 4.
pub fn all(max_states: u64) -> Vec<FtReport> {
    let mut out: Vec<FtReport> = (2..=3).map(|n| check_agree(n, max_states)).collect();
    out.extend((2..=4).map(|n| check_revoke(n, max_states)));
    out
}

/// The agreement mutants (compiled in with the `mutants` feature).
pub const AGREE_MUTANTS: [tandem_core::mutation::Mutant; 2] = [
    tandem_core::mutation::Mutant::AgreeSkipsRounds,
    tandem_core::mutation::Mutant::AgreeMarksFailedInRounds,
];

/// The report of the first agreement model that catches mutant `m`, if
/// any (the mutant is switched off again after).
#[cfg(feature = "mutants")]
pub fn catch(m: tandem_core::mutation::Mutant, max_states: u64) -> Option<FtReport> {
    tandem_core::mutation::set(Some(m));
    let r = (2..=3)
        .map(|n| check_agree(n, max_states))
        .find(|r| !r.ok());
    tandem_core::mutation::set(None);
    r
}
