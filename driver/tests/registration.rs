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
