//! `Comm::register` on a communicator of some of the job's ranks: the
//! handle ends its registration with every peer. (Its own test binary, as
//! `registration.rs`: it counts the soft NIC's registrations process-wide,
//! so no other test may run beside it.)

use tandem_driver::{Comm, Config, Layout, Links, WaitPolicy};
use tandem_fabric::soft::registrations_total;

/// A handle on a communicator of some of the job's ranks ends the
/// registration with every peer it was made with: rank 1 of the job,
/// rank 0 of a communicator of ranks 1 and 2, drops its handle, and its
/// next rendezvous to rank 2 must register the buffer again (the drop used
/// to end the registration only with world ranks below the communicator's
/// size, 0 and 1, leaving rank 2's link holding it).
#[test]
fn a_dropped_handle_on_a_subset_ends_every_registration() {
    let cfg = Config::default().wait(WaitPolicy::SHARED_CORES);
    let out = Comm::threads_on(3, Links::Soft, &Layout::default(), cfg, |c| {
        let mut buf = vec![7u8; 1 << 20];
        let mut rbuf = vec![0u8; 1 << 20];
        if c.rank() == 0 {
            c.barrier()?;
            c.barrier()?;
            return Ok(None);
        }
        let s = c.subset_with_context(&[1, 2], 300)?;
        let mut held = None;
        if c.rank() == 2 {
            // The receive needs no registration of its own during the count.
            held = Some(s.register(&mut rbuf)?);
        } else {
            drop(s.register(&mut buf)?);
        }
        c.barrier()?;
        let before = registrations_total();
        if let Some(r) = held.as_mut() {
            s.recv(r, 0, 1)?;
            assert!(r.iter().all(|&x| x == 7));
        } else {
            s.send(&buf, 1, 1)?;
        }
        c.barrier()?;
        Ok((c.rank() == 1).then(|| registrations_total() - before))
    });
    let counts: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
    let sent = counts[1].expect("rank 1 counts");
    assert!(
        sent >= 1,
        "the rendezvous reused a registration its handle had ended ({sent} new)"
    );
}
