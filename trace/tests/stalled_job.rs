//! A job with a deliberate stall, traced end to end: every rank's flight
//! recorder is written at the end (`Config::trace_dir`, what
//! `TANDEM_TRACE=dir` sets), the files are merged, the merged document is
//! checked against the trace-event rules, and the arrows and the stall are
//! looked for where they must be.
//!
//! `TANDEM_TRACE_SVG=path cargo test -p tandem-trace --test stalled_job`
//! also draws the merged trace (how docs/trace-stalled-job.svg was made).

use serde_json::Value;
use std::time::Duration;
use tandem_driver::{Comm, Config, Layout};

const STALL: Duration = Duration::from_millis(30);

/// Three ranks: 0 and 1 ping-pong eight bytes five times (tags 10-14);
/// then rank 0 sends 256 KiB (a rendezvous) to rank 2, which computes for
/// 30 ms first; rank 1 goes straight to the barrier; all meet there.
fn run_job(dir: &std::path::Path) {
    let cfg = Config::default().trace_dir(Some(dir.to_path_buf()));
    let out = Comm::threads(3, &Layout::default(), cfg, |comm| {
        let mut b = [0u8; 8];
        for i in 0..5u32 {
            match comm.rank() {
                0 => {
                    comm.send(&[i as u8; 8], 1, 10 + i)?;
                    comm.recv(&mut b, 1, 10 + i)?;
                }
                1 => {
                    comm.recv(&mut b, 0, 10 + i)?;
                    comm.send(&b, 0, 10 + i)?;
                }
                _ => {}
            }
        }
        comm.annotate("phase 2: big message to rank 2");
        let mut big = vec![1u8; 256 * 1024];
        match comm.rank() {
            0 => comm.send(&big, 2, 99)?,
            2 => {
                std::thread::sleep(STALL);
                comm.recv(&mut big, 0, 99)?;
            }
            _ => {}
        }
        comm.barrier()?;
        Ok(())
    });
    for r in out {
        r.expect("rank");
    }
}

fn arg<'a>(e: &'a Value, k: &str) -> &'a Value {
    &e["args"][k]
}

#[test]
fn a_stalled_job_merges_into_a_valid_trace_with_its_arrows_and_its_stall() {
    let dir = std::env::temp_dir().join(format!("tandem-trace-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    run_job(&dir);
    let ranks = tandem_trace::load_dir(&dir).expect("three rank files");
    assert_eq!(ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1, 2]);
    for r in &ranks {
        let doc = serde_json::json!({"traceEvents": r.events});
        tandem_trace::check(&doc).unwrap_or_else(|e| panic!("rank {}: {e:?}", r.rank));
    }
    let m = tandem_trace::merge(&ranks);
    assert_eq!(m.shift_us, [0.0, 0.0, 0.0], "one host: one clock");
    let stats = tandem_trace::check(&m.doc).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(stats.flows, m.flows);
    let evs = m.doc["traceEvents"].as_array().unwrap();

    // Every arrow starts at a message its sender sent to the arrow's
    // receiver and ends at that message's arrival there: same kind, same
    // sequence number, same tag.
    let at = |pid: u64, ts: f64, dir: &str| {
        evs.iter()
            .find(|e| {
                e["ph"] == "X"
                    && e["pid"] == pid
                    && e["ts"].as_f64() == Some(ts)
                    && arg(e, "dir") == dir
            })
            .cloned()
    };
    let mut eager_tags = Vec::new();
    for s in evs.iter().filter(|e| e["ph"] == "s") {
        let f = evs
            .iter()
            .find(|e| e["ph"] == "f" && e["id"] == s["id"])
            .expect("a finish for every start");
        let (sp, fp) = (s["pid"].as_u64().unwrap(), f["pid"].as_u64().unwrap());
        let sent = at(sp, s["ts"].as_f64().unwrap(), "sent").expect("arrow starts at a send");
        let got = at(fp, f["ts"].as_f64().unwrap(), "arrived").expect("arrow ends at an arrival");
        assert_eq!(
            arg(&sent, "peer").as_u64(),
            Some(fp),
            "sent to the arrow's end"
        );
        assert_eq!(
            arg(&got, "peer").as_u64(),
            Some(sp),
            "arrived from the arrow's start"
        );
        for k in ["seq", "kind", "tag", "ctx", "len"] {
            assert_eq!(arg(&sent, k), arg(&got, k), "{k} differs: {sent} / {got}");
        }
        assert!(
            f["ts"].as_f64() >= s["ts"].as_f64(),
            "arrives after it was sent"
        );
        if arg(&sent, "kind") == "eager" && arg(&sent, "ctx") == 0 {
            eager_tags.push((sp, fp, arg(&sent, "tag").as_u64().unwrap()));
        }
    }
    for i in 10..15 {
        assert!(
            eager_tags.contains(&(0, 1, i)),
            "0 -> 1 tag {i}: {eager_tags:?}"
        );
        assert!(
            eager_tags.contains(&(1, 0, i)),
            "1 -> 0 tag {i}: {eager_tags:?}"
        );
    }
    let rts = evs
        .iter()
        .any(|e| e["ph"] == "s" && e["pid"] == 0 && e["name"].as_str() == Some("RTS tag 99"));
    assert!(rts, "the rendezvous request 0 -> 2 is an arrow");

    // The stall: rank 0's send to rank 2 waited for the receiver, named
    // so, and (causally: the send can only finish once rank 2 matched it)
    // it ended no earlier than rank 2 posted its receive after computing.
    // Its length is not asserted: under load the sender may reach its
    // wait late.
    let stall = evs
        .iter()
        .find(|e| {
            e["cat"] == "stall"
                && e["pid"] == 0
                && e["name"].as_str().is_some_and(|n| n.contains("send to 2"))
        })
        .expect("rank 0's stall on rank 2");
    let dur_us = stall["dur"].as_f64().unwrap();
    assert!(
        stall["name"].as_str().unwrap().contains("clear-to-send"),
        "names why: {stall}"
    );
    let posted = evs
        .iter()
        .find(|e| e["pid"] == 2 && e["name"] == "post recv from 0" && arg(e, "tag") == 99)
        .expect("rank 2 posted its receive");
    let end = stall["ts"].as_f64().unwrap() + dur_us;
    assert!(end >= posted["ts"].as_f64().unwrap(), "{stall} / {posted}");
    // Collectives are spans; the user's mark is there on every rank.
    for r in 0..3u64 {
        assert!(evs
            .iter()
            .any(|e| e["pid"] == r && e["cat"] == "collective" && e["name"] == "barrier"));
        assert!(evs.iter().any(|e| e["pid"] == r
            && e["cat"] == "mark"
            && e["name"] == "phase 2: big message to rank 2"));
    }
    let svg = tandem_trace::svg(
        &m.doc,
        1200,
        Some(dur_us.max(STALL.as_micros() as f64) * 1.6),
    )
    .expect("drawn");
    roxmltree::Document::parse(&svg).expect("well-formed SVG");
    if let Some(p) = std::env::var_os("TANDEM_TRACE_SVG") {
        std::fs::write(p, svg).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two hosts' clocks: a rank whose monotonic clock is 5 ms off, and whose
/// wall clock disagrees by 0.2 ms more, is put back within a microsecond
/// from the messages' fastest delays each way.
#[test]
fn another_hosts_clock_is_corrected_from_the_messages() {
    let off_us = 5000.0;
    let doc = |rank: u64, boot: &str, mono: f64, real: f64, evs: Vec<Value>| {
        serde_json::json!({"traceEvents": evs, "otherData": {"tandem": {
            "rank": rank, "host": boot, "boot_id": boot,
            "mono_start_ns": mono, "real_start_ns": real}}})
    };
    let msg = |pid: u64, peer: u64, ts: f64, dir: &str, seq: u64| {
        serde_json::json!({"ph": "X", "pid": pid, "tid": 0, "ts": ts, "dur": 0.01,
            "name": "m", "cat": "message",
            "args": {"peer": peer, "seq": seq, "kind": "eager", "tag": 1, "ctx": 0,
                     "len": 8, "dir": dir}})
    };
    // True one-way delay 2 us each way; rank 1's clock reads off_us more.
    let mut e0 = Vec::new();
    let mut e1 = Vec::new();
    for k in 0..10u64 {
        let t = 100.0 + 10.0 * k as f64;
        e0.push(msg(0, 1, t, "sent", k));
        e1.push(msg(1, 0, t + 2.0 + off_us + (k % 3) as f64, "arrived", k));
        e1.push(msg(1, 0, t + 5.0 + off_us, "sent", k));
        e0.push(msg(0, 1, t + 7.0 + (k % 2) as f64, "arrived", k));
    }
    let r0 = tandem_trace::RankTrace::from_doc(doc(0, "a", 0.0, 1e12, e0)).unwrap();
    // Its wall clock says the offset is off_us + 200 us: wrong by 200 us.
    let r1 =
        tandem_trace::RankTrace::from_doc(doc(1, "b", 0.0, 1e12 - (off_us + 200.0) * 1000.0, e1))
            .unwrap();
    let m = tandem_trace::merge(&[r0, r1]);
    assert_eq!(m.flows, 20);
    assert!((m.shift_us[1] + off_us).abs() < 1.0, "{:?}", m.shift_us);
    tandem_trace::check(&m.doc).unwrap();
}

/// A rank waiting in a receive answers the trace signal (installed by the
/// program, `Comm::trace_on_signal`) while still waiting: its trace shows
/// the open wait, unfinished.
#[test]
fn a_waiting_rank_writes_its_trace_when_signalled() {
    let dir = std::env::temp_dir().join(format!("tandem-trace-signal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Comm::trace_on_signal(libc::SIGUSR1).expect("handler");
    let cfg = Config::default().trace_dir(Some(dir.clone()));
    let file = dir.join("rank-1.json");
    let out = Comm::threads(2, &Layout::default(), cfg, |comm| {
        let mut b = [0u8; 8];
        if comm.rank() == 1 {
            comm.recv(&mut b, 0, 5)?;
            return Ok(None);
        }
        // Rank 1 is in its receive by now or soon; ask until it answers.
        let t = std::time::Instant::now();
        let mut doc = None;
        while doc.is_none() && t.elapsed() < Duration::from_secs(20) {
            // SAFETY: raising a signal whose handler only counts.
            unsafe { libc::raise(libc::SIGUSR1) };
            std::thread::sleep(Duration::from_millis(20));
            doc = std::fs::read_to_string(&file).ok();
        }
        comm.send(&b, 1, 5)?;
        Ok(doc)
    });
    let text = out[0]
        .as_ref()
        .expect("rank 0")
        .clone()
        .expect("rank 1 wrote its trace while waiting");
    let doc: Value = serde_json::from_str(&text).unwrap();
    tandem_trace::check(&doc).unwrap();
    let open = doc["traceEvents"].as_array().unwrap().iter().any(|e| {
        e["cat"] == "stall"
            && e["args"]["finished"] == false
            && e["name"]
                .as_str()
                .is_some_and(|n| n.contains("no message (recv from 0)"))
    });
    assert!(open, "the open wait is in the trace: {text}");
    out[1].as_ref().expect("rank 1");
    let _ = std::fs::remove_dir_all(&dir);
}
