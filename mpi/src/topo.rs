//! Virtual topologies: Cartesian grids (`MPI_Cart_*`), graphs
//! (`MPI_Graph_*`), distributed graphs (`MPI_Dist_graph_*`), and the
//! neighbourhood collectives over them (`MPI_Neighbor_*`).
//!
//! A topology is a description attached to a communicator: the processes
//! keep their ranks (`reorder` is accepted and not acted on, as MPI
//! allows), so creating one is a communicator creation over the first
//! `n` members of the old communicator, and every query is arithmetic
//! on the description. The neighbourhood collectives post a receive from
//! every in-neighbour and a send to every out-neighbour on the
//! communicator's collective context, then wait for all of them: no
//! order of the neighbours can deadlock, and `MPI_PROC_NULL` neighbours
//! (the edges of a non-periodic grid) are skipped, their blocks left as
//! they were.
//!
//! Cartesian neighbours are, per dimension, the one in the negative
//! direction and then the one in the positive direction. A message sent
//! in a direction is received in the block of the opposite direction, so
//! that a periodic dimension of one or two processes (where both
//! neighbours are one process) still delivers block `2d + 1` of the
//! sender into block `2d` of the receiver, as a grid of more processes
//! does.

use crate::abi::{self, Aint, Handle};
use crate::comm;
use crate::p2p::{in_view, out_view, unstage, In, Out};
use crate::state::{self, CommObj, Fail, Lib};
use crate::{array, array_mut, count, export, fail, run, set};
use std::ffi::{c_int, c_void};
use std::rc::Rc;

/// Tags of the neighbourhood collectives on the collective context
/// (above the other collectives' 1..=7).
const T_NEIGHBOR: u32 = 64;

/// A communicator's virtual topology.
pub enum Topo {
    /// A Cartesian grid: its extents and which dimensions wrap around.
    Cart {
        /// Processes along each dimension.
        dims: Vec<c_int>,
        /// Whether each dimension is periodic.
        periods: Vec<bool>,
    },
    /// A graph given whole on every process (`MPI_Graph_create`).
    Graph {
        /// `index[i]`: the number of edges of nodes `0..=i`.
        index: Vec<c_int>,
        /// The neighbours of every node, node after node.
        edges: Vec<c_int>,
    },
    /// A distributed graph: this process's own edges.
    Dist {
        /// The processes with an edge to this one (in-neighbours).
        sources: Vec<c_int>,
        /// Their weights (zeros when unweighted).
        sweights: Vec<c_int>,
        /// The processes this one has an edge to (out-neighbours).
        dests: Vec<c_int>,
        /// Their weights.
        dweights: Vec<c_int>,
        /// Whether weights were given.
        weighted: bool,
    },
}

/// The topology of `c`, if any.
fn topo_of(c: &CommObj) -> Option<Rc<Topo>> {
    c.topo.borrow().clone()
}

fn no_topo<T>(what: &str) -> Result<T, Fail> {
    fail(
        abi::ERR_TOPOLOGY,
        format!("the communicator has no {what} topology"),
    )
}

/// The grid of a Cartesian communicator.
fn cart(c: &CommObj) -> Result<(Vec<c_int>, Vec<bool>), Fail> {
    match topo_of(c).as_deref() {
        Some(Topo::Cart { dims, periods }) => Ok((dims.clone(), periods.clone())),
        _ => no_topo("Cartesian"),
    }
}

/// The number of processes of a grid, checking its extents (an extent
/// of 0 makes an empty grid: `MPI_COMM_NULL` everywhere, as MPICH does).
fn grid_size(dims: &[c_int]) -> Result<usize, Fail> {
    dims.iter().try_fold(1usize, |n, &d| {
        if d < 0 {
            return fail(abi::ERR_DIMS, format!("invalid dimension extent {d}"));
        }
        n.checked_mul(d as usize)
            .ok_or_else(|| Fail::new(abi::ERR_DIMS, "the grid's size overflows".into()))
    })
}

/// The coordinates of `rank` in a row-major grid.
fn coords_of(dims: &[c_int], mut rank: usize) -> Vec<c_int> {
    let mut out = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        let d = dims[i] as usize;
        out[i] = (rank % d) as c_int;
        rank /= d;
    }
    out
}

/// The rank at `coords` (periodic dimensions wrap; others must be in
/// range).
fn rank_at(dims: &[c_int], periods: &[bool], coords: &[c_int]) -> Result<usize, Fail> {
    let mut r = 0usize;
    for i in 0..dims.len() {
        let d = dims[i] as i64;
        let mut x = coords[i] as i64;
        if periods[i] {
            x = x.rem_euclid(d);
        } else if !(0..d).contains(&x) {
            return fail(
                abi::ERR_ARG,
                format!("coordinate {x} is outside non-periodic dimension {i} of extent {d}"),
            );
        }
        r = r * d as usize + x as usize;
    }
    Ok(r)
}

/// The rank `disp` steps along `dir` from `me` (`None`: off the edge of
/// a non-periodic dimension).
fn shifted(dims: &[c_int], periods: &[bool], me: &[c_int], dir: usize, disp: i64) -> Option<usize> {
    let d = dims[dir] as i64;
    let x = me[dir] as i64 + disp;
    let x = if periods[dir] {
        x.rem_euclid(d)
    } else if (0..d).contains(&x) {
        x
    } else {
        return None;
    };
    let mut c = me.to_vec();
    c[dir] = x as c_int;
    rank_at(dims, periods, &c).ok()
}

/// Creates a communicator of the first `k` members of `comm` with `topo`
/// (the other members get `MPI_COMM_NULL`); collective over `comm`.
fn create_first(l: &Lib, comm: Handle, k: usize, topo: Topo) -> Result<Handle, Fail> {
    let c = l.comm(comm)?;
    if k > c.size() {
        return fail(
            abi::ERR_ARG,
            format!(
                "the topology has {k} processes, more than the communicator's {}",
                c.size()
            ),
        );
    }
    let ctx = comm::agree_contexts(l, &c)?;
    if c.rank >= k {
        state::mark(l, ctx[0], true);
        state::mark(l, ctx[1], true);
        return Ok(abi::COMM_NULL);
    }
    let group: Rc<[u32]> = Rc::from(&c.group[..k]);
    let obj = comm::make(l, group, ctx, &c)?;
    *obj.topo.borrow_mut() = Some(Rc::new(topo));
    Ok(l.add_comm(obj))
}

/// A graph's `index` and `edges` checked against `nnodes`.
fn check_graph(nnodes: usize, index: &[c_int], edges: &[c_int]) -> Result<(), Fail> {
    let mut prev = 0;
    for &i in index {
        if i < prev {
            return fail(
                abi::ERR_ARG,
                format!("graph index {i} decreases (after {prev})"),
            );
        }
        prev = i;
    }
    if let Some(&e) = edges.iter().find(|&&e| e < 0 || e as usize >= nnodes) {
        return fail(
            abi::ERR_ARG,
            format!("graph edge to node {e}, not one of the {nnodes} nodes"),
        );
    }
    Ok(())
}

/// The neighbours of node `r` of a graph.
fn graph_neighbors<'a>(index: &[c_int], edges: &'a [c_int], r: usize) -> &'a [c_int] {
    let lo = if r == 0 { 0 } else { index[r - 1] as usize };
    &edges[lo..index[r] as usize]
}

/// Whether `p` is `MPI_UNWEIGHTED`.
fn unweighted(p: *const c_int) -> bool {
    std::ptr::eq(p, crate::unsupported::MPI_UNWEIGHTED.addr())
}

/// The in- and out-neighbours of this process for a neighbourhood
/// collective, each with the tag its message carries (`None`:
/// `MPI_PROC_NULL`).
type Neighbors = Vec<(Option<usize>, u32)>;

fn neighbors(c: &CommObj) -> Result<(Neighbors, Neighbors), Fail> {
    let Some(t) = topo_of(c) else {
        return no_topo("Cartesian, graph or distributed graph");
    };
    Ok(match &*t {
        Topo::Cart { dims, periods } => {
            let me = coords_of(dims, c.rank);
            let (mut ins, mut outs) = (Vec::new(), Vec::new());
            for d in 0..dims.len() {
                let minus = shifted(dims, periods, &me, d, -1);
                let plus = shifted(dims, periods, &me, d, 1);
                let (down, up) = (T_NEIGHBOR + 2 * d as u32, T_NEIGHBOR + 2 * d as u32 + 1);
                // Sent downwards with `down`, upwards with `up`; the block
                // from below holds what that neighbour sent upwards.
                ins.push((minus, up));
                ins.push((plus, down));
                outs.push((minus, down));
                outs.push((plus, up));
            }
            (ins, outs)
        }
        Topo::Graph { index, edges } => {
            let nb: Neighbors = graph_neighbors(index, edges, c.rank)
                .iter()
                .map(|&r| (Some(r as usize), T_NEIGHBOR))
                .collect();
            (nb.clone(), nb)
        }
        Topo::Dist { sources, dests, .. } => (
            sources
                .iter()
                .map(|&r| (Some(r as usize), T_NEIGHBOR))
                .collect(),
            dests
                .iter()
                .map(|&r| (Some(r as usize), T_NEIGHBOR))
                .collect(),
        ),
    })
}

/// One block to send: its bytes (a view of the program's buffer or a
/// packed copy) and where.
struct SendBlock {
    out: Out,
    to: usize,
    tag: u32,
}

/// One block to receive into.
struct RecvBlock {
    inb: In,
    from: usize,
    tag: u32,
}

/// Moves the blocks: every receive posted, then every send, then all
/// waited for (all of them, even after an error: the engine holds the
/// buffers until then); received blocks of derived types are unpacked.
fn exchange(
    l: &Lib,
    c: &CommObj,
    sends: Vec<SendBlock>,
    mut recvs: Vec<RecvBlock>,
) -> Result<(), Fail> {
    let mut first: Option<Fail> = None;
    let mut posted = Vec::with_capacity(recvs.len() + sends.len());
    for (i, r) in recvs.iter_mut().enumerate() {
        let b = r.inb.bytes();
        // SAFETY: the block (the program's buffer, or the staging buffer
        // `recvs` owns) stays untouched until the wait below.
        match unsafe {
            c.coll
                .irecv_raw(b.as_mut_ptr(), b.len(), c.peer_job(r.from), r.tag)
        } {
            Ok(q) => posted.push((Some(i), q)),
            Err(e) => {
                first = Some(e.into());
                break;
            }
        }
    }
    if first.is_none() {
        for s in &sends {
            let b = s.out.bytes();
            // SAFETY: the block (the program's buffer or the packed copy
            // `sends` owns) stays readable until the wait below.
            match unsafe {
                c.coll
                    .isend_raw(b.as_ptr(), b.len(), c.peer_job(s.to), s.tag, false)
            } {
                Ok(q) => posted.push((None, q)),
                Err(e) => {
                    first = Some(e.into());
                    break;
                }
            }
        }
    }
    for (i, q) in posted {
        match c.coll.wait_raw(q) {
            Ok(st) => {
                if let Some(i) = i {
                    if let Some(u) = &recvs[i].inb.stage {
                        if let Err(e) = unstage(l, u, st.len) {
                            first.get_or_insert(e);
                        }
                    }
                }
            }
            Err(e) => {
                first.get_or_insert(e.into());
            }
        }
    }
    drop(sends);
    first.map_or(Ok(()), Err)
}

/// The address `off` bytes from `p` (a block of a program's buffer).
fn at(p: *const c_void, off: isize) -> *const c_void {
    p.cast::<u8>().wrapping_offset(off).cast()
}

/// A datatype's extent, for block displacements.
fn extent(l: &Lib, dt: Handle) -> Result<isize, Fail> {
    if let Some(sz) = abi::builtin_size(dt) {
        if sz > 0 && dt != abi::LB && dt != abi::UB {
            return Ok(sz as isize);
        }
    }
    l.types
        .borrow()
        .info(dt)
        .map(|i| i.extent)
        .map_err(|cl| crate::p2p::type_fail(cl, dt))
}

/// A neighbourhood collective given per-neighbour counts, byte
/// displacements and datatypes (every other form reduces to this one).
#[allow(clippy::too_many_arguments)]
fn neighbor_w(
    l: &Lib,
    comm: Handle,
    s: *const c_void,
    scounts: &[c_int],
    sdispls: &[isize],
    stypes: &[Handle],
    r: *mut c_void,
    rcounts: &[c_int],
    rdispls: &[isize],
    rtypes: &[Handle],
) -> Result<(), Fail> {
    let c = l.comm(comm)?;
    let (ins, outs) = neighbors(&c)?;
    blocks_w(
        l, &c, &ins, &outs, s, scounts, sdispls, stypes, r, rcounts, rdispls, rtypes,
    )
}

/// Sends block j (`scounts[j]` of `stypes[j]` at byte `sdispls[j]` of `s`)
/// to `outs[j]` and receives block i into `r` from `ins[i]`, every receive
/// posted first (peers are point-to-point ranks: an intercommunicator's
/// name the remote group; `None`: no peer, the block untouched). A
/// neighbourhood collective, and every intercommunicator collective that
/// moves blocks (`inter.rs`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn blocks_w(
    l: &Lib,
    c: &CommObj,
    ins: &[(Option<usize>, u32)],
    outs: &[(Option<usize>, u32)],
    s: *const c_void,
    scounts: &[c_int],
    sdispls: &[isize],
    stypes: &[Handle],
    r: *mut c_void,
    rcounts: &[c_int],
    rdispls: &[isize],
    rtypes: &[Handle],
) -> Result<(), Fail> {
    let mut sends = Vec::with_capacity(outs.len());
    for (j, &(to, tag)) in outs.iter().enumerate() {
        let out = out_view(l, at(s, sdispls[j]), scounts[j], stypes[j])?;
        if let Some(to) = to {
            sends.push(SendBlock { out, to, tag });
        }
    }
    let mut recvs = Vec::with_capacity(ins.len());
    for (i, &(from, tag)) in ins.iter().enumerate() {
        let inb = in_view(l, at(r, rdispls[i]).cast_mut(), rcounts[i], rtypes[i])?;
        if let Some(from) = from {
            recvs.push(RecvBlock { inb, from, tag });
        }
    }
    exchange(l, c, sends, recvs)
}

/// The in- and out-degree of this process for a neighbourhood collective.
pub(crate) fn degrees(l: &Lib, comm: Handle) -> Result<(usize, usize), Fail> {
    let c = l.comm(comm)?;
    let (ins, outs) = neighbors(&c)?;
    Ok((ins.len(), outs.len()))
}

/// Per-block counts, byte displacements and datatypes.
pub(crate) type Blocks = (Vec<c_int>, Vec<isize>, Vec<Handle>);

/// Displacements of `n` equal blocks of `count` elements of `dt`.
pub(crate) fn even(l: &Lib, n: usize, count: c_int, dt: Handle) -> Result<Blocks, Fail> {
    let step = extent(l, dt)?
        .checked_mul(crate::count(count)? as isize)
        .ok_or_else(|| Fail::new(abi::ERR_COUNT, "a block's size overflows".into()))?;
    let displs = (0..n)
        .map(|k| step.checked_mul(k as isize))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Fail::new(abi::ERR_COUNT, "the blocks' offsets overflow".into()))?;
    Ok((vec![count; n], displs, vec![dt; n]))
}

/// Per-block counts and element displacements (`MPI_*v`) as byte
/// displacements.
///
/// # Safety
/// `counts` and `displs` hold `n` ints each.
pub(crate) unsafe fn varying(
    l: &Lib,
    n: usize,
    counts: *const c_int,
    displs: *const c_int,
    dt: Handle,
) -> Result<Blocks, Fail> {
    let e = extent(l, dt)?;
    // SAFETY: the caller's arrays.
    let (cs, ds) = unsafe {
        (
            array(counts, n, "counts")?,
            array(displs, n, "displacements")?,
        )
    };
    let displs = ds
        .iter()
        .map(|&d| (d as isize).checked_mul(e))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Fail::new(abi::ERR_COUNT, "a displacement overflows".into()))?;
    Ok((cs.to_vec(), displs, vec![dt; n]))
}

export! {
    fn MPI_Cart_create, PMPI_Cart_create(comm: Handle, ndims: c_int, dims: *const c_int, periods: *const c_int, _reorder: c_int, newcomm: *mut Handle) -> c_int {
        run(comm, "MPI_Cart_create", |l| {
            // MPI_COMM_NULL unless a communicator is made.
            set(newcomm, abi::COMM_NULL, "newcomm")?;
            if ndims < 0 {
                return fail(abi::ERR_DIMS, format!("negative number of dimensions {ndims}"));
            }
            let n = ndims as usize;
            let d = array(dims, n, "dims")?.to_vec();
            let p = array(periods, n, "periods")?.iter().map(|&x| x != 0).collect();
            let k = grid_size(&d)?;
            let h = create_first(l, comm, k, Topo::Cart { dims: d, periods: p })?;
            set(newcomm, h, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Cartdim_get, PMPI_Cartdim_get(comm: Handle, ndims: *mut c_int) -> c_int {
        run(comm, "MPI_Cartdim_get", |l| {
            let (d, _) = cart(&*l.comm(comm)?)?;
            set(ndims, d.len() as c_int, "ndims")?;
            Ok(())
        })
    }

    fn MPI_Cart_get, PMPI_Cart_get(comm: Handle, maxdims: c_int, dims: *mut c_int, periods: *mut c_int, coords: *mut c_int) -> c_int {
        run(comm, "MPI_Cart_get", |l| {
            let c = l.comm(comm)?;
            let (d, p) = cart(&c)?;
            let n = count(maxdims)?.min(d.len());
            let me = coords_of(&d, c.rank);
            array_mut(dims, n, "dims")?.copy_from_slice(&d[..n]);
            for (o, &x) in array_mut(periods, n, "periods")?.iter_mut().zip(&p) {
                *o = x as c_int;
            }
            array_mut(coords, n, "coords")?.copy_from_slice(&me[..n]);
            Ok(())
        })
    }

    fn MPI_Cart_rank, PMPI_Cart_rank(comm: Handle, coords: *const c_int, rank: *mut c_int) -> c_int {
        run(comm, "MPI_Cart_rank", |l| {
            let (d, p) = cart(&*l.comm(comm)?)?;
            let r = rank_at(&d, &p, array(coords, d.len(), "coords")?)?;
            set(rank, r as c_int, "rank")?;
            Ok(())
        })
    }

    fn MPI_Cart_coords, PMPI_Cart_coords(comm: Handle, rank: c_int, maxdims: c_int, coords: *mut c_int) -> c_int {
        run(comm, "MPI_Cart_coords", |l| {
            let c = l.comm(comm)?;
            let (d, _) = cart(&c)?;
            if rank < 0 || rank as usize >= c.size() {
                return fail(abi::ERR_RANK, format!("rank {rank} is not in the grid of {}", c.size()));
            }
            if count(maxdims)? < d.len() {
                return fail(abi::ERR_ARG, format!("maxdims {maxdims} is below the grid's {} dimensions", d.len()));
            }
            array_mut(coords, d.len(), "coords")?.copy_from_slice(&coords_of(&d, rank as usize));
            Ok(())
        })
    }

    fn MPI_Cart_shift, PMPI_Cart_shift(comm: Handle, direction: c_int, disp: c_int, source: *mut c_int, dest: *mut c_int) -> c_int {
        run(comm, "MPI_Cart_shift", |l| {
            let c = l.comm(comm)?;
            let (d, p) = cart(&c)?;
            if direction < 0 || direction as usize >= d.len() {
                return fail(abi::ERR_ARG, format!("direction {direction} is not one of the grid's {} dimensions", d.len()));
            }
            let me = coords_of(&d, c.rank);
            let dir = direction as usize;
            let rank = |x: Option<usize>| x.map_or(abi::PROC_NULL, |r| r as c_int);
            set(source, rank(shifted(&d, &p, &me, dir, -(disp as i64))), "source")?;
            set(dest, rank(shifted(&d, &p, &me, dir, disp as i64)), "dest")?;
            Ok(())
        })
    }

    fn MPI_Cart_sub, PMPI_Cart_sub(comm: Handle, remain: *const c_int, newcomm: *mut Handle) -> c_int {
        run(comm, "MPI_Cart_sub", |l| {
            // MPI_COMM_NULL unless a communicator is made.
            set(newcomm, abi::COMM_NULL, "newcomm")?;
            let c = l.comm(comm)?;
            let (d, p) = cart(&c)?;
            let keep: Vec<bool> = array(remain, d.len(), "remain_dims")?.iter().map(|&x| x != 0).collect();
            let me = coords_of(&d, c.rank);
            // Processes that agree on the dropped coordinates share a grid;
            // their order in it is the row-major order of the kept ones.
            let (mut color, mut key) = (0usize, 0usize);
            for i in 0..d.len() {
                if keep[i] {
                    key = key * d[i] as usize + me[i] as usize;
                } else {
                    color = color * d[i] as usize + me[i] as usize;
                }
            }
            drop(c);
            let h = comm::split(l, comm, color as c_int, key as c_int)?;
            let sub = l.comm(h)?;
            let pick = |v: &[c_int]| (0..d.len()).filter(|&i| keep[i]).map(|i| v[i]).collect::<Vec<_>>();
            *sub.topo.borrow_mut() = Some(Rc::new(Topo::Cart {
                dims: pick(&d),
                periods: (0..d.len()).filter(|&i| keep[i]).map(|i| p[i]).collect(),
            }));
            set(newcomm, h, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Cart_map, PMPI_Cart_map(comm: Handle, ndims: c_int, dims: *const c_int, _periods: *const c_int, newrank: *mut c_int) -> c_int {
        run(comm, "MPI_Cart_map", |l| {
            let c = l.comm(comm)?;
            if ndims < 0 {
                return fail(abi::ERR_DIMS, format!("negative number of dimensions {ndims}"));
            }
            let k = grid_size(array(dims, ndims as usize, "dims")?)?;
            if k > c.size() {
                return fail(abi::ERR_ARG, format!("the grid has {k} processes, more than the communicator's {}", c.size()));
            }
            set(newrank, if c.rank < k { c.rank as c_int } else { abi::UNDEFINED }, "newrank")?;
            Ok(())
        })
    }

    fn MPI_Graph_create, PMPI_Graph_create(comm: Handle, nnodes: c_int, index: *const c_int, edges: *const c_int, _reorder: c_int, newcomm: *mut Handle) -> c_int {
        run(comm, "MPI_Graph_create", |l| {
            // MPI_COMM_NULL unless a communicator is made.
            set(newcomm, abi::COMM_NULL, "newcomm")?;
            let n = count(nnodes)?;
            let idx = array(index, n, "index")?.to_vec();
            let nedges = idx.last().copied().unwrap_or(0);
            let e = array(edges, count(nedges)?, "edges")?.to_vec();
            check_graph(n, &idx, &e)?;
            if n == 0 {
                // An empty graph: MPI_COMM_NULL everywhere.
                l.comm(comm)?;
                set(newcomm, abi::COMM_NULL, "newcomm")?;
                return Ok(());
            }
            let h = create_first(l, comm, n, Topo::Graph { index: idx, edges: e })?;
            set(newcomm, h, "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Graphdims_get, PMPI_Graphdims_get(comm: Handle, nnodes: *mut c_int, nedges: *mut c_int) -> c_int {
        run(comm, "MPI_Graphdims_get", |l| {
            match topo_of(&*l.comm(comm)?).as_deref() {
                Some(Topo::Graph { index, edges }) => {
                    set(nnodes, index.len() as c_int, "nnodes")?;
                    set(nedges, edges.len() as c_int, "nedges")?;
                    Ok(())
                }
                _ => no_topo("graph"),
            }
        })
    }

    fn MPI_Graph_get, PMPI_Graph_get(comm: Handle, maxindex: c_int, maxedges: c_int, index: *mut c_int, edges: *mut c_int) -> c_int {
        run(comm, "MPI_Graph_get", |l| {
            match topo_of(&*l.comm(comm)?).as_deref() {
                Some(Topo::Graph { index: i, edges: e }) => {
                    let (ni, ne) = (count(maxindex)?.min(i.len()), count(maxedges)?.min(e.len()));
                    array_mut(index, ni, "index")?.copy_from_slice(&i[..ni]);
                    array_mut(edges, ne, "edges")?.copy_from_slice(&e[..ne]);
                    Ok(())
                }
                _ => no_topo("graph"),
            }
        })
    }

    fn MPI_Graph_neighbors_count, PMPI_Graph_neighbors_count(comm: Handle, rank: c_int, n: *mut c_int) -> c_int {
        run(comm, "MPI_Graph_neighbors_count", |l| {
            match topo_of(&*l.comm(comm)?).as_deref() {
                Some(Topo::Graph { index, edges }) => {
                    if rank < 0 || rank as usize >= index.len() {
                        return fail(abi::ERR_RANK, format!("rank {rank} is not a node of the graph"));
                    }
                    set(n, graph_neighbors(index, edges, rank as usize).len() as c_int, "n")?;
                    Ok(())
                }
                _ => no_topo("graph"),
            }
        })
    }

    fn MPI_Graph_neighbors, PMPI_Graph_neighbors(comm: Handle, rank: c_int, maxn: c_int, out: *mut c_int) -> c_int {
        run(comm, "MPI_Graph_neighbors", |l| {
            match topo_of(&*l.comm(comm)?).as_deref() {
                Some(Topo::Graph { index, edges }) => {
                    if rank < 0 || rank as usize >= index.len() {
                        return fail(abi::ERR_RANK, format!("rank {rank} is not a node of the graph"));
                    }
                    let nb = graph_neighbors(index, edges, rank as usize);
                    let k = count(maxn)?.min(nb.len());
                    array_mut(out, k, "neighbors")?.copy_from_slice(&nb[..k]);
                    Ok(())
                }
                _ => no_topo("graph"),
            }
        })
    }

    fn MPI_Graph_map, PMPI_Graph_map(comm: Handle, nnodes: c_int, _index: *const c_int, _edges: *const c_int, newrank: *mut c_int) -> c_int {
        run(comm, "MPI_Graph_map", |l| {
            let c = l.comm(comm)?;
            let k = count(nnodes)?;
            if k > c.size() {
                return fail(abi::ERR_ARG, format!("the graph has {k} nodes, more than the communicator's {}", c.size()));
            }
            set(newrank, if c.rank < k { c.rank as c_int } else { abi::UNDEFINED }, "newrank")?;
            Ok(())
        })
    }

    fn MPI_Dist_graph_create_adjacent, PMPI_Dist_graph_create_adjacent(comm: Handle, indegree: c_int, sources: *const c_int, sweights: *const c_int, outdegree: c_int, dests: *const c_int, dweights: *const c_int, _info: Handle, _reorder: c_int, newcomm: *mut Handle) -> c_int {
        run(comm, "MPI_Dist_graph_create_adjacent", |l| {
            // MPI_COMM_NULL unless a communicator is made.
            set(newcomm, abi::COMM_NULL, "newcomm")?;
            let c = l.comm(comm)?;
            let (ni, no) = (count(indegree)?, count(outdegree)?);
            let src = array(sources, ni, "sources")?.to_vec();
            let dst = array(dests, no, "destinations")?.to_vec();
            let n = c.size();
            if let Some(&r) = src.iter().chain(&dst).find(|&&r| r < 0 || r as usize >= n) {
                return fail(abi::ERR_RANK, format!("neighbour {r} is not a rank of the communicator of {n}"));
            }
            let weighted = !unweighted(sweights) && !unweighted(dweights);
            let weights = |p: *const c_int, k: usize, what: &str| -> Result<Vec<c_int>, Fail> {
                if !weighted || k == 0 || std::ptr::eq(p, crate::unsupported::MPI_WEIGHTS_EMPTY.addr()) {
                    Ok(vec![0; k])
                } else {
                    Ok(array(p, k, what)?.to_vec())
                }
            };
            let topo = Topo::Dist {
                sweights: weights(sweights, ni, "sourceweights")?,
                dweights: weights(dweights, no, "destweights")?,
                sources: src,
                dests: dst,
                weighted,
            };
            let obj = comm::dup_bare(l, &c)?;
            *obj.topo.borrow_mut() = Some(Rc::new(topo));
            set(newcomm, l.add_comm(obj), "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Dist_graph_create, PMPI_Dist_graph_create(comm: Handle, n: c_int, sources: *const c_int, degrees: *const c_int, dests: *const c_int, weights: *const c_int, _info: Handle, _reorder: c_int, newcomm: *mut Handle) -> c_int {
        run(comm, "MPI_Dist_graph_create", |l| {
            // MPI_COMM_NULL unless a communicator is made.
            set(newcomm, abi::COMM_NULL, "newcomm")?;
            let c = l.comm(comm)?;
            let size = c.size();
            let k = count(n)?;
            let src = array(sources, k, "sources")?;
            let deg = array(degrees, k, "degrees")?;
            let total = deg.iter().try_fold(0usize, |a, &d| a.checked_add(count(d).ok()?))
                .ok_or_else(|| Fail::new(abi::ERR_ARG, "invalid degrees".into()))?;
            let dst = array(dests, total, "destinations")?;
            let weighted = !unweighted(weights);
            let w = if weighted && total > 0 && !std::ptr::eq(weights, crate::unsupported::MPI_WEIGHTS_EMPTY.addr()) {
                array(weights, total, "weights")?.to_vec()
            } else {
                vec![0; total]
            };
            // This process's edges as (source, destination, weight).
            let mut mine: Vec<c_int> = Vec::with_capacity(3 * total);
            let mut e = 0;
            for (i, &s) in src.iter().enumerate() {
                for _ in 0..deg[i] {
                    let t = dst[e];
                    if s < 0 || s as usize >= size || t < 0 || t as usize >= size {
                        return fail(abi::ERR_RANK, format!("edge {s} -> {t} names a rank outside the communicator of {size}"));
                    }
                    mine.extend_from_slice(&[s, t, w[e]]);
                    e += 1;
                }
            }
            // Everyone's edges, in blocks padded to the longest.
            let mut lens = vec![0i32; size];
            let me = [mine.len() as i32];
            crate::coll::allgather_bytes(&c, comm::as_bytes(&me), comm::as_bytes_mut(&mut lens))?;
            let longest = lens.iter().copied().max().unwrap_or(0).max(0) as usize;
            let mut block = mine.clone();
            block.resize(longest, 0);
            let mut all = vec![0i32; longest * size];
            crate::coll::allgather_bytes(&c, comm::as_bytes(&block), comm::as_bytes_mut(&mut all))?;
            let (mut s_in, mut w_in, mut d_out, mut w_out) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let me = c.rank as c_int;
            for p in 0..size {
                for t in all[p * longest..p * longest + lens[p] as usize].chunks_exact(3) {
                    if t[1] == me {
                        s_in.push(t[0]);
                        w_in.push(t[2]);
                    }
                    if t[0] == me {
                        d_out.push(t[1]);
                        w_out.push(t[2]);
                    }
                }
            }
            // Weighted unless every process said MPI_UNWEIGHTED (MPI wants
            // all or none).
            let mut all_unweighted: crate::state::Mask = [!0u64; tandem_driver::CONTEXT_WORDS];
            all_unweighted[0] = u64::from(!weighted);
            crate::coll::allreduce_band(&c, &mut all_unweighted)?;
            let weighted = all_unweighted[0] == 0;
            let obj = comm::dup_bare(l, &c)?;
            *obj.topo.borrow_mut() = Some(Rc::new(Topo::Dist {
                sources: s_in,
                sweights: w_in,
                dests: d_out,
                dweights: w_out,
                weighted,
            }));
            set(newcomm, l.add_comm(obj), "newcomm")?;
            Ok(())
        })
    }

    fn MPI_Dist_graph_neighbors_count, PMPI_Dist_graph_neighbors_count(comm: Handle, indegree: *mut c_int, outdegree: *mut c_int, weighted: *mut c_int) -> c_int {
        run(comm, "MPI_Dist_graph_neighbors_count", |l| {
            match topo_of(&*l.comm(comm)?).as_deref() {
                Some(Topo::Dist { sources, dests, weighted: w, .. }) => {
                    set(indegree, sources.len() as c_int, "indegree")?;
                    set(outdegree, dests.len() as c_int, "outdegree")?;
                    set(weighted, *w as c_int, "weighted")?;
                    Ok(())
                }
                _ => no_topo("distributed graph"),
            }
        })
    }

    fn MPI_Dist_graph_neighbors, PMPI_Dist_graph_neighbors(comm: Handle, maxin: c_int, sources: *mut c_int, sweights: *mut c_int, maxout: c_int, dests: *mut c_int, dweights: *mut c_int) -> c_int {
        run(comm, "MPI_Dist_graph_neighbors", |l| {
            match topo_of(&*l.comm(comm)?).as_deref() {
                Some(Topo::Dist { sources: s, sweights: sw, dests: d, dweights: dw, weighted }) => {
                    let (ni, no) = (count(maxin)?.min(s.len()), count(maxout)?.min(d.len()));
                    array_mut(sources, ni, "sources")?.copy_from_slice(&s[..ni]);
                    array_mut(dests, no, "destinations")?.copy_from_slice(&d[..no]);
                    if *weighted && !unweighted(sweights) {
                        array_mut(sweights, ni, "sourceweights")?.copy_from_slice(&sw[..ni]);
                    }
                    if *weighted && !unweighted(dweights) {
                        array_mut(dweights, no, "destweights")?.copy_from_slice(&dw[..no]);
                    }
                    Ok(())
                }
                _ => no_topo("distributed graph"),
            }
        })
    }

    fn MPI_Neighbor_allgather, PMPI_Neighbor_allgather(s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rc: c_int, rt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Neighbor_allgather", |l| {
            let (ni, no) = degrees(l, comm)?;
            let (rcs, rds, rts) = even(l, ni, rc, rt)?;
            neighbor_w(l, comm, s, &vec![sc; no], &vec![0; no], &vec![st; no], r, &rcs, &rds, &rts)
        })
    }

    fn MPI_Neighbor_allgatherv, PMPI_Neighbor_allgatherv(s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Neighbor_allgatherv", |l| {
            let (ni, no) = degrees(l, comm)?;
            let (rcs, rds, rts) = varying(l, ni, rcounts, rdispls, rt)?;
            neighbor_w(l, comm, s, &vec![sc; no], &vec![0; no], &vec![st; no], r, &rcs, &rds, &rts)
        })
    }

    fn MPI_Neighbor_alltoall, PMPI_Neighbor_alltoall(s: *const c_void, sc: c_int, st: Handle, r: *mut c_void, rc: c_int, rt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Neighbor_alltoall", |l| {
            let (ni, no) = degrees(l, comm)?;
            let (scs, sds, sts) = even(l, no, sc, st)?;
            let (rcs, rds, rts) = even(l, ni, rc, rt)?;
            neighbor_w(l, comm, s, &scs, &sds, &sts, r, &rcs, &rds, &rts)
        })
    }

    fn MPI_Neighbor_alltoallv, PMPI_Neighbor_alltoallv(s: *const c_void, scounts: *const c_int, sdispls: *const c_int, st: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Neighbor_alltoallv", |l| {
            let (ni, no) = degrees(l, comm)?;
            let (scs, sds, sts) = varying(l, no, scounts, sdispls, st)?;
            let (rcs, rds, rts) = varying(l, ni, rcounts, rdispls, rt)?;
            neighbor_w(l, comm, s, &scs, &sds, &sts, r, &rcs, &rds, &rts)
        })
    }

    fn MPI_Neighbor_alltoallw, PMPI_Neighbor_alltoallw(s: *const c_void, scounts: *const c_int, sdispls: *const Aint, sts: *const Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const Aint, rts: *const Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Neighbor_alltoallw", |l| {
            let (ni, no) = degrees(l, comm)?;
            let arr = |p: *const Aint, n: usize| -> Result<Vec<isize>, Fail> {
                if n == 0 { return Ok(Vec::new()); }
                if p.is_null() { return fail(abi::ERR_ARG, "displacements are a null array"); }
                Ok(std::slice::from_raw_parts(p, n).to_vec())
            };
            let tys = |p: *const Handle, n: usize| -> Result<Vec<Handle>, Fail> {
                if n == 0 { return Ok(Vec::new()); }
                if p.is_null() { return fail(abi::ERR_ARG, "datatypes are a null array"); }
                Ok(std::slice::from_raw_parts(p, n).to_vec())
            };
            neighbor_w(
                l, comm,
                s, array(scounts, no, "sendcounts")?, &arr(sdispls, no)?, &tys(sts, no)?,
                r, array(rcounts, ni, "recvcounts")?, &arr(rdispls, ni)?, &tys(rts, ni)?,
            )
        })
    }
}

/// `MPI_Topo_test`'s answer for `c`.
pub(crate) fn kind(c: &CommObj) -> c_int {
    match topo_of(c).as_deref() {
        Some(Topo::Cart { .. }) => abi::CART,
        Some(Topo::Graph { .. }) => abi::GRAPH,
        Some(Topo::Dist { .. }) => abi::DIST_GRAPH,
        None => abi::UNDEFINED,
    }
}
