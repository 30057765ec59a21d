//! Which path a message took and what a wait cost, read from
//! [`Comm::counters`] rather than timed: a single-copy pull is told apart
//! from a silent fall-back to streaming, and a receive whose message has
//! already arrived must not wait at all.

use tandem_driver::{Comm, Config, Counters, Layout, WaitPolicy};

const BIG: usize = 256 * 1024;

/// Spins only: a wait that should not happen shows as idle polls (and, had
/// the policy yielded or slept, as yields and sleeps).
fn busy(cma: bool) -> Config {
    let mut c = Config::default().cma(cma);
    c.wait = WaitPolicy::BUSY;
    c.wait.spin = 50_000;
    c.wait.yields = 50_000;
    c
}

fn waited(before: Counters, after: Counters) -> (u64, u64, u64) {
    (
        after.idle_polls - before.idle_polls,
        after.yields - before.yields,
        after.sleeps - before.sleeps,
    )
}

/// Whether this process may read its own memory with `process_vm_readv`
/// (a seccomp filter may forbid the call outright).
fn cma_allowed() -> bool {
    let out = Comm::threads(2, &Layout::default(), busy(true), |comm| {
        let mut buf = vec![3u8; BIG];
        if comm.rank() == 0 {
            comm.send(&buf, 1, 0)?;
        } else {
            comm.recv(&mut buf, 0, 0)?;
        }
        Ok(comm.counters())
    });
    let c = out[1].as_ref().expect("rank 1");
    assert_eq!(c.pulled + c.streamed, 1, "one rendezvous, one path: {c:?}");
    c.pulled == 1
}

/// Rank 1 sends rank 0 a message (`first` bytes, tag 7) and only then
/// receives rank 0's big one; rank 0's blocking send of the big message
/// therefore takes the tag-7 message off the link while it waits (the link
/// is FIFO), storing it as unexpected. Rank 0's receive of it afterwards
/// must find it at once: no poll, yield or sleep. (It once spun the whole
/// spin phase, ~300 us, before looking at the stored messages: the
/// single-copy path's 145 us "stall".)
fn stored_arrival(cma: bool, first: usize) -> Counters {
    let out = Comm::threads(2, &Layout::default(), busy(cma), |comm| {
        let mut big = vec![5u8; BIG];
        let mut small = vec![9u8; first];
        if comm.rank() == 1 {
            comm.scope(|s| {
                let r = s.isend(&small, 0, 7)?;
                comm.recv(&mut big, 0, 1)?;
                r.wait().map(|_| ())
            })??;
            return Ok(None);
        }
        comm.send(&big, 1, 1)?;
        let before = comm.counters();
        let st = comm.recv(&mut small, 1, 7)?;
        let after = comm.counters();
        assert_eq!((st.len, st.tag), (first, 7));
        assert!(small.iter().all(|&b| b == 9), "payload intact");
        let (polls, yields, sleeps) = waited(before, after);
        assert_eq!(
            (polls, yields, sleeps),
            (0, 0, 0),
            "the receive of an already stored {first}-byte message waited \
             (polls, yields, sleeps); cma {cma}"
        );
        Ok(Some(after))
    });
    for (r, o) in out.iter().enumerate() {
        if let Err(e) = o {
            panic!("rank {r}: {e}");
        }
    }
    out.into_iter().next().unwrap().unwrap().unwrap()
}

#[test]
fn stored_eager_message_is_received_without_waiting() {
    for cma in [false, true] {
        for n in [8, 4000] {
            stored_arrival(cma, n);
        }
    }
}

#[test]
fn stored_rendezvous_is_pulled_without_waiting() {
    if !cma_allowed() {
        eprintln!("skipped: process_vm_readv is refused in this process");
        return;
    }
    // Rank 0 receives a rendezvous message whose RTS its send's wait
    // stored: with single copy it is pulled within the call.
    let c = stored_arrival(true, BIG);
    assert_eq!(c.pulled, 1, "{c:?}");
}

#[test]
fn counters_tell_pulled_from_streamed() {
    let allowed = cma_allowed();
    // Single copy from 64 KiB: 32 KiB (above the eager limit) streams,
    // 128 KiB is pulled; with single copy off both stream.
    for cma in [false, true] {
        let cfg = Config {
            cma_min: 64 * 1024,
            ..busy(cma)
        };
        let out = Comm::threads(2, &Layout::default(), cfg, |comm| {
            for n in [32 * 1024, 128 * 1024] {
                let mut buf = vec![1u8; n];
                if comm.rank() == 0 {
                    comm.send(&buf, 1, 0)?;
                } else {
                    comm.recv(&mut buf, 0, 0)?;
                }
            }
            Ok(comm.counters())
        });
        let c = out[1].as_ref().expect("rank 1");
        let want = if cma && allowed { (1, 1) } else { (0, 2) };
        assert_eq!((c.pulled, c.streamed), want, "cma {cma}: {c:?}");
        let s = out[0].as_ref().expect("rank 0");
        assert_eq!(
            (s.pulled, s.streamed),
            (0, 0),
            "the sender counts no receive"
        );
    }
}

/// With the default configuration a rank follows its host's calibrated
/// decision: a payload in the chosen range is pulled (where the kernel
/// allows it), one outside it streamed.
#[test]
fn the_default_follows_the_hosts_calibration() {
    let layout = Layout::default();
    let paths = tandem_driver::calibrate::host_paths(&layout);
    let allowed = cma_allowed();
    let sizes = [16 * 1024, 256 * 1024, 8 << 20];
    let cfg = Config {
        wait: WaitPolicy::BUSY,
        ..Config::default()
    };
    assert!(cfg.cma_auto, "calibrated by default");
    let out = Comm::threads(2, &layout, cfg, |comm| {
        let mut seen = Vec::new();
        for n in sizes {
            let mut buf = vec![2u8; n];
            let before = comm.counters();
            if comm.rank() == 0 {
                comm.send(&buf, 1, 0)?;
            } else {
                comm.recv(&mut buf, 0, 0)?;
            }
            let after = comm.counters();
            seen.push((
                after.pulled - before.pulled,
                after.streamed - before.streamed,
            ));
        }
        Ok(seen)
    });
    let seen = out[1].as_ref().expect("rank 1");
    for (n, got) in sizes.into_iter().zip(seen) {
        let want = if paths.pulls(n) && allowed {
            (1, 0)
        } else {
            (0, 1)
        };
        assert_eq!(*got, want, "{n} bytes with {paths}");
    }
}

/// A busy-polling receive whose message never comes still reaches its
/// deadline: the receive fast path hands over to the general path (which
/// has the deadline) after a bounded number of polls, whatever the spin
/// setting. Before, `WaitPolicy::BUSY` (spin `u32::MAX`) kept a blocking
/// receive in the fast path for ever, and a rendezvous arrival made its
/// poll count wrap around instead of ending the fast path.
#[test]
fn a_busy_receive_still_reaches_its_deadline() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let cfg = Config {
            wait: WaitPolicy::BUSY,
            timeout: std::time::Duration::from_millis(300),
            ..Config::default()
        };
        let out = Comm::threads(2, &Layout::default(), cfg, |comm| {
            if comm.rank() == 1 {
                let mut b = [0u8; 8];
                return Ok(Some(comm.recv(&mut b, 0, 7).map(|_| ())));
            }
            Ok(None)
        });
        let _ = tx.send(format!("{:?}", out[1]));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a busy receive with no sender must fail by its deadline, not spin for ever");
    assert!(got.contains("Timeout") || got.contains("Deadlock"), "{got}");
}

/// With the default configuration a link does not keep the host's choice
/// blindly: every 64th payload of a size class takes the other path, so
/// that a path grown cheaper (the vCPUs moved, the program began writing
/// its buffer before each send) is noticed. Counted, not timed: over 130
/// payloads of one class both paths ran, whichever the host chose and
/// whichever turned out cheaper here.
#[test]
fn the_default_tries_the_other_path_now_and_then() {
    let layout = Layout::default();
    let paths = tandem_driver::calibrate::host_paths(&layout);
    if paths.stream_ps == [0, 0] || !cma_allowed() {
        eprintln!("skipped: this host did not measure both paths ({paths})");
        return;
    }
    let cfg = Config {
        wait: WaitPolicy::BUSY,
        ..Config::default()
    };
    let out = Comm::threads(2, &layout, cfg, |comm| {
        let mut buf = vec![4u8; BIG];
        let before = comm.counters();
        for i in 0..130u32 {
            if comm.rank() == 0 {
                comm.send(&buf, 1, i)?;
            } else {
                comm.recv(&mut buf, 0, i)?;
            }
        }
        let after = comm.counters();
        Ok((
            after.pulled - before.pulled,
            after.streamed - before.streamed,
        ))
    });
    let (pulled, streamed) = *out[1].as_ref().expect("rank 1");
    assert_eq!(pulled + streamed, 130, "one path each");
    assert!(
        pulled >= 1 && streamed >= 1,
        "{pulled} pulled, {streamed} streamed with {paths}"
    );
}

/// Rank 0 sends each of `sizes` to rank 1 (eager payloads); how many went
/// through a cell, per size, by rank 0's counters.
fn cells_used(layout: &Layout, sizes: &[usize]) -> Vec<u64> {
    let cfg = Config {
        wait: WaitPolicy::BUSY,
        ..Config::default()
    };
    let out = Comm::threads(2, layout, cfg, |comm| {
        let mut seen = Vec::new();
        for &n in sizes {
            let mut buf = vec![n as u8; n];
            let before = comm.counters();
            if comm.rank() == 0 {
                comm.send(&buf, 1, 0)?;
            } else {
                let st = comm.recv(&mut buf, 0, 0)?;
                assert_eq!(st.len, n);
                assert!(buf.iter().all(|&b| b == n as u8), "{n} bytes intact");
            }
            comm.barrier()?;
            seen.push(comm.counters().cells - before.cells);
        }
        Ok(seen)
    });
    out.into_iter().next().unwrap().expect("rank 0")
}

/// An eager payload from the host's cell threshold up goes through a cell,
/// a shorter one behind its header in the line ring: by default the
/// threshold this host's calibration chose (the same decision every rank
/// of the host reads from the job file), else the layout's.
#[test]
fn eager_payloads_take_a_cell_from_the_hosts_threshold() {
    let layout = Layout::default();
    assert_eq!(layout.cell_min, 0, "chosen per host by default");
    let eager = layout.eager_limit as usize;
    let paths = tandem_driver::calibrate::host_paths(&layout);
    let from = layout.with_cell_min_chosen(paths.cell_min).cell_min as usize;
    let mut sizes: Vec<usize> = [64, from - 1, from, eager]
        .into_iter()
        .filter(|&n| (64..=eager).contains(&n))
        .collect();
    sizes.dedup();
    let want: Vec<u64> = sizes.iter().map(|&n| u64::from(n >= from)).collect();
    assert_eq!(
        cells_used(&layout, &sizes),
        want,
        "sizes {sizes:?}, cells from {from} B"
    );
    // A threshold set in the layout is used as it is.
    let set = Layout::default().cell_min(128);
    assert_eq!(cells_used(&set, &[100, 127, 128, 4096]), [0, 0, 1, 1]);
    // Above the eager limit: no cells at all.
    let none = Layout::default().cell_min(layout.eager_limit + 1);
    assert_eq!(cells_used(&none, &[64, 1024, eager]), [0, 0, 0]);
}
