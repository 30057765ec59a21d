//! ULFM's fault-tolerance extensions, as MPICH exports them:
//! `MPIX_Comm_revoke`, `MPIX_Comm_shrink`, `MPIX_Comm_agree`,
//! `MPIX_Comm_failure_ack`, `MPIX_Comm_failure_get_acked` (and MPICH 4.1's
//! `MPIX_Comm_get_failed`), over the driver's revoke and fault-tolerant
//! agreement ([`tandem_driver::Comm::agree_on`]).
//!
//! A failed peer's operations fail with `MPIX_ERR_PROC_FAILED`, those of a
//! revoked communicator with `MPIX_ERR_REVOKED` (see [`crate::state::class_of`]).
//! Set `MPI_ERRORS_RETURN` on the communicator to see them: under the
//! default `MPI_ERRORS_ARE_FATAL` the first failure ends the program.

use crate::abi::{self, Handle};
use crate::comm::{make, take_two};
use crate::state::{AgreeReq, CommObj, Fail, Lib, Req};
use crate::{export, fail, run, set};
use std::ffi::c_int;
use std::rc::Rc;
use tandem_driver::CONTEXT_WORDS;

/// The members of `c` (job ranks, in its order) at `ranks` of it.
fn job_ranks(c: &CommObj, ranks: &[usize]) -> Rc<[u32]> {
    ranks.iter().map(|&r| c.group[r]).collect()
}

fn shrink(l: &Lib, comm: Handle) -> Result<Handle, Fail> {
    let c = l.comm(comm)?;
    let a = c.members_comm()?.agree_on(u32::MAX, &l.free_ctx.get())?;
    if a.failed.contains(&c.rank) {
        return fail(
            abi::X_ERR_PROC_FAILED,
            "the survivors declared this rank failed (it was silent to them past the \
             failure-detection bound)",
        );
    }
    // (The library keeps the fault-tolerance context out of
    // every rank's free mask.)
    let ctx = take_two(l, a.free)?;
    let group: Rc<[u32]> = (0..c.size())
        .filter(|r| !a.failed.contains(r))
        .map(|r| c.group[r])
        .collect();
    let obj = make(l, group, ctx, &c)?;
    Ok(l.add_comm(obj))
}

fn agree(l: &Lib, comm: Handle, flag: c_int) -> Result<(c_int, bool), Fail> {
    let c = l.comm(comm)?;
    let a = c
        .members_comm()?
        .agree_on(flag as u32, &[u64::MAX; CONTEXT_WORDS])?;
    Ok((a.flags as c_int, unacked(&c, &a.failed)))
}

/// Whether `failed` (ranks of `c`) holds one `MPIX_Comm_failure_ack` has
/// not acknowledged.
pub(crate) fn unacked(c: &CommObj, failed: &[usize]) -> bool {
    let acked = c.acked.borrow();
    failed.iter().any(|&r| !acked.contains(&c.group[r]))
}

/// What an agreement that learned of an unacknowledged failure returns:
/// ULFM's `MPIX_ERR_PROC_FAILED`, the flag agreed all the same.
pub(crate) fn unacked_failure() -> Fail {
    Fail::new(
        abi::X_ERR_PROC_FAILED,
        "a member failed that MPIX_Comm_failure_ack has not acknowledged (the flag is agreed)"
            .into(),
    )
}

export! {
    fn MPIX_Comm_revoke, PMPIX_Comm_revoke(comm: Handle) -> c_int {
        run(comm, "MPIX_Comm_revoke", |l| {
            let c = l.comm(comm)?;
            c.p2p.revoke();
            c.coll.revoke();
            Ok(())
        })
    }

    fn MPIX_Comm_shrink, PMPIX_Comm_shrink(comm: Handle, newcomm: *mut Handle) -> c_int {
        run(comm, "MPIX_Comm_shrink", |l| {
            if newcomm.is_null() {
                return fail(abi::ERR_ARG, "newcomm is NULL");
            }
            set(newcomm, shrink(l, comm)?, "newcomm")?;
            Ok(())
        })
    }

    fn MPIX_Comm_agree, PMPIX_Comm_agree(comm: Handle, flag: *mut c_int) -> c_int {
        run(comm, "MPIX_Comm_agree", |l| {
            if flag.is_null() {
                return fail(abi::ERR_ARG, "flag is NULL");
            }
            // SAFETY: not null; the caller's int, as MPI requires.
            let mine = unsafe { flag.read() };
            let (out, unacked) = agree(l, comm, mine)?;
            set(flag, out, "flag")?;
            if unacked {
                // ULFM: the value is agreed, and the caller learns that a
                // failure it has not acknowledged happened.
                return Err(unacked_failure());
            }
            Ok(())
        })
    }

    fn MPIX_Comm_iagree, PMPIX_Comm_iagree(comm: Handle, flag: *mut c_int, req: *mut Handle) -> c_int {
        run(comm, "MPIX_Comm_iagree", |l| {
            if flag.is_null() {
                return fail(abi::ERR_ARG, "flag is NULL");
            }
            if req.is_null() {
                return fail(abi::ERR_ARG, "request is NULL");
            }
            // SAFETY: not null; the caller's int, as MPI requires (it stays
            // valid until the request completes).
            let mine = unsafe { flag.read() };
            let c = l.comm(comm)?;
            let op = c.members_comm()?.iagree(mine as u32);
            let h = l.add_req(Req::Agree(Box::new(AgreeReq {
                comm: c.clone(),
                op: Some(op),
                flag,
            })));
            set(req, h, "req")?;
            Ok(())
        })
    }

    fn MPIX_Comm_failure_ack, PMPIX_Comm_failure_ack(comm: Handle) -> c_int {
        run(comm, "MPIX_Comm_failure_ack", |l| {
            let c = l.comm(comm)?;
            let failed = c.members_comm()?.failed_ranks();
            *c.acked.borrow_mut() = job_ranks(&c, &failed);
            Ok(())
        })
    }

    fn MPIX_Comm_failure_get_acked, PMPIX_Comm_failure_get_acked(comm: Handle, failedgrp: *mut Handle) -> c_int {
        run(comm, "MPIX_Comm_failure_get_acked", |l| {
            if failedgrp.is_null() {
                return fail(abi::ERR_ARG, "failedgrp is NULL");
            }
            let c = l.comm(comm)?;
            let g = c.acked.borrow().clone();
            set(failedgrp, l.add_group(g), "failedgrp")?;
            Ok(())
        })
    }

    fn MPIX_Comm_get_failed, PMPIX_Comm_get_failed(comm: Handle, failedgrp: *mut Handle) -> c_int {
        run(comm, "MPIX_Comm_get_failed", |l| {
            if failedgrp.is_null() {
                return fail(abi::ERR_ARG, "failedgrp is NULL");
            }
            let c = l.comm(comm)?;
            let failed = c.members_comm()?.failed_ranks();
            set(failedgrp, l.add_group(job_ranks(&c, &failed)), "failedgrp")?;
            Ok(())
        })
    }
}
