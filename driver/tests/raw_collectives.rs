//! The raw non-blocking collectives, as the MPI library uses them
//! (`iallreduce_raw`, `ibroadcast_raw`, `ibarrier_raw`, `iallgather_raw`,
//! `ialltoall_raw`, `ireduce_raw`): results against a sequential
//! reference on 1–4 ranks, in place where the call allows it, and started
//! by one rank before the others join (the call must return at once:
//! rank 0 starts it, then sends the others what they wait for before they
//! start theirs).

use tandem_driver::{Comm, Config, Layout, RawCollRequest, ReduceOp, Result};

/// Rank `r`'s element `i`.
fn val(r: usize, i: usize) -> u64 {
    (r * 100 + i) as u64
}

/// Starts `start` on every rank, rank 0 first: the others wait for its
/// token, which it sends only after its own call returned.
fn started_before_the_others(
    comm: &Comm,
    round: u32,
    start: impl FnOnce() -> Result<RawCollRequest>,
) -> Result<()> {
    let (me, n) = (comm.rank(), comm.size());
    let mut token = [0u8; 1];
    if me != 0 {
        comm.recv(&mut token, 0, round)?;
    }
    let req = start()?;
    if me == 0 {
        for r in 1..n {
            comm.send(&token, r, round)?;
        }
    }
    comm.coll_wait_raw(req)
}

#[test]
fn raw_collectives_match_the_reference_and_return_at_once() {
    for n in 1..=4usize {
        let out = Comm::threads(n, &Layout::default(), Config::default(), |comm| {
            let me = comm.rank();
            let k = 5usize;

            // allgather, then in place.
            let mine: Vec<u64> = (0..k).map(|i| val(me, i)).collect();
            let mut all = vec![0u64; k * n];
            // SAFETY: both buffers live until the wait in the helper.
            started_before_the_others(&comm, 1, || unsafe {
                comm.iallgather_raw(mine.as_ptr(), all.as_mut_ptr(), k)
            })?;
            let want: Vec<u64> = (0..n)
                .flat_map(|r| (0..k).map(move |i| val(r, i)))
                .collect();
            assert_eq!(all, want, "iallgather on {n} ranks");
            let mut inplace = vec![0u64; k * n];
            inplace[me * k..(me + 1) * k].copy_from_slice(&mine);
            // SAFETY: as above.
            started_before_the_others(&comm, 2, || unsafe {
                comm.iallgather_raw(std::ptr::null(), inplace.as_mut_ptr(), k)
            })?;
            assert_eq!(inplace, want, "iallgather in place on {n} ranks");

            // alltoall: block r of rank s holds val(s, r * k + i).
            let send: Vec<u64> = (0..n * k).map(|i| val(me, i)).collect();
            let mut recv = vec![0u64; n * k];
            // SAFETY: as above.
            started_before_the_others(&comm, 3, || unsafe {
                comm.ialltoall_raw(send.as_ptr(), recv.as_mut_ptr(), k)
            })?;
            let want: Vec<u64> = (0..n)
                .flat_map(|s| (0..k).map(move |i| val(s, me * k + i)))
                .collect();
            assert_eq!(recv, want, "ialltoall on {n} ranks");

            // reduce to the last rank, then in place on rank 0.
            let root = n - 1;
            let mut sum = vec![0u64; k];
            // SAFETY: as above; off the root the receive is not used.
            started_before_the_others(&comm, 4, || unsafe {
                let dst = if me == root {
                    sum.as_mut_ptr()
                } else {
                    std::ptr::null_mut()
                };
                comm.ireduce_raw(mine.as_ptr(), dst, k, ReduceOp::Sum, root)
            })?;
            if me == root {
                let want: Vec<u64> = (0..k).map(|i| (0..n).map(|r| val(r, i)).sum()).collect();
                assert_eq!(sum, want, "ireduce to {root} on {n} ranks");
            }
            let mut acc = mine.clone();
            // SAFETY: as above.
            started_before_the_others(&comm, 5, || unsafe {
                let src = if me == 0 {
                    std::ptr::null()
                } else {
                    mine.as_ptr()
                };
                comm.ireduce_raw(src, acc.as_mut_ptr(), k, ReduceOp::Max, 0)
            })?;
            if me == 0 {
                let want: Vec<u64> = (0..k).map(|i| val(n - 1, i)).collect();
                assert_eq!(acc, want, "ireduce in place on {n} ranks");
            }
            // In place is for the root alone.
            if me != 0 {
                // SAFETY: refused before anything is started.
                let r = unsafe {
                    comm.ireduce_raw(std::ptr::null(), acc.as_mut_ptr(), k, ReduceOp::Max, 0)
                };
                assert!(r.is_err(), "in place off the root must be refused");
            }

            // allreduce, broadcast and barrier, the same way.
            let mut red = vec![0u64; k];
            // SAFETY: as above.
            started_before_the_others(&comm, 6, || unsafe {
                comm.iallreduce_raw(mine.as_ptr(), red.as_mut_ptr(), k, ReduceOp::Sum)
            })?;
            let want: Vec<u64> = (0..k).map(|i| (0..n).map(|r| val(r, i)).sum()).collect();
            assert_eq!(red, want, "iallreduce on {n} ranks");
            let mut b = if me == 0 { mine.clone() } else { vec![0u64; k] };
            // SAFETY: as above.
            started_before_the_others(&comm, 7, || unsafe {
                comm.ibroadcast_raw(b.as_mut_ptr(), k, 0)
            })?;
            assert_eq!(
                b,
                (0..k).map(|i| val(0, i)).collect::<Vec<_>>(),
                "ibroadcast on {n} ranks"
            );
            started_before_the_others(&comm, 8, || comm.ibarrier_raw())?;
            Ok(())
        });
        for (r, o) in out.into_iter().enumerate() {
            o.unwrap_or_else(|e| panic!("rank {r} of {n}: {e}"));
        }
    }
}
