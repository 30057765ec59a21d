//! The order of a fault-tolerant agreement (ULFM's `MPIX_Comm_agree`), as
//! a state machine: what a rank sends and whom it waits for, step by step.
//! The driver runs it (`Comm::agree`, `Comm::shrink`) with its estimates
//! and messages; `tandem-verify` model-checks it with ranks dying at every
//! step.
//!
//! Each rank holds an *estimate* (in the driver: flags ANDed, failed ranks
//! united, free contexts ANDed). Two phases:
//!
//! 1. **Gather**: send the estimate to every other rank; then, for each
//!    other rank in order, wait for its estimate ([`Effect::Merge`] it) or
//!    for its failure ([`Effect::MarkFailed`]).
//! 2. **Rotating coordinators**, rounds `0..n`: in round `j`, rank `j`
//!    sends its estimate to every other rank; every other rank waits for
//!    it ([`Effect::Adopt`] it) or for rank `j`'s failure
//!    ([`Effect::Keep`]: its own estimate, unchanged — recording rank `j`
//!    failed here would let the survivors of a last coordinator that died
//!    part-way through its sends decide different failed sets, which the
//!    model check finds).
//!
//! Then every rank decides its estimate. The first round whose coordinator
//! lives through its sends makes every live rank's estimate equal (each
//! was waiting for it and adopts it), and later coordinators only send
//! that same estimate around, so all survivors decide alike. A coordinator
//! sends before it waits for anyone, so nobody waits on a rank that has
//! already decided and left. The failure detector is assumed accurate (a
//! rank reported failed has crashed, or is cut off from everyone).
//!
//! The machine holds no estimate and sends nothing: [`Agree::action`] says
//! what to do, [`Agree::sent`] and [`Agree::heard`] report that it was
//! done.

use crate::mutation::{active, Mutant};

/// The two kinds of agreement message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A rank's contribution, in the gather phase.
    Gather,
    /// A coordinator's estimate, in its round.
    Round,
}

/// What a rank does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Send the estimate, as a message of this kind, to every other rank;
    /// then call [`Agree::sent`].
    SendToAll(Kind),
    /// Wait for rank `from`'s message of this kind, or for its failure;
    /// then call [`Agree::heard`].
    Await {
        /// The message's kind.
        kind: Kind,
        /// The rank waited for.
        from: usize,
    },
    /// The agreement is over: the estimate is the decision.
    Decide,
}

/// What a message heard (or a failure seen) does to the estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Combine the message's estimate into this rank's (gather).
    Merge,
    /// Replace this rank's estimate with the message's (a coordinator's).
    Adopt,
    /// The rank waited for failed with nothing from it: record it failed
    /// (gather).
    MarkFailed(usize),
    /// The coordinator waited for failed with nothing from it: keep the
    /// estimate as it is (rounds).
    Keep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Stage {
    /// Gather: `sent` once the contribution went out; waiting for ranks
    /// from `next` on.
    Gather {
        sent: bool,
        next: usize,
    },
    /// Round `j` of the rotating coordinators.
    Round {
        j: usize,
    },
    Done,
}

/// One rank's place in an agreement among `n` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Agree {
    n: usize,
    me: usize,
    stage: Stage,
}

impl Agree {
    /// Rank `me` of `n` starting an agreement.
    pub fn new(n: usize, me: usize) -> Self {
        debug_assert!(me < n);
        Self {
            n,
            me,
            stage: Stage::Gather {
                sent: false,
                next: 0,
            },
        }
    }

    /// The first rank from `r` on to wait for in the gather (not this one).
    fn skip_me(&self, r: usize) -> usize {
        if r == self.me {
            r + 1
        } else {
            r
        }
    }

    /// The stage after the gather.
    fn rounds(&self) -> Stage {
        if active(Mutant::AgreeSkipsRounds) {
            return Stage::Done;
        }
        Stage::Round { j: 0 }
    }

    /// What to do now.
    pub fn action(&self) -> Action {
        match self.stage {
            Stage::Gather { sent: false, .. } => Action::SendToAll(Kind::Gather),
            Stage::Gather { sent: true, next } => Action::Await {
                kind: Kind::Gather,
                from: next,
            },
            Stage::Round { j } if j == self.me => Action::SendToAll(Kind::Round),
            Stage::Round { j } => Action::Await {
                kind: Kind::Round,
                from: j,
            },
            Stage::Done => Action::Decide,
        }
    }

    /// The sends of the current [`Action::SendToAll`] are done.
    pub fn sent(&mut self) {
        self.stage = match self.stage {
            Stage::Gather { sent: false, .. } => {
                let next = self.skip_me(0);
                if next >= self.n {
                    self.rounds()
                } else {
                    Stage::Gather { sent: true, next }
                }
            }
            Stage::Round { j } if j == self.me => self.after_round(j),
            s => s,
        };
    }

    /// The current [`Action::Await`] ended: with the awaited message
    /// (`got`) or with its sender's failure. Returns what to do to the
    /// estimate (`None`, changing nothing, if the machine was not waiting).
    pub fn heard(&mut self, got: bool) -> Option<Effect> {
        let (effect, stage) = match self.stage {
            Stage::Gather { sent: true, next } => {
                let e = if got {
                    Effect::Merge
                } else {
                    Effect::MarkFailed(next)
                };
                let after = self.skip_me(next + 1);
                let s = if after >= self.n {
                    self.rounds()
                } else {
                    Stage::Gather {
                        sent: true,
                        next: after,
                    }
                };
                (e, s)
            }
            Stage::Round { j } if j != self.me => {
                let e = if got {
                    Effect::Adopt
                } else if active(Mutant::AgreeMarksFailedInRounds) {
                    Effect::MarkFailed(j)
                } else {
                    Effect::Keep
                };
                (e, self.after_round(j))
            }
            // Not waiting: nothing to do (a caller's mistake).
            _ => return None,
        };
        self.stage = stage;
        Some(effect)
    }

    fn after_round(&self, j: usize) -> Stage {
        if j + 1 >= self.n {
            Stage::Done
        } else {
            Stage::Round { j: j + 1 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole sequence of one rank when nobody fails.
    fn script(n: usize, me: usize) -> [Option<Action>; 16] {
        let mut a = Agree::new(n, me);
        let mut out = [None; 16];
        for slot in out.iter_mut() {
            let act = a.action();
            *slot = Some(act);
            match act {
                Action::SendToAll(_) => a.sent(),
                Action::Await { .. } => {
                    a.heard(true);
                }
                Action::Decide => break,
            }
        }
        out
    }

    #[test]
    fn gather_then_one_round_per_rank_then_decide() {
        use Action::*;
        use Kind::*;
        let s = script(3, 1);
        let want = [
            SendToAll(Gather),
            Await {
                kind: Gather,
                from: 0,
            },
            Await {
                kind: Gather,
                from: 2,
            },
            Await {
                kind: Round,
                from: 0,
            },
            SendToAll(Round),
            Await {
                kind: Round,
                from: 2,
            },
            Decide,
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(s[i], Some(*w), "step {i}");
        }
        assert_eq!(s[want.len()], None);
    }

    #[test]
    fn one_rank_alone_sends_to_nobody_and_decides() {
        let mut a = Agree::new(1, 0);
        assert_eq!(a.action(), Action::SendToAll(Kind::Gather));
        a.sent();
        assert_eq!(a.action(), Action::SendToAll(Kind::Round));
        a.sent();
        assert_eq!(a.action(), Action::Decide);
    }

    #[test]
    fn a_failure_marks_the_rank_in_the_gather_and_keeps_the_estimate_in_rounds() {
        let mut a = Agree::new(3, 0);
        a.sent();
        assert_eq!(a.heard(false), Some(Effect::MarkFailed(1)));
        assert_eq!(a.heard(true), Some(Effect::Merge));
        a.sent();
        assert_eq!(a.heard(false), Some(Effect::Keep));
        assert_eq!(a.heard(true), Some(Effect::Adopt));
        assert_eq!(a.action(), Action::Decide);
        assert_eq!(a.heard(true), None, "not waiting");
    }
}
