//! Intercommunicators: two disjoint groups, each rank's point-to-point
//! ranks naming the other group (`MPI_Intercomm_create`), merged into one
//! intracommunicator by `MPI_Intercomm_merge`.
//!
//! An intercommunicator is a [`CommObj`] whose `group` is the local group
//! and whose `remote` is the other: `MPI_Comm_size`, `MPI_Comm_rank` and
//! `MPI_Comm_group` answer for the local group, as MPI says, and the
//! point-to-point layer maps ranks through the remote group
//! ([`CommObj::peer_job`]). Its two contexts are free on every rank of both
//! groups: each group agrees on its free contexts over its own members,
//! the two leaders swap their masks (and groups), and each leader hands
//! the combined answer to its group. On the collective context the local
//! members run the MPI layer's intracommunicator algorithms among
//! themselves (the two groups are disjoint, so their traffic never meets);
//! only the leaders talk across, with tags of their own ([`T_INTER`]).
//!
//! `MPI_Bcast`, `MPI_Reduce`, `MPI_Allreduce` and `MPI_Reduce_scatter`
//! take an intercommunicator too (`coll.rs`, `inter_*`), and so do the
//! collectives that move blocks between the groups (gather, scatter,
//! allgather, alltoall and their `v`/`w` forms, below, over
//! `topo::blocks_w`); their non-blocking forms complete within the call.
//! The scans (not defined on one), topologies and the constructors other
//! than `MPI_Comm_dup`, `MPI_Comm_split`, `MPI_Comm_split_type`,
//! `MPI_Comm_create` and `MPI_Intercomm_merge` refuse one with
//! `MPI_ERR_COMM` ([`Lib::comm`]).

use crate::abi::{self, Handle};
use crate::coll::{
    allreduce_band, g_barrier, g_bcast, inter_root, is_in_place, T_INTER, T_INTER_BARRIER,
    T_INTER_BLOCKS,
};
use crate::comm::{make, take_two};
use crate::state::{CommObj, Fail, Lib, Mask, Remote};
use crate::topo::{blocks_w, even, varying, Blocks};
use crate::{array, export, fail, run, set};
use std::ffi::{c_int, c_void};
use std::rc::Rc;

/// What each group tells the other when they meet.
struct Side {
    /// Contexts free on every member of the group.
    mask: Mask,
    /// `MPI_Intercomm_merge`'s `high` (0 elsewhere).
    high: u64,
    /// The members' job ranks in their rank order (for `MPI_Comm_split`,
    /// a job rank, color and key per member).
    data: Vec<u32>,
}

/// A leader's send-and-receive with the other group's leader.
type Talk<'a> = &'a dyn Fn(&[u8], &mut [u8]) -> Result<(), Fail>;

/// Words of a mask.
const W: usize = tandem_driver::CONTEXT_WORDS;
/// A header's length: the mask, `high`, the group's size.
const HEADER: usize = 8 * (W + 2);

fn header(s: &Side) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    let words = s.mask.iter().copied().chain([s.high, s.data.len() as u64]);
    for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    b
}

fn word(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

fn group_bytes(g: &[u32]) -> Vec<u8> {
    g.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Sentinel group size: the leader found the two groups unfit (shared
/// ranks), and every member fails alike.
const REFUSED: u64 = u64::MAX;

/// The meeting of two groups: a collective over `local` (the local
/// group, whose member `leader` talks to the other group's leader through
/// `talk`, a send-and-receive of equal roles). Each side says `data` (its
/// group, unless `split` gives another: each member's job rank, color and
/// key for `MPI_Comm_split`, a subgroup for `MPI_Comm_create`);
/// groups that share a rank are refused on every rank. Returns the
/// contexts free on both groups and what the other group said.
fn meet(
    l: &Lib,
    local: &CommObj,
    leader: usize,
    high: bool,
    split: Option<&[u32]>,
    talk: Talk,
) -> Result<(Mask, Side), Fail> {
    let mut mask = l.free_ctx.get();
    allreduce_band(local, &mut mask)?;
    let mine = Side {
        mask,
        high: high as u64,
        data: split.map_or_else(|| local.group.to_vec(), <[u32]>::to_vec),
    };
    // The leader's answer for its group: the combined mask, the other
    // side's `high` and size, then its group.
    let mut head = [0u8; HEADER];
    let mut theirs = Vec::new();
    if local.rank == leader {
        let mut other = [0u8; HEADER];
        talk(&header(&mine), &mut other)?;
        let n = word(&other, W + 1) as usize;
        let mut rg = vec![0u8; 4 * n];
        talk(&group_bytes(&mine.data), &mut rg)?;
        theirs = rg
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect::<Vec<u32>>();
        let mut combined = mine.mask;
        for (i, m) in combined.iter_mut().enumerate() {
            *m &= word(&other, i);
        }
        let overlap = split.is_none() && theirs.iter().any(|g| mine.data.contains(g));
        let out = Side {
            mask: combined,
            high: word(&other, W),
            data: if overlap { Vec::new() } else { theirs.clone() },
        };
        head = header(&out);
        if overlap {
            head[8 * (W + 1)..].copy_from_slice(&REFUSED.to_le_bytes());
        }
    }
    g_bcast(local, &mut head, leader)?;
    let n = word(&head, W + 1);
    if n == REFUSED {
        return fail(
            abi::ERR_COMM,
            "the two groups of an intercommunicator share ranks (they must be disjoint)",
        );
    }
    let mut gb = if local.rank == leader {
        group_bytes(&theirs)
    } else {
        vec![0u8; 4 * n as usize]
    };
    g_bcast(local, &mut gb, leader)?;
    let data = gb
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    let mut combined: Mask = [0u64; W];
    for (i, m) in combined.iter_mut().enumerate() {
        *m = word(&head, i);
    }
    Ok((
        combined,
        Side {
            mask: combined,
            high: word(&head, W),
            data,
        },
    ))
}

/// The intercommunicator of `local`'s group and the group `other` (job
/// ranks), with contexts from `mask`.
fn build(l: &Lib, local: &CommObj, other: Vec<u32>, mask: Mask) -> Result<CommObj, Fail> {
    let ctx = take_two(l, mask)?;
    let mut obj = make(l, local.group.clone(), ctx, local)?;
    obj.remote = Some(Remote::new(Rc::from(other), l.job.size()));
    Ok(obj)
}

/// The leaders' exchange across an intercommunicator `c`.
fn across(c: &CommObj, tag: u32) -> impl Fn(&[u8], &mut [u8]) -> Result<(), Fail> + '_ {
    move |s, r| {
        let peer = c.peer_job(0);
        c.coll.sendrecv(s, peer, tag, r, peer, tag)?;
        Ok(())
    }
}

/// `MPI_Comm_dup` of an intercommunicator: new contexts free on both
/// groups, the same groups.
pub(crate) fn dup(l: &Lib, c: &CommObj) -> Result<CommObj, Fail> {
    let (mask, other) = meet(l, c, 0, false, None, &across(c, T_INTER))?;
    build(l, c, other.data, mask)
}

/// `MPI_Comm_split` of an intercommunicator: the members of each color
/// in both groups make an intercommunicator (local ranks ordered by key,
/// then by old rank); a rank whose color is `MPI_UNDEFINED`, or whose
/// color the other group lacks, gets `MPI_COMM_NULL`.
pub(crate) fn split(l: &Lib, c: &CommObj, color: c_int, key: c_int) -> Result<Handle, Fail> {
    if color < 0 && color != abi::UNDEFINED {
        return fail(abi::ERR_ARG, format!("invalid color {color}"));
    }
    let n = c.size();
    let mine = [color, key];
    let mut all = vec![0i32; 2 * n];
    crate::coll::allgather_bytes(
        c,
        crate::comm::as_bytes(&mine),
        crate::comm::as_bytes_mut(&mut all),
    )?;
    let triples: Vec<u32> = (0..n)
        .flat_map(|r| [c.group[r], all[2 * r] as u32, all[2 * r + 1] as u32])
        .collect();
    let (mask, other) = meet(l, c, 0, false, Some(&triples), &across(c, T_INTER))?;
    let pick = |t: &[u32]| -> Vec<u32> {
        let mut m: Vec<(i32, usize, u32)> = t
            .chunks_exact(3)
            .enumerate()
            .filter(|(_, x)| x[1] as i32 == color)
            .map(|(i, x)| (x[2] as i32, i, x[0]))
            .collect();
        m.sort();
        m.into_iter().map(|x| x.2).collect()
    };
    let (mine, theirs) = (pick(&triples), pick(&other.data));
    let ctx = take_two(l, mask)?;
    if color == abi::UNDEFINED || theirs.is_empty() {
        crate::state::mark(l, ctx[0], true);
        crate::state::mark(l, ctx[1], true);
        return Ok(abi::COMM_NULL);
    }
    let mut obj = make(l, Rc::from(mine), ctx, c)?;
    obj.remote = Some(Remote::new(Rc::from(theirs), l.job.size()));
    Ok(l.add_comm(obj))
}

/// `MPI_Comm_create` on an intercommunicator: `group`, a subgroup of the
/// local group (the same on every local rank), meets the subgroup the other
/// side gives; the members of both get an intercommunicator of the two,
/// every other rank (and every rank if either subgroup is empty)
/// `MPI_COMM_NULL`.
pub(crate) fn create_sub(l: &Lib, c: &CommObj, group: &[u32]) -> Result<Handle, Fail> {
    let (mask, other) = meet(l, c, 0, false, Some(group), &across(c, T_INTER))?;
    let ctx = take_two(l, mask)?;
    let me = l.job.rank() as u32;
    if !group.contains(&me) || other.data.is_empty() {
        crate::state::mark(l, ctx[0], true);
        crate::state::mark(l, ctx[1], true);
        return Ok(abi::COMM_NULL);
    }
    let mut obj = make(l, Rc::from(group), ctx, c)?;
    obj.remote = Some(Remote::new(Rc::from(other.data), l.job.size()));
    Ok(l.add_comm(obj))
}

/// `MPI_Barrier` on an intercommunicator: no rank leaves before every
/// rank of both groups has entered.
pub(crate) fn barrier(c: &CommObj) -> Result<(), Fail> {
    g_barrier(c)?;
    if c.rank == 0 {
        across(c, T_INTER_BARRIER)(&[], &mut [])?;
    }
    g_bcast(c, &mut [], 0)
}

fn create(
    l: &Lib,
    local: Handle,
    local_leader: c_int,
    peer: Handle,
    remote_leader: c_int,
    tag: c_int,
) -> Result<Handle, Fail> {
    let c = l.comm(local)?;
    if local_leader < 0 || local_leader as usize >= c.size() {
        return fail(
            abi::ERR_RANK,
            format!(
                "invalid local leader {local_leader} in a communicator of {}",
                c.size()
            ),
        );
    }
    let leader = local_leader as usize;
    // Only the leader uses `peer`, `remote_leader` and `tag`.
    let mut link = None;
    if c.rank == leader {
        let p = l.comm(peer)?;
        if remote_leader < 0 || remote_leader as usize >= p.size() {
            return fail(
                abi::ERR_RANK,
                format!(
                    "invalid remote leader {remote_leader} in a peer communicator of {}",
                    p.size()
                ),
            );
        }
        if tag < 0 {
            return fail(abi::ERR_TAG, format!("invalid tag {tag}"));
        }
        link = Some((p, remote_leader as usize, tag as u32));
    }
    let talk = |s: &[u8], r: &mut [u8]| -> Result<(), Fail> {
        let (p, rl, tag) = link.as_ref().expect("the leader's link");
        let j = p.job_rank(*rl);
        p.p2p.sendrecv(s, j, *tag, r, j, *tag)?;
        Ok(())
    };
    let (mask, other) = meet(l, &c, leader, false, None, &talk)?;
    let obj = build(l, &c, other.data, mask)?;
    Ok(l.add_comm(obj))
}

fn merge(l: &Lib, inter: Handle, high: c_int) -> Result<Handle, Fail> {
    let c = l.any_comm(inter)?;
    let Some(remote) = &c.remote else {
        return fail(abi::ERR_COMM, "MPI_Intercomm_merge of an intracommunicator");
    };
    let high = high != 0;
    let (mask, other) = meet(l, &c, 0, high, None, &across(&c, T_INTER))?;
    debug_assert_eq!(other.data.as_slice(), &*remote.group);
    // The group that said `high` = false first; on a tie, the group of
    // the smaller leader's job rank (the same answer on both sides).
    let mine_first = match (high, other.high != 0) {
        (false, true) => true,
        (true, false) => false,
        _ => c.group[0] < other.data[0],
    };
    let group: Vec<u32> = if mine_first {
        c.group.iter().chain(&other.data).copied().collect()
    } else {
        other.data.iter().chain(c.group.iter()).copied().collect()
    };
    let ctx = take_two(l, mask)?;
    let obj = make(l, Rc::from(group), ctx, &c)?;
    Ok(l.add_comm(obj))
}

/// Every rank of the remote group, with the blocks' tag.
fn everyone(c: &CommObj) -> Vec<(Option<usize>, u32)> {
    (0..c.peers()).map(|j| (Some(j), T_INTER_BLOCKS)).collect()
}

/// Refuses `MPI_IN_PLACE`, which no intercommunicator collective takes.
fn no_in_place(p: *const c_void) -> Result<(), Fail> {
    if is_in_place(p) {
        return fail(abi::ERR_BUFFER, "MPI_IN_PLACE on an intercommunicator");
    }
    Ok(())
}

/// `n` copies of one block: `count` of `dt` at the buffer's start.
fn same(n: usize, count: c_int, dt: Handle) -> Blocks {
    (vec![count; n], vec![0; n], vec![dt; n])
}

/// `MPI_Allgather` on an intercommunicator: every rank gets one block from
/// each rank of the other group, in its rank order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn allgather(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    sn: c_int,
    st: Handle,
    r: *mut c_void,
    rn: c_int,
    rt: Handle,
) -> Result<(), Fail> {
    no_in_place(s)?;
    let (n, all) = (c.peers(), everyone(c));
    let (scs, sds, sts) = same(n, sn, st);
    let (rcs, rds, rts) = even(l, n, rn, rt)?;
    blocks_w(l, c, &all, &all, s, &scs, &sds, &sts, r, &rcs, &rds, &rts)
}

/// `MPI_Allgatherv` on an intercommunicator (counts and displacements for
/// the other group's ranks).
#[allow(clippy::too_many_arguments)]
pub(crate) fn allgatherv(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    sn: c_int,
    st: Handle,
    r: *mut c_void,
    rcounts: *const c_int,
    rdispls: *const c_int,
    rt: Handle,
) -> Result<(), Fail> {
    no_in_place(s)?;
    let (n, all) = (c.peers(), everyone(c));
    let (scs, sds, sts) = same(n, sn, st);
    // SAFETY: the program's arrays of one entry per remote rank.
    let (rcs, rds, rts) = unsafe { varying(l, n, rcounts, rdispls, rt) }?;
    blocks_w(l, c, &all, &all, s, &scs, &sds, &sts, r, &rcs, &rds, &rts)
}

/// `MPI_Alltoall` on an intercommunicator: block j to and from rank j of
/// the other group.
#[allow(clippy::too_many_arguments)]
pub(crate) fn alltoall(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    sn: c_int,
    st: Handle,
    r: *mut c_void,
    rn: c_int,
    rt: Handle,
) -> Result<(), Fail> {
    no_in_place(s)?;
    let (n, all) = (c.peers(), everyone(c));
    let (scs, sds, sts) = even(l, n, sn, st)?;
    let (rcs, rds, rts) = even(l, n, rn, rt)?;
    blocks_w(l, c, &all, &all, s, &scs, &sds, &sts, r, &rcs, &rds, &rts)
}

/// `MPI_Alltoallv` on an intercommunicator.
#[allow(clippy::too_many_arguments)]
pub(crate) fn alltoallv(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    scounts: *const c_int,
    sdispls: *const c_int,
    st: Handle,
    r: *mut c_void,
    rcounts: *const c_int,
    rdispls: *const c_int,
    rt: Handle,
) -> Result<(), Fail> {
    no_in_place(s)?;
    let (n, all) = (c.peers(), everyone(c));
    // SAFETY: the program's arrays of one entry per remote rank.
    let (scs, sds, sts) = unsafe { varying(l, n, scounts, sdispls, st) }?;
    // SAFETY: as above.
    let (rcs, rds, rts) = unsafe { varying(l, n, rcounts, rdispls, rt) }?;
    blocks_w(l, c, &all, &all, s, &scs, &sds, &sts, r, &rcs, &rds, &rts)
}

/// `MPI_Alltoallw` on an intercommunicator (byte displacements, a type per
/// block).
#[allow(clippy::too_many_arguments)]
pub(crate) fn alltoallw(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    scounts: *const c_int,
    sdispls: *const c_int,
    sts: *const Handle,
    r: *mut c_void,
    rcounts: *const c_int,
    rdispls: *const c_int,
    rts: *const Handle,
) -> Result<(), Fail> {
    no_in_place(s)?;
    let (n, all) = (c.peers(), everyone(c));
    let bytes = |d: &[c_int]| -> Vec<isize> { d.iter().map(|&x| x as isize).collect() };
    // SAFETY: the program's arrays of one entry per remote rank.
    let (scs, sds, stys, rcs, rds, rtys) = unsafe {
        (
            array(scounts, n, "sendcounts")?,
            bytes(array(sdispls, n, "sdispls")?),
            array(sts, n, "sendtypes")?,
            array(rcounts, n, "recvcounts")?,
            bytes(array(rdispls, n, "rdispls")?),
            array(rts, n, "recvtypes")?,
        )
    };
    blocks_w(l, c, &all, &all, s, scs, &sds, stys, r, rcs, &rds, rtys)
}

/// `MPI_Gather(v)` on an intercommunicator: the root (`MPI_ROOT`)
/// receives a block from each rank of the other group (`blocks`: their
/// counts, byte displacements and types), each of which sends one.
#[allow(clippy::too_many_arguments)]
fn gather_blocks(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    sn: c_int,
    st: Handle,
    r: *mut c_void,
    root: c_int,
    blocks: impl FnOnce(usize) -> Result<Blocks, Fail>,
) -> Result<(), Fail> {
    match inter_root(c, root)? {
        None => Ok(()),
        Some(None) => {
            let n = c.peers();
            let (rcs, rds, rts) = blocks(n)?;
            blocks_w(
                l,
                c,
                &everyone(c),
                &[],
                s,
                &[],
                &[],
                &[],
                r,
                &rcs,
                &rds,
                &rts,
            )
        }
        Some(Some(root)) => {
            no_in_place(s)?;
            let to = [(Some(root), T_INTER_BLOCKS)];
            blocks_w(l, c, &[], &to, s, &[sn], &[0], &[st], r, &[], &[], &[])
        }
    }
}

/// `MPI_Gather` on an intercommunicator.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    sn: c_int,
    st: Handle,
    r: *mut c_void,
    rn: c_int,
    rt: Handle,
    root: c_int,
) -> Result<(), Fail> {
    gather_blocks(l, c, s, sn, st, r, root, |n| even(l, n, rn, rt))
}

/// `MPI_Gatherv` on an intercommunicator.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gatherv(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    sn: c_int,
    st: Handle,
    r: *mut c_void,
    rcounts: *const c_int,
    rdispls: *const c_int,
    rt: Handle,
    root: c_int,
) -> Result<(), Fail> {
    // SAFETY: the root's arrays of one entry per remote rank.
    gather_blocks(l, c, s, sn, st, r, root, |n| unsafe {
        varying(l, n, rcounts, rdispls, rt)
    })
}

/// `MPI_Scatter(v)` on an intercommunicator: the root (`MPI_ROOT`) sends a
/// block to each rank of the other group (`blocks`), each of which
/// receives one.
#[allow(clippy::too_many_arguments)]
fn scatter_blocks(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    r: *mut c_void,
    rn: c_int,
    rt: Handle,
    root: c_int,
    blocks: impl FnOnce(usize) -> Result<Blocks, Fail>,
) -> Result<(), Fail> {
    match inter_root(c, root)? {
        None => Ok(()),
        Some(None) => {
            let n = c.peers();
            let (scs, sds, sts) = blocks(n)?;
            blocks_w(
                l,
                c,
                &[],
                &everyone(c),
                s,
                &scs,
                &sds,
                &sts,
                r,
                &[],
                &[],
                &[],
            )
        }
        Some(Some(root)) => {
            no_in_place(r.cast_const())?;
            let from = [(Some(root), T_INTER_BLOCKS)];
            blocks_w(l, c, &from, &[], s, &[], &[], &[], r, &[rn], &[0], &[rt])
        }
    }
}

/// `MPI_Scatter` on an intercommunicator.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    sn: c_int,
    st: Handle,
    r: *mut c_void,
    rn: c_int,
    rt: Handle,
    root: c_int,
) -> Result<(), Fail> {
    scatter_blocks(l, c, s, r, rn, rt, root, |n| even(l, n, sn, st))
}

/// `MPI_Scatterv` on an intercommunicator.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatterv(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    scounts: *const c_int,
    sdispls: *const c_int,
    st: Handle,
    r: *mut c_void,
    rn: c_int,
    rt: Handle,
    root: c_int,
) -> Result<(), Fail> {
    // SAFETY: the root's arrays of one entry per remote rank.
    scatter_blocks(l, c, s, r, rn, rt, root, |n| unsafe {
        varying(l, n, scounts, sdispls, st)
    })
}

export! {
    fn MPI_Intercomm_create, PMPI_Intercomm_create(local: Handle, local_leader: c_int, peer: Handle, remote_leader: c_int, tag: c_int, out: *mut Handle) -> c_int {
        run(local, "MPI_Intercomm_create", |l| {
            crate::null_first(out, abi::COMM_NULL, "newintercomm")?;
            set(out, create(l, local, local_leader, peer, remote_leader, tag)?, "newintercomm")
        })
    }

    fn MPI_Intercomm_merge, PMPI_Intercomm_merge(inter: Handle, high: c_int, out: *mut Handle) -> c_int {
        run(inter, "MPI_Intercomm_merge", |l| {
            crate::need(out, "newintracomm")?;
            set(out, merge(l, inter, high)?, "newintracomm")
        })
    }

    fn MPI_Comm_remote_size, PMPI_Comm_remote_size(comm: Handle, size: *mut c_int) -> c_int {
        run(comm, "MPI_Comm_remote_size", |l| {
            let c = l.any_comm(comm)?;
            let Some(r) = &c.remote else {
                return fail(abi::ERR_COMM, "MPI_Comm_remote_size of an intracommunicator");
            };
            set(size, r.group.len() as c_int, "size")
        })
    }

    fn MPI_Comm_remote_group, PMPI_Comm_remote_group(comm: Handle, group: *mut Handle) -> c_int {
        run(comm, "MPI_Comm_remote_group", |l| {
            let c = l.any_comm(comm)?;
            let Some(r) = &c.remote else {
                return fail(abi::ERR_COMM, "MPI_Comm_remote_group of an intracommunicator");
            };
            crate::need(group, "group")?;
            set(group, l.add_group(r.group.clone()), "group")
        })
    }
}
