//! `Comm::register`: rendezvous on a registered buffer makes no new memory
//! registration, and every registration ends with its operation or handle.
//! (Its own test binary: it counts the soft NIC's registrations
//! process-wide.)

use tandem_driver::{Comm, Config, Layout, Links, WaitPolicy};
use tandem_fabric::soft::registrations_total;

#[test]
fn registered_buffers_are_not_registered_again() {
    for links in [Links::Soft, Links::SoftRead] {
        let cfg = Config::default().wait(WaitPolicy::SHARED_CORES);
        let out = Comm::threads_on(2, links, &Layout::default(), cfg, |comm| {
            let peer = 1 - comm.rank();
            let mut buf = vec![0u8; 1 << 20];
            let round = |b: &mut [u8], i: u8| -> tandem_driver::Result<()> {
                if comm.rank() == 0 {
                    b.fill(i);
                    comm.send(b, peer, 1)?;
                    comm.recv(b, peer, 2)?;
                } else {
                    comm.recv(b, peer, 1)?;
                    assert!(b.iter().all(|&x| x == i));
                    comm.send(b, peer, 2)?;
                }
                Ok(())
            };
            // Unregistered: each rendezvous registers (and deregisters).
            let before = registrations_total();
            for i in 0..10 {
                round(&mut buf, i)?;
            }
            let unregistered = registrations_total() - before;
            // Registered once: the rendezvous reuse it, whole or in part.
            let mut reg = comm.register(&mut buf)?;
            // Both ranks have registered before either counts.
            let mut b = [0u8; 1];
            comm.sendrecv(&[1], peer, 3, &mut b, peer, 3)?;
            let pinned = registrations_total();
            for i in 0..10 {
                round(&mut reg, i)?;
                round(&mut reg[4096..], i)?;
            }
            let during = registrations_total() - pinned;
            drop(reg);
            Ok((unregistered, during))
        });
        for (r, o) in out.iter().enumerate() {
            let (unregistered, during) = o.as_ref().unwrap_or_else(|e| panic!("rank {r}: {e}"));
            // Both ranks count the process-wide total: the first figure
            // covers both ranks' rounds, at least 20 registrations.
            assert!(
                *unregistered >= 20,
                "{links:?}: {unregistered} registrations without the handle"
            );
            assert_eq!(*during, 0, "{links:?}: registered buffers registered again");
        }
    }
}

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
