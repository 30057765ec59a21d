//! Stream-ordered operations, NCCL's model: a call on a stream returns at
//! once and takes effect in stream order. For each operation tandem puts
//! two memory operations on the stream: a write of its number to a *ready*
//! flag (the stream has reached it: the data before it is produced) and a
//! wait until a *release* flag reaches its number (`cuStreamWriteValue32`,
//! `cuStreamWaitValue32` with `GEQ`, both in host-mapped memory). Its
//! progress watches the ready flag, moves the data of each operation that
//! became ready (all of its parts posted at once), and writes the release
//! flag once an operation and every one before it are done: the stream
//! goes on. A failed operation is released too (the stream must not hang)
//! and its error is kept for the caller.
//!
//! A group of operations (both ranks send first, then receive) is one
//! operation of several parts, posted together, so it cannot deadlock, as
//! in NCCL. This module is the bookkeeping, without CUDA: what to post,
//! when to release.

use std::collections::VecDeque;

/// Whether stream value `a` has reached `b`, as `cuStreamWaitValue32`'s
/// `GEQ` compares (wrapping: `(a - b) as i32 >= 0`).
pub fn reached(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// Where an operation is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The stream has not reached it.
    Waiting,
    /// Its parts are posted; `moved` of them are done.
    Moving {
        /// Parts done.
        moved: usize,
    },
    /// Done (or failed: the error is kept).
    Done(Option<String>),
}

#[derive(Debug)]
struct Op {
    seq: u32,
    parts: usize,
    phase: Phase,
}

/// The operations of one stream, in stream order.
#[derive(Debug, Default)]
pub struct StreamOps {
    next: u32,
    released: u32,
    ops: VecDeque<Op>,
    errors: Vec<(u32, String)>,
}

impl StreamOps {
    /// An operation of `parts` parts (a send, a receive, or a group's
    /// sends and receives) joins the stream: its number, which the stream
    /// writes to the ready flag and waits for on the release flag.
    pub fn enqueue(&mut self, parts: usize) -> u32 {
        self.next = self.next.wrapping_add(1);
        self.ops.push_back(Op {
            seq: self.next,
            parts,
            phase: Phase::Waiting,
        });
        self.next
    }

    /// The ready flag reads `ready`: the operations the stream has reached
    /// since, whose parts are to be posted now, all of them, before any is
    /// waited for.
    pub fn observe_ready(&mut self, ready: u32) -> Vec<(u32, usize)> {
        let mut start = Vec::new();
        for op in self.ops.iter_mut() {
            if op.phase == Phase::Waiting && reached(ready, op.seq) {
                op.phase = if op.parts == 0 {
                    Phase::Done(None)
                } else {
                    Phase::Moving { moved: 0 }
                };
                start.push((op.seq, op.parts));
            }
        }
        start
    }

    /// A part of operation `seq` is done (`Err`: it failed).
    pub fn part_done(&mut self, seq: u32, outcome: Result<(), String>) {
        let Some(op) = self.ops.iter_mut().find(|o| o.seq == seq) else {
            return;
        };
        match (&mut op.phase, outcome) {
            (Phase::Moving { moved }, Ok(())) => {
                *moved += 1;
                if *moved == op.parts {
                    op.phase = Phase::Done(None);
                }
            }
            (Phase::Moving { .. }, Err(e)) => {
                self.errors.push((seq, e.clone()));
                op.phase = Phase::Done(Some(e));
            }
            // A part of an operation that is not moving: ignored.
            _ => {}
        }
    }

    /// The value to write to the release flag now, if it moves: the last
    /// operation done with every one before it done too. The flag only
    /// grows, in stream order.
    pub fn release(&mut self) -> Option<u32> {
        let mut to = None;
        while let Some(op) = self.ops.front() {
            if !matches!(op.phase, Phase::Done(_)) {
                break;
            }
            to = Some(op.seq);
            self.ops.pop_front();
        }
        if let Some(v) = to {
            self.released = v;
        }
        to
    }

    /// The errors of failed operations since the last call (each once).
    pub fn take_errors(&mut self) -> Vec<(u32, String)> {
        std::mem::take(&mut self.errors)
    }

    /// The phase of operation `seq`, while it is tracked.
    pub fn phase(&self, seq: u32) -> Option<&Phase> {
        self.ops.iter().find(|o| o.seq == seq).map(|o| &o.phase)
    }

    /// Operations not yet released.
    pub fn pending(&self) -> usize {
        self.ops.len()
    }

    /// The release flag's value as last written.
    pub fn released(&self) -> u32 {
        self.released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_compare_as_cuda_does_across_the_wrap() {
        assert!(reached(5, 5) && reached(6, 5) && !reached(4, 5));
        assert!(reached(2, u32::MAX - 1), "3 past the wrap");
        assert!(!reached(u32::MAX - 1, 2));
    }

    #[test]
    fn nothing_moves_before_the_stream_reaches_it_and_release_is_in_order() {
        let mut s = StreamOps::default();
        let a = s.enqueue(1);
        let b = s.enqueue(1);
        assert!(s.observe_ready(a.wrapping_sub(1)).is_empty());
        assert_eq!(s.release(), None);
        assert_eq!(s.observe_ready(b), vec![(a, 1), (b, 1)]);
        assert!(s.observe_ready(b).is_empty(), "posted once");
        // The second finishes first: nothing is released until the first.
        s.part_done(b, Ok(()));
        assert_eq!(s.release(), None);
        s.part_done(a, Ok(()));
        assert_eq!(s.release(), Some(b));
        assert_eq!((s.released(), s.pending()), (b, 0));
    }

    #[test]
    fn a_failed_operation_is_released_and_its_error_kept() {
        let mut s = StreamOps::default();
        let a = s.enqueue(2);
        s.observe_ready(a);
        s.part_done(a, Err("rank 1 lost".into()));
        s.part_done(a, Ok(()));
        assert_eq!(s.release(), Some(a), "the stream must not hang");
        assert_eq!(s.take_errors(), vec![(a, "rank 1 lost".to_string())]);
        assert!(s.take_errors().is_empty());
    }

    /// Two ranks, each with one group on its stream: send to the other,
    /// then receive from it. Sends complete only when the peer's receive
    /// is posted (rendezvous), the worst case. Posting every part of a
    /// ready operation before waiting on any lets both finish.
    #[test]
    fn a_group_where_both_ranks_send_first_cannot_deadlock() {
        let mut st = [StreamOps::default(), StreamOps::default()];
        let seq = [st[0].enqueue(2), st[1].enqueue(2)];
        // recv_posted[r]: rank r's receive is posted; send_posted likewise.
        let mut recv_posted = [false; 2];
        let mut send_posted = [false; 2];
        let mut done = [[false; 2]; 2];
        for round in 0..10 {
            for r in 0..2 {
                for (s, parts) in st[r].observe_ready(seq[r]) {
                    assert_eq!((s, parts), (seq[r], 2));
                    send_posted[r] = true;
                    recv_posted[r] = true;
                }
                let o = 1 - r;
                // The send completes once the peer's receive is posted; the
                // receive once the peer's send is.
                if send_posted[r] && recv_posted[o] && !done[r][0] {
                    done[r][0] = true;
                    st[r].part_done(seq[r], Ok(()));
                }
                if recv_posted[r] && send_posted[o] && !done[r][1] {
                    done[r][1] = true;
                    st[r].part_done(seq[r], Ok(()));
                }
            }
            if st
                .iter_mut()
                .all(|s| s.release().is_some() || s.pending() == 0)
            {
                assert!(round < 3);
                return;
            }
        }
        panic!("deadlock: {st:?}");
    }

    #[test]
    fn numbers_wrap_without_stopping_the_stream() {
        let mut s = StreamOps {
            next: u32::MAX - 1,
            ..Default::default()
        };
        let a = s.enqueue(1);
        let b = s.enqueue(1);
        assert_eq!((a, b), (u32::MAX, 0));
        assert_eq!(s.observe_ready(b).len(), 2);
        s.part_done(a, Ok(()));
        s.part_done(b, Ok(()));
        assert_eq!(s.release(), Some(0));
        assert!(reached(s.released(), a));
    }
}
