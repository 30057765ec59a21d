//! Wait records, for hang reports: what this rank is blocked in, published
//! so that its peers can follow who waits for whom.
//!
//! Ranks on one host read each other's record from the job file's wait
//! board (two words per rank, written in place). Peers on other hosts
//! cannot: a rank blocked for [`ANNOUNCE_AFTER`] tells each of them with a
//! small message on [`FT_CTX`] ([`WAIT_TAG`]), and tells them again when
//! the wait ends; every rank keeps the last record each remote peer sent.
//! Each record carries a sequence number that changes with every wait, so
//! a reader that sees the same cycle with the same numbers twice, some
//! time apart, knows that no rank of it moved in between (see
//! `Comm`'s early deadlock check).
//!
//! The records are a diagnosis, not a protocol: a lost or late one makes
//! a report less complete (a plain timeout instead of a named cycle),
//! never an operation fail.

use super::ft::FT_CTX;
use super::{Engine, LinkKind, ANY_SOURCE};
use crate::error::OpKind;
use crate::job::WAIT_VALID;
use crate::transport::Transport;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The tag of a wait record on [`FT_CTX`]; its body is [`RECORD_LEN`]
/// bytes: sequence (u32), kind (u8, 0: the wait ended), flags (u8: 1, the
/// rank knew of a failed peer; 2, it had other operations pending),
/// context (u16), peer (u32, [`ANY_SOURCE`] for any), tag (u32), all
/// little-endian.
pub(crate) const WAIT_TAG: u32 = 2;

const RECORD_LEN: usize = 16;

/// The wait board's bit for [`WaitRec::failures`] (word 0; the kind
/// takes bits 48 to 55).
const FAILURES_BIT: u32 = 56;

/// The wait board's bit for [`WaitRec::several`].
const SEVERAL_BIT: u32 = 57;

/// How long a wait lasts before peers on other hosts are told of it: short
/// waits, the common case, cost no message.
pub(crate) const ANNOUNCE_AFTER: Duration = Duration::from_millis(100);

/// One rank's blocked operation as its peers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitRec {
    /// What it waits in.
    pub op: OpKind,
    /// The rank it waits on (`usize::MAX`: any).
    pub peer: usize,
    /// The operation's tag.
    pub tag: u32,
    /// Changes with every wait the rank publishes.
    pub seq: u32,
    /// The rank knew of a failed peer when it published this wait: its
    /// waits may end in an error rather than block (a link that broke on
    /// one side only, say), so a cycle through it is left to the timeout.
    pub failures: bool,
    /// The rank had other operations pending besides this one (a group,
    /// a wait on several requests): this record is not all it waits for,
    /// so a cycle through it is left to the timeout too.
    pub several: bool,
}

/// This rank's own record and what remote peers said.
pub(crate) struct Waits {
    /// The wait this rank is in, with its context, and since when.
    mine: Option<(WaitRec, u16, Instant)>,
    /// Whether peers on other hosts were told of `mine`.
    announced: bool,
    /// The last sequence number used.
    seq: u32,
    /// The last record each peer on another host sent (`None`: not
    /// waiting, as far as this rank knows).
    remote: Vec<Option<WaitRec>>,
}

impl Waits {
    pub(crate) fn new(nranks: usize) -> Self {
        Self {
            mine: None,
            announced: false,
            seq: 0,
            remote: vec![None; nranks],
        }
    }
}

fn kind_code(op: OpKind) -> u8 {
    match op {
        OpKind::Send => 1,
        OpKind::Ssend => 2,
        OpKind::Recv => 3,
        OpKind::Probe => 4,
    }
}

fn kind_of(code: u64) -> Option<OpKind> {
    Some(match code {
        1 => OpKind::Send,
        2 => OpKind::Ssend,
        3 => OpKind::Recv,
        4 => OpKind::Probe,
        _ => return None,
    })
}

fn peer_of(p: u32) -> usize {
    if p == ANY_SOURCE {
        usize::MAX
    } else {
        p as usize
    }
}

impl Engine {
    /// Publishes (or clears, with `None`) what this rank is blocked in:
    /// on the host's wait board at once, and to peers on other hosts once
    /// the wait has lasted [`ANNOUNCE_AFTER`] ([`announce_wait`](Self::announce_wait)).
    pub(crate) fn publish_wait(&mut self, what: Option<(OpKind, u16, usize, u32)>) {
        let rec = what.map(|(op, ctx, peer, tag)| {
            self.waits.seq = self.waits.seq.wrapping_add(1);
            let rec = WaitRec {
                op,
                peer,
                tag,
                seq: self.waits.seq,
                failures: self.knows_failure(),
                several: self.proto.in_use() > 1,
            };
            (rec, ctx, Instant::now())
        });
        if let Some(board) = &self.board {
            let slot = board.map.wait_slot(board.local_of[self.rank]);
            match rec {
                None => slot[0].store(0, Ordering::Release),
                Some((r, ctx, _)) => {
                    slot[1].store((r.seq as u64) << 32 | r.tag as u64, Ordering::Relaxed);
                    slot[0].store(
                        WAIT_VALID
                            | (r.failures as u64) << FAILURES_BIT
                            | (r.several as u64) << SEVERAL_BIT
                            | (kind_code(r.op) as u64) << 48
                            | (ctx as u64) << 32
                            | (r.peer as u32) as u64,
                        Ordering::Release,
                    );
                }
            }
        }
        if self.waits.announced {
            // The wait they were told of ended.
            self.waits.announced = false;
            self.tell_remote(&[0; RECORD_LEN]);
        }
        self.waits.mine = rec;
    }

    /// Whether this rank knows of a failed peer (a broken link).
    pub(crate) fn knows_failure(&self) -> bool {
        self.peers.iter().any(|p| p.broken.is_some())
    }

    /// This rank's published wait and its context, if it is in one.
    pub(crate) fn my_wait(&self) -> Option<(WaitRec, u16)> {
        self.waits.mine.map(|(r, ctx, _)| (r, ctx))
    }

    /// Tells peers on other hosts of this rank's wait, once it has lasted
    /// [`ANNOUNCE_AFTER`].
    pub(crate) fn announce_wait(&mut self) {
        let Some((r, ctx, since)) = self.waits.mine else {
            return;
        };
        if self.waits.announced || since.elapsed() < ANNOUNCE_AFTER {
            return;
        }
        self.waits.announced = true;
        let mut body = [0u8; RECORD_LEN];
        body[0..4].copy_from_slice(&r.seq.to_le_bytes());
        body[4] = kind_code(r.op);
        body[5] = r.failures as u8 | (r.several as u8) << 1;
        body[6..8].copy_from_slice(&ctx.to_le_bytes());
        body[8..12].copy_from_slice(&(r.peer as u32).to_le_bytes());
        body[12..16].copy_from_slice(&r.tag.to_le_bytes());
        self.tell_remote(&body);
    }

    /// Sends a wait record to every live peer that cannot read this
    /// rank's wait board (those not reached through shared memory).
    fn tell_remote(&mut self, body: &[u8; RECORD_LEN]) {
        for p in 0..self.peers.len() {
            if p != self.rank
                && self.peers[p].broken.is_none()
                && self.peers[p].link.kind() != LinkKind::Shm
            {
                self.send_detached(p, FT_CTX, WAIT_TAG, body);
            }
        }
    }

    /// Takes the wait records that arrived from peers on other hosts.
    pub(super) fn poll_waits(&mut self) {
        let mut body = [0u8; RECORD_LEN];
        while let Some(st) = self.probe(ANY_SOURCE, FT_CTX, WAIT_TAG) {
            let src = st.source;
            let Ok(id) = self.post_recv(&mut body, st.source as u32, FT_CTX, WAIT_TAG, 0) else {
                return;
            };
            // A record is stored whole: the receive matches it at once.
            match self.take(id) {
                Some(Ok(s)) if s.len == RECORD_LEN => {}
                Some(_) => continue,
                None => {
                    self.withdraw(
                        id,
                        &crate::error::Error::Internal("wait record not stored".into()),
                    );
                    return;
                }
            }
            let word =
                |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
            let rec = kind_of(body[4] as u64).map(|op| WaitRec {
                op,
                peer: peer_of(word(8)),
                tag: word(12),
                seq: word(0),
                failures: body[5] & 1 != 0,
                several: body[5] & 2 != 0,
            });
            if let Some(slot) = self.waits.remote.get_mut(src) {
                *slot = rec;
            }
        }
    }

    /// What rank `p` says it is blocked in, if anything: from the wait
    /// board for a rank on this host, from its last record for one on
    /// another host.
    pub(crate) fn peer_wait(&self, p: usize) -> Option<WaitRec> {
        let peer = self.peers.get(p)?;
        if peer.broken.is_some() {
            return None;
        }
        if peer.link.kind() != LinkKind::Shm {
            return self.waits.remote.get(p).copied().flatten();
        }
        let board = self.board.as_ref()?;
        let local = *board.local_of.get(p)?;
        if local == usize::MAX {
            return None;
        }
        let slot = board.map.wait_slot(local);
        let w = slot[0].load(Ordering::Acquire);
        let t = slot[1].load(Ordering::Acquire);
        if w & WAIT_VALID == 0 || slot[0].load(Ordering::Acquire) != w {
            return None;
        }
        Some(WaitRec {
            op: kind_of((w >> 48) & 0xff)?,
            peer: peer_of((w & 0xffff_ffff) as u32),
            tag: t as u32,
            seq: (t >> 32) as u32,
            failures: (w >> FAILURES_BIT) & 1 != 0,
            several: (w >> SEVERAL_BIT) & 1 != 0,
        })
    }
}
