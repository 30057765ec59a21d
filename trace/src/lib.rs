//! Job traces from tandem's flight recorders.
//!
//! Each rank of a tandem job can write its flight recorder as a
//! trace-event file, `rank-<r>.json` (`TANDEM_TRACE=dir`, or
//! `Comm::write_trace`). This crate puts a job's files on one time line
//! ([`merge`]), checks a document against the trace-event format's rules
//! ([`check`]) and draws one as SVG ([`svg`]); the `tandem-trace` binary
//! does the same from the command line.
//!
//! **Clocks.** Ranks whose files carry the same kernel boot id share one
//! monotonic clock and need no correction. Another host's ranks are first
//! placed with the wall clocks both recorded at start, then corrected from
//! the job's own messages, as NTP corrects from a ping-pong: with `d1` the
//! smallest send-to-arrival delay seen from the reference host to the
//! other and `d2` the smallest the other way, the other host's clock is
//! off by `(d1 - d2) / 2`, assuming the fastest message takes as long either
//! way.

#![warn(missing_docs)]

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// The message kinds that carry a per-peer sequence number, drawn as
/// arrows from the send to the arrival.
const MATCHING: [&str; 3] = ["eager", "eager-sync", "RTS"];

/// One rank's trace file.
#[derive(Debug, Clone)]
pub struct RankTrace {
    /// The rank.
    pub rank: u64,
    /// The host's name.
    pub host: String,
    /// The kernel's boot id (ranks with the same one share a clock).
    pub boot_id: String,
    /// Monotonic and wall-clock time when its recorder started, in ns.
    pub mono_start_ns: f64,
    /// See `mono_start_ns`.
    pub real_start_ns: f64,
    /// Its trace events.
    pub events: Vec<Value>,
    /// Where its times came from the CPU's time-stamp counter: the counter
    /// at the start and the nanoseconds per tick the rank measured.
    pub tsc: Option<(f64, f64)>,
    /// How long its recorder ran before the file was written, in ns (the
    /// span its tick rate was measured over).
    pub span_ns: f64,
}

impl RankTrace {
    /// Reads one rank's document.
    ///
    /// # Errors
    /// A message naming what is missing when `doc` is not a tandem rank
    /// trace.
    pub fn from_doc(doc: Value) -> Result<Self, String> {
        let meta = doc
            .pointer("/otherData/tandem")
            .ok_or("not a tandem rank trace (no otherData.tandem)")?;
        let num = |k: &str| {
            meta.get(k)
                .and_then(Value::as_f64)
                .ok_or(format!("otherData.tandem.{k} missing"))
        };
        let text = |k: &str| {
            meta.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let events = match doc.get("traceEvents") {
            Some(Value::Array(a)) => a.clone(),
            _ => return Err("no traceEvents array".into()),
        };
        let tsc = match (
            meta.get("clock").and_then(Value::as_str),
            num("tsc_start"),
            num("ns_per_tick"),
        ) {
            (Some("tsc"), Ok(t), Ok(k)) if k > 0.0 => Some((t, k)),
            _ => None,
        };
        Ok(Self {
            tsc,
            span_ns: num("mono_now_ns").unwrap_or(0.0) - num("mono_start_ns").unwrap_or(0.0),
            rank: num("rank")? as u64,
            host: text("host"),
            boot_id: text("boot_id"),
            mono_start_ns: num("mono_start_ns")?,
            real_start_ns: num("real_start_ns")?,
            events,
        })
    }
}

/// Reads every `rank-<r>.json` in `dir`, in rank order.
///
/// # Errors
/// A message naming the file that could not be read or parsed, or saying
/// that there was none.
pub fn load_dir(dir: &Path) -> Result<Vec<RankTrace>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for ent in rd {
        let p = ent.map_err(|e| e.to_string())?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with("rank-") && name.ends_with(".json")) {
            continue;
        }
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let doc: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
        out.push(RankTrace::from_doc(doc).map_err(|e| format!("{}: {e}", p.display()))?);
    }
    if out.is_empty() {
        return Err(format!("no rank-<r>.json in {}", dir.display()));
    }
    out.sort_by_key(|r| r.rank);
    Ok(out)
}

/// A merged job trace.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The trace-event document.
    pub doc: Value,
    /// Messages drawn as arrows.
    pub flows: usize,
    /// Matching messages sent whose arrival is not in the traces (still in
    /// flight, or the receiver's recorder had wrapped).
    pub unmatched: usize,
    /// Microseconds added to each rank's times, in the order given.
    pub shift_us: Vec<f64>,
}

/// A message event of one rank: the index of the event in its list.
#[derive(Debug, Clone, Copy)]
struct Msg {
    rank: usize,
    at: usize,
    ts: f64,
}

fn arg<'a>(e: &'a Value, k: &str) -> Option<&'a Value> {
    e.get("args").and_then(|a| a.get(k))
}

/// The key that finds a message on both sides: sender, receiver, kind and
/// the sender's per-peer sequence number.
fn msg_key(e: &Value, rank: u64) -> Option<(bool, (u64, u64, String, u64))> {
    let dir = arg(e, "dir")?.as_str()?;
    let kind = arg(e, "kind")?.as_str()?;
    if !MATCHING.contains(&kind) {
        return None;
    }
    let peer = arg(e, "peer")?.as_u64()?;
    let seq = arg(e, "seq")?.as_u64()?;
    match dir {
        "sent" => Some((true, (rank, peer, kind.to_string(), seq))),
        "arrived" => Some((false, (peer, rank, kind.to_string(), seq))),
        _ => None,
    }
}

/// Ranks of one host whose times came from the time-stamp counter (one
/// counter for the whole host) are put on the counter conversion of the
/// rank that measured its tick rate longest: each rank's own conversion is
/// off by a little (its tick rate measured over its own span), enough to
/// show a fast message arriving before it was sent.
fn one_counter_per_host(ranks: &[RankTrace]) -> Vec<RankTrace> {
    let mut out = ranks.to_vec();
    for r in out.iter_mut() {
        let Some((t_r, k_r)) = r.tsc else { continue };
        let best = ranks
            .iter()
            .filter(|q| q.tsc.is_some() && !q.boot_id.is_empty() && q.boot_id == r.boot_id)
            .max_by(|a, b| a.span_ns.total_cmp(&b.span_ns));
        let Some(q) = best else { continue };
        let (t_q, k_q) = q.tsc.expect("filtered");
        let (m_r, m_q) = (r.mono_start_ns, q.mono_start_ns);
        // ns on r's conversion -> ticks -> ns on q's.
        let map = |us: f64| {
            let ticks = t_r + (us * 1000.0 - m_r) / k_r;
            (m_q + (ticks - t_q) * k_q) / 1000.0
        };
        for e in r.events.iter_mut() {
            if let Some(ts) = e.get("ts").and_then(Value::as_f64) {
                e["ts"] = json!(map(ts));
            }
        }
    }
    out
}

/// Puts `ranks` on one time line and adds an arrow per message.
pub fn merge(ranks: &[RankTrace]) -> Merged {
    let ranks = &one_counter_per_host(ranks)[..];
    let n = ranks.len();
    // Clock groups: one per boot id (a rank without one is its own).
    let group_of: Vec<String> = ranks
        .iter()
        .map(|r| {
            if r.boot_id.is_empty() {
                format!("rank {}", r.rank)
            } else {
                r.boot_id.clone()
            }
        })
        .collect();
    // First placement: through the wall clock, relative to the first rank.
    let wall = |r: &RankTrace| (r.real_start_ns - r.mono_start_ns) / 1000.0;
    let mut shift: Vec<f64> = ranks.iter().map(|r| wall(r) - wall(&ranks[0])).collect();
    for i in 0..n {
        if group_of[i] == group_of[0] {
            shift[i] = 0.0;
        }
    }
    // Messages of both sides, by key.
    let ts_of = |e: &Value| e.get("ts").and_then(Value::as_f64);
    let mut sends: HashMap<(u64, u64, String, u64), Vec<Msg>> = HashMap::new();
    let mut arrivals: Vec<((u64, u64, String, u64), Msg)> = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        for (at, e) in r.events.iter().enumerate() {
            let (Some((sent, key)), Some(ts)) = (msg_key(e, r.rank), ts_of(e)) else {
                continue;
            };
            let m = Msg { rank: i, at, ts };
            if sent {
                sends.entry(key).or_default().push(m);
            } else {
                arrivals.push((key, m));
            }
        }
    }
    // Correct every other clock group against the first, from the fastest
    // message each way (both directions needed).
    let mut groups: Vec<String> = Vec::new();
    for g in &group_of {
        if !groups.contains(g) {
            groups.push(g.clone());
        }
    }
    for g in groups.iter().skip(1) {
        let (mut d1, mut d2) = (f64::INFINITY, f64::INFINITY);
        for (key, a) in &arrivals {
            let Some(ss) = sends.get(key) else { continue };
            for s in ss {
                let (sg, ag) = (&group_of[s.rank], &group_of[a.rank]);
                let delay = (a.ts + shift[a.rank]) - (s.ts + shift[s.rank]);
                if sg == &group_of[0] && ag == g {
                    d1 = d1.min(delay);
                } else if sg == g && ag == &group_of[0] {
                    d2 = d2.min(delay);
                }
            }
        }
        if d1.is_finite() && d2.is_finite() {
            let fix = (d2 - d1) / 2.0;
            for i in 0..n {
                if &group_of[i] == g {
                    shift[i] += fix;
                }
            }
        }
    }
    // Pair each arrival with the latest send of its key at or before it
    // (clock error allowed between hosts), each send used once.
    for v in sends.values_mut() {
        v.sort_by(|a, b| (a.ts + shift[a.rank]).total_cmp(&(b.ts + shift[b.rank])));
    }
    arrivals.sort_by(|a, b| (a.1.ts + shift[a.1.rank]).total_cmp(&(b.1.ts + shift[b.1.rank])));
    let mut used: HashSet<(usize, usize)> = HashSet::new();
    let mut pairs: Vec<(Msg, Msg)> = Vec::new();
    for (key, a) in &arrivals {
        let Some(ss) = sends.get(key) else { continue };
        let slack = if group_of[a.rank] == group_of[ss[0].rank] {
            0.0
        } else {
            50.0
        };
        let at = a.ts + shift[a.rank];
        let best = ss
            .iter()
            .rev()
            .find(|s| s.ts + shift[s.rank] <= at + slack && !used.contains(&(s.rank, s.at)));
        if let Some(s) = best {
            used.insert((s.rank, s.at));
            pairs.push((*s, *a));
        }
    }
    let sent_total: usize = sends.values().map(Vec::len).sum();
    // The merged document: every rank's events shifted, then the arrows.
    let mut out = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        for e in &r.events {
            let mut e = e.clone();
            if let Some(ts) = ts_of(&e) {
                e["ts"] = json!(ts + shift[i]);
            }
            out.push(e);
        }
    }
    for (id, (s, a)) in pairs.iter().enumerate() {
        let se = &ranks[s.rank].events[s.at];
        let name = format!(
            "{} tag {}",
            arg(se, "kind").and_then(Value::as_str).unwrap_or("message"),
            arg(se, "tag").and_then(Value::as_u64).unwrap_or(0)
        );
        let (sp, ap) = (ranks[s.rank].rank, ranks[a.rank].rank);
        out.push(json!({"ph": "s", "id": id, "cat": "flow", "name": name,
                        "pid": sp, "tid": 0, "ts": s.ts + shift[s.rank]}));
        out.push(
            json!({"ph": "f", "bp": "e", "id": id, "cat": "flow", "name": name,
                        "pid": ap, "tid": 0, "ts": a.ts + shift[a.rank]}),
        );
    }
    let mut other = Map::new();
    other.insert(
        "tandem_merge".into(),
        json!({
            "ranks": ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
            "hosts": ranks.iter().map(|r| r.host.clone()).collect::<Vec<_>>(),
            "shift_us": shift,
            "flows": pairs.len(),
        }),
    );
    Merged {
        doc: json!({"traceEvents": out, "displayTimeUnit": "ns", "otherData": other}),
        flows: pairs.len(),
        unmatched: sent_total - pairs.len(),
        shift_us: shift,
    }
}

/// What [`check`] counted in a valid document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Events in all.
    pub events: usize,
    /// Complete slices (`"X"`) per category.
    pub slices: BTreeMap<String, usize>,
    /// Flow arrows (a start and a finish sharing an id).
    pub flows: usize,
    /// Instant events.
    pub instants: usize,
}

/// Checks `doc` against the trace-event format's rules as Chrome's and
/// Perfetto's importers apply them: an object with a `traceEvents` array;
/// every event an object with a known one-letter `ph`, a `name`, integer
/// `pid` and `tid`; a non-negative number `ts` on every event but
/// metadata; `dur` non-negative on complete events; an instant's scope one
/// of `g`, `p`, `t`; begin and end events balanced per thread; every flow
/// id with exactly one start (`s`) and one finish (`f`, binding `e` if
/// given), of one category and name, the finish not before the start.
///
/// # Errors
/// Every rule broken, one line each (up to 20).
pub fn check(doc: &Value) -> Result<Stats, Vec<String>> {
    let mut errs = Vec::new();
    let Some(evs) = doc.get("traceEvents").and_then(Value::as_array) else {
        return Err(vec!["no traceEvents array at the top level".into()]);
    };
    let mut st = Stats {
        events: evs.len(),
        ..Stats::default()
    };
    let mut depth: HashMap<(u64, u64), i64> = HashMap::new();
    let mut flows: HashMap<String, (Vec<&Value>, Vec<&Value>)> = HashMap::new();
    for (i, e) in evs.iter().enumerate() {
        let mut bad = |m: String| errs.push(format!("event {i}: {m}"));
        let Some(o) = e.as_object() else {
            bad("not an object".into());
            continue;
        };
        let ph = o.get("ph").and_then(Value::as_str).unwrap_or("");
        if ![
            "B", "E", "X", "i", "I", "C", "b", "n", "e", "s", "t", "f", "M", "P", "O", "N", "D",
        ]
        .contains(&ph)
        {
            bad(format!("unknown phase {ph:?}"));
            continue;
        }
        if o.get("name").and_then(Value::as_str).is_none() && ph != "E" {
            bad("no name".into());
        }
        let (pid, tid) = (
            o.get("pid").and_then(Value::as_u64),
            o.get("tid").and_then(Value::as_u64),
        );
        if pid.is_none() || (tid.is_none() && ph != "M") {
            bad("pid and tid must be non-negative integers".into());
        }
        if ph != "M" {
            match o.get("ts").and_then(Value::as_f64) {
                Some(t) if t >= 0.0 => {}
                _ => bad("ts must be a non-negative number".into()),
            }
        }
        let key = (pid.unwrap_or(0), tid.unwrap_or(0));
        match ph {
            "X" => {
                match o.get("dur").and_then(Value::as_f64) {
                    Some(d) if d >= 0.0 => {}
                    _ => bad("a complete event needs a non-negative dur".into()),
                }
                let cat = o
                    .get("cat")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                *st.slices.entry(cat).or_default() += 1;
            }
            "B" => *depth.entry(key).or_default() += 1,
            "E" => {
                let d = depth.entry(key).or_default();
                *d -= 1;
                if *d < 0 {
                    bad("an end without a begin".into());
                }
            }
            "i" | "I" => {
                st.instants += 1;
                if let Some(s) = o.get("s") {
                    if !matches!(s.as_str(), Some("g" | "p" | "t")) {
                        bad(format!("instant scope {s} is not g, p or t"));
                    }
                }
            }
            "s" | "f" | "t" => {
                let Some(id) = o.get("id") else {
                    bad("a flow event needs an id".into());
                    continue;
                };
                if ph == "f" {
                    if let Some(bp) = o.get("bp") {
                        if bp.as_str() != Some("e") {
                            bad(format!("flow binding point {bp} is not \"e\""));
                        }
                    }
                }
                let ent = flows.entry(id.to_string()).or_default();
                match ph {
                    "s" => ent.0.push(e),
                    "f" => ent.1.push(e),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    for ((pid, tid), d) in depth {
        if d != 0 {
            errs.push(format!(
                "pid {pid} tid {tid}: {d} begin events without an end"
            ));
        }
    }
    for (id, (s, f)) in &flows {
        if s.len() != 1 || f.len() != 1 {
            errs.push(format!(
                "flow {id}: {} starts and {} finishes",
                s.len(),
                f.len()
            ));
            continue;
        }
        let same = |k: &str| s[0].get(k) == f[0].get(k);
        if !same("cat") || !same("name") {
            errs.push(format!("flow {id}: start and finish differ in cat or name"));
        }
        let t = |e: &Value| e.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
        if t(f[0]) < t(s[0]) {
            errs.push(format!("flow {id}: finishes before it starts"));
        }
        st.flows += 1;
    }
    if errs.is_empty() {
        Ok(st)
    } else {
        errs.truncate(20);
        Err(errs)
    }
}

/// Draws a merged trace as SVG, `width` pixels wide: a lane per rank
/// (messages above, calls below), slices as bars (stalls red, collectives
/// blue, waits grey), messages as arrows, marks as ticks with their text.
/// Only the last `window_us` microseconds are drawn when given.
///
/// # Errors
/// What the drawing backend reported.
pub fn svg(doc: &Value, width: u32, window_us: Option<f64>) -> Result<String, String> {
    use plotters::prelude::*;
    let evs = doc
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or("no traceEvents")?;
    let ts = |e: &Value| e.get("ts").and_then(Value::as_f64);
    let pid = |e: &Value| e.get("pid").and_then(Value::as_u64).unwrap_or(0);
    let ph = |e: &Value| {
        e.get("ph")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let timed: Vec<&Value> = evs.iter().filter(|e| ph(e) != "M").collect();
    let end = timed
        .iter()
        .filter_map(|e| Some(ts(e)? + e.get("dur").and_then(Value::as_f64).unwrap_or(0.0)))
        .fold(f64::MIN, f64::max);
    let first = timed.iter().filter_map(|e| ts(e)).fold(f64::MAX, f64::min);
    if !end.is_finite() || !first.is_finite() {
        return Err("no timed events".into());
    }
    let start = window_us.map_or(first, |w| (end - w).max(first));
    let mut ranks: Vec<u64> = evs.iter().map(pid).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let names: HashMap<u64, String> = evs
        .iter()
        .filter(|e| ph(e) == "M" && e.get("name").and_then(Value::as_str) == Some("process_name"))
        .filter_map(|e| Some((pid(e), e.pointer("/args/name")?.as_str()?.to_string())))
        .collect();
    let lane_h = 90i32;
    let (left, top) = (150i32, 40i32);
    let height = top as u32 + lane_h as u32 * ranks.len() as u32 + 40;
    let plot_w = width as f64 - left as f64 - 20.0;
    let span = (end - start).max(1e-3);
    let x = |t: f64| left + ((t - start) / span * plot_w) as i32;
    let row = |p: u64| ranks.iter().position(|&r| r == p).unwrap_or(0) as i32;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.fill(&WHITE).map_err(err)?;
        let font = ("sans-serif", 13).into_font();
        let small = ("sans-serif", 11).into_font();
        root.draw(&Text::new(
            format!(
                "tandem job trace: last {:.0} us, {} ranks",
                span,
                ranks.len()
            ),
            (10, 10),
            font.clone(),
        ))
        .map_err(err)?;
        for (i, p) in ranks.iter().enumerate() {
            let y = top + i as i32 * lane_h;
            let label = names.get(p).cloned().unwrap_or(format!("rank {p}"));
            root.draw(&Text::new(label, (10, y + 30), font.clone()))
                .map_err(err)?;
            root.draw(&PathElement::new(
                vec![(left, y + lane_h - 5), (width as i32 - 20, y + lane_h - 5)],
                RGBColor(220, 220, 220),
            ))
            .map_err(err)?;
        }
        // Axis: time in microseconds from the window's start.
        for k in 0..=5 {
            let t = start + span * k as f64 / 5.0;
            let xx = x(t);
            root.draw(&Text::new(
                format!("{:.0} us", t - start),
                (xx - 10, height as i32 - 25),
                small.clone(),
            ))
            .map_err(err)?;
        }
        for e in &timed {
            let Some(t0) = ts(e) else { continue };
            let y = top + row(pid(e)) * lane_h;
            let cat = e.get("cat").and_then(Value::as_str).unwrap_or("");
            let name = e.get("name").and_then(Value::as_str).unwrap_or("");
            match ph(e).as_str() {
                "X" => {
                    let t1 = t0 + e.get("dur").and_then(Value::as_f64).unwrap_or(0.0);
                    if t1 < start {
                        continue;
                    }
                    let (color, y0) = match cat {
                        "stall" => (RGBColor(214, 39, 40), y + 45),
                        "collective" => (RGBColor(31, 119, 180), y + 62),
                        _ => (RGBColor(90, 90, 90), y + 12),
                    };
                    let (a, b) = (x(t0.max(start)), x(t1).max(x(t0.max(start)) + 2));
                    root.draw(&Rectangle::new([(a, y0), (b, y0 + 14)], color.filled()))
                        .map_err(err)?;
                    if cat != "message" && b - a > 60 {
                        let text: String = name.chars().take(((b - a) / 7) as usize).collect();
                        root.draw(&Text::new(
                            text,
                            (a + 3, y0 + 1),
                            small.clone().color(&WHITE),
                        ))
                        .map_err(err)?;
                    }
                }
                "i" if cat == "mark" && t0 >= start => {
                    let xx = x(t0);
                    root.draw(&PathElement::new(vec![(xx, y + 5), (xx, y + 40)], BLACK))
                        .map_err(err)?;
                    root.draw(&Text::new(
                        name.to_string(),
                        (xx + 3, y + 28),
                        small.clone(),
                    ))
                    .map_err(err)?;
                }
                _ => {}
            }
        }
        // Arrows: start to finish of each flow id.
        let mut starts: HashMap<String, (f64, u64)> = HashMap::new();
        for e in &timed {
            if ph(e) == "s" {
                if let (Some(id), Some(t)) = (e.get("id"), ts(e)) {
                    starts.insert(id.to_string(), (t, pid(e)));
                }
            }
        }
        for e in &timed {
            if ph(e) != "f" {
                continue;
            }
            let (Some(id), Some(t1)) = (e.get("id"), ts(e)) else {
                continue;
            };
            let Some(&(t0, p0)) = starts.get(&id.to_string()) else {
                continue;
            };
            if t1 < start || t0 < start {
                continue;
            }
            let (y0, y1) = (top + row(p0) * lane_h + 19, top + row(pid(e)) * lane_h + 12);
            root.draw(&PathElement::new(
                vec![(x(t0), y0), (x(t1), y1)],
                RGBColor(44, 160, 44).stroke_width(1),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}
