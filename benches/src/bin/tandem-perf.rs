//! `tandem-perf`: tandem's performance tool.
//!
//! * `tandem-perf pingpong`: two ranks (separate processes, pinned to
//!   distinct cores when there are enough) bounce messages from 1 B to
//!   64 MiB; median and p99 half round trip and bandwidth per size. The
//!   machine's cross-process cache-line round trip and memcpy bandwidth are
//!   measured first, in the same run, and small-message latency is printed
//!   as a ratio to the one-way cache-line latency.
//! * As ranks of a launched job (`tandem-run --hosts`, `mpirun`,
//!   `mpiexec`, `srun`, `torchrun`), or with `TANDEM_TRANSPORT=tcp` (or
//!   `soft`, `verbs`: RDMA over the soft NIC or a device), the
//!   two ranks may be on different hosts: the raw TCP floor between them
//!   (an 8-byte `TCP_NODELAY` ping-pong and one blocking stream) is
//!   measured before and after the sweep, and results are printed as ratios
//!   to it.
//! * `tandem-perf c2c`: just the machine's limits.
//! * `--plot FILE.svg` (pingpong, bw): the sweep drawn as an SVG,
//!   latency and bandwidth against size on log axes, with the same run's
//!   reference lines dashed (one-way cache line and memcpy over shared
//!   memory, the raw TCP floor over the network); `--compare A.json`
//!   overlays earlier `--json` outputs, labelled by file stem. See
//!   [`tandem_benches::plot`].

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use tandem_benches::c2c::{
    cache_line_round_trip, duplex_ring_round_trip, line_ring_round_trip, memcpy_gbps, C2c,
    InlineC2c,
};
use tandem_benches::collperf::{self, parse_dtype, CollOpts};
use tandem_benches::plot::{Figure, PlotOpts, Series};
use tandem_benches::stats::{fmt_size, parse_size, percentile, sweep};
use tandem_benches::tcp_floor::{self, TcpFloor};
use tandem_driver::{Collective, Comm, Config, Dtype, ReduceOp};

const USAGE: &str = "usage: tandem-perf <pingpong|bw|c2c|gpu-flags|COLLECTIVE> [options]

  pingpong   two ranks: half round trip and bandwidth (over shared memory
             when tandem-perf starts them itself; run it under a launcher,
             e.g. tandem-run -n 2 --hosts a,b, or with TANDEM_TRANSPORT=tcp,
             soft or verbs, for TCP or RDMA, compared with the raw TCP floor
             of the same two ranks)
  bw         two ranks: windows of up to 64 non-blocking sends, then one
             acknowledgement (like osu_bw): streaming bandwidth
  c2c        the machine's cross-process cache-line round trip and memcpy
  gpu-flags  flag-polling handshakes in ns (p50, p99): a kernel and a CPU
             thread through host-mapped memory, two kernels on one GPU,
             each with flag and data apart and in one word (LL), beside
             this run's cache-line floors; --iters round trips (at most
             100000); says why it skipped where there is no GPU
  plot       runs nothing: draws the --compare files into --plot, with
             reference lines from --ref-lat LABEL=US and --ref-bw
             LABEL=GBPS (repeatable), titled by --title, the bandwidth
             axis labelled by --bw-axis
  allreduce, reduce, broadcast, allgather, reduce_scatter, alltoall
             -n ranks (processes, default 2) run the collective from
             --min-size (default 8) to --max-size; nccl-tests' columns:
             size, count, type, redop, root, time (p50 us, slowest rank
             per call), p99, algbw, busbw (GB/s), #wrong; the reduction
             kernel's GB/s beside memcpy's and the same-run cache-line
             and memcpy limits first

options:
  --min-size S    smallest message (default 1; accepts K, M, G)
  --max-size S    largest message (default 64M, at most 1G)
  --iters N       round trips per size for small messages (default 20000)
  --json          print a JSON array of {\"size\",\"p50_us\",\"p99_us\",\"gbps\"}
                  (gbps = gigabytes per second, 10^9 B/s; pingpong up to
                  64 B also \"c2c_ns\" and \"line1_ns\", the one-way
                  latency through two cache lines (one per direction) and
                  through one line both ranks write, measured right before
                  that size) instead of a table
  --no-pin        do not pin ranks to cores
  --persistent    pingpong: through persistent requests (Scope::send_init,
                  recv_init), bound once per size, blocking send / recv
                  (always from one buffer into another)
  --device gpu    pingpong, bw, collectives: device buffers (rank r on
                  device r % devices), with tandem-gpu, beside the device's
                  own copy bandwidth measured in the same run; says why it
                  skipped where there is no GPU (bw: windows of up to 16
                  device transfers in flight)
  --separate      pingpong: send from one buffer, receive into another
                  (osu_latency's pattern: the sent data stays clean in the
                  sender's cache) instead of one buffer both ways
  -n N            collectives: ranks (default 2; more than the cores is
                  allowed, with a spin-then-yield wait, and labelled)
  --type T        collectives: float (default), double, half, bfloat16,
                  int8, uint8, int32, uint32, int64, uint64 (or f32, bf16...)
  --op OP         collectives: sum (default), prod, min, max, band, bor, bxor
  --root R        reduce, broadcast: the root (default 0)
  --plot F.svg    also draw the sweep into F.svg (pingpong, bw): latency and
                  bandwidth against size, log axes, with this run's
                  reference lines dashed (one-way cache line and memcpy, or
                  the raw TCP floor)
  --compare A.json [B.json ...]
                  with --plot: overlay earlier runs' --json output,
                  labelled by each file's stem (or repeat --compare)

Environment: every TANDEM_* setting of the library applies (TANDEM_LINES,
TANDEM_SLOT_BYTES, TANDEM_EAGER_LIMIT, TANDEM_SPIN, ...).";

struct Opts {
    cmd: String,
    min: usize,
    max: usize,
    iters: u64,
    json: bool,
    pin: bool,
    /// `--plot` and `--compare`.
    plot: PlotOpts,
    /// Collectives: ranks, element type, reduction, root.
    n: usize,
    dtype: Dtype,
    op: ReduceOp,
    root: usize,
    /// Whether `--min-size` was given (collectives start at 8 otherwise).
    min_set: bool,
    /// `plot`: reference lines (label, value) and the title.
    ref_lat: Vec<(String, f64)>,
    ref_bw: Vec<(String, f64)>,
    title: String,
    /// `plot`: the bandwidth axis's label.
    bw_axis: Option<String>,
    /// `pingpong`: through persistent requests bound once per size.
    persistent: bool,
    /// `pingpong`: send from one buffer, receive into another (osu's
    /// pattern; persistent requests always do).
    separate: bool,
    /// `--device gpu`: buffers in device memory (tandem-gpu).
    gpu: bool,
}

fn parse() -> Result<Opts, String> {
    let mut a = std::env::args().skip(1);
    let cmd = a.next().ok_or("missing command")?;
    if cmd == "-h" || cmd == "--help" {
        println!("{USAGE}");
        std::process::exit(0);
    }
    let mut o = Opts {
        cmd,
        min: 1,
        max: 64 << 20,
        iters: 20_000,
        json: false,
        pin: true,
        plot: PlotOpts::default(),
        n: 2,
        dtype: Dtype::F32,
        op: ReduceOp::Sum,
        root: 0,
        min_set: false,
        ref_lat: Vec::new(),
        ref_bw: Vec::new(),
        title: "tandem-perf".into(),
        bw_axis: None,
        persistent: false,
        separate: false,
        gpu: false,
    };
    // `--compare A.json B.json`: bare arguments after a --compare value
    // are more files to compare.
    let mut comparing = false;
    while let Some(f) = a.next() {
        if comparing && !f.starts_with('-') {
            o.plot.compare.push(f.into());
            continue;
        }
        comparing = f == "--compare";
        let mut val = |name: &str| a.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "--min-size" => {
                o.min = parse_size(&val("--min-size")?).ok_or("bad --min-size")?;
                o.min_set = true;
            }
            "-n" => {
                o.n = val("-n")?.parse().map_err(|_| "bad -n")?;
                if !(1..=64).contains(&o.n) {
                    return Err("-n must be 1..=64".into());
                }
            }
            "--type" => {
                let t = val("--type")?;
                o.dtype = parse_dtype(&t).ok_or(format!("unknown --type {t}"))?;
            }
            "--op" => {
                let t = val("--op")?;
                o.op = ReduceOp::parse(&t).ok_or(format!("unknown --op {t}"))?;
            }
            "--root" => o.root = val("--root")?.parse().map_err(|_| "bad --root")?,
            "--ref-lat" | "--ref-bw" => {
                let v = val(&f)?;
                let (label, x) = v
                    .rsplit_once('=')
                    .and_then(|(l, x)| Some((l.to_string(), x.trim().parse::<f64>().ok()?)))
                    .ok_or(format!("{f} needs LABEL=NUMBER, got {v:?}"))?;
                if f == "--ref-lat" {
                    o.ref_lat.push((label, x));
                } else {
                    o.ref_bw.push((label, x));
                }
            }
            "--title" => o.title = val("--title")?,
            "--bw-axis" => o.bw_axis = Some(val("--bw-axis")?),
            "--max-size" => o.max = parse_size(&val("--max-size")?).ok_or("bad --max-size")?,
            "--iters" => o.iters = val("--iters")?.parse().map_err(|_| "bad --iters")?,
            "--json" => o.json = true,
            "--no-pin" => o.pin = false,
            "--persistent" => o.persistent = true,
            "--separate" => o.separate = true,
            "--device" => {
                o.gpu = match val("--device")?.as_str() {
                    "gpu" => true,
                    "cpu" => false,
                    other => return Err(format!("--device {other}: cpu or gpu")),
                }
            }
            other => {
                if !o.plot.take(other, &mut val)? {
                    return Err(format!("unknown option {other}"));
                }
            }
        }
    }
    o.plot.check()?;
    // A bad --compare file fails now rather than after the sweep; only
    // where the plot is drawn (the other rank may be on another host).
    if first_rank() {
        o.plot.compare_series()?;
    }
    if o.max > 1 << 30 {
        return Err("--max-size is at most 1G".into());
    }
    if o.min > o.max {
        return Err("--min-size is larger than --max-size".into());
    }
    if o.iters == 0 {
        return Err("--iters must be positive".into());
    }
    if o.gpu && !matches!(o.cmd.as_str(), "pingpong" | "bw") && Collective::parse(&o.cmd).is_none()
    {
        return Err(format!(
            "--device gpu takes pingpong, bw and the collectives, not {}",
            o.cmd
        ));
    }
    if o.gpu && o.persistent {
        return Err("--persistent does not apply to --device gpu".into());
    }
    if o.persistent && o.cmd != "pingpong" {
        return Err("--persistent applies to pingpong only".into());
    }
    if o.separate && o.cmd != "pingpong" {
        return Err("--separate applies to pingpong only".into());
    }
    Ok(o)
}

/// Whether this process is rank 0 or starts the ranks itself, as far as
/// the environment of a launcher or of tandem's own spawn tells.
fn first_rank() -> bool {
    [
        "TANDEM_RANK",
        "PMI_RANK",
        "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID",
        "RANK",
    ]
    .iter()
    .all(|v| std::env::var(v).map_or(true, |r| r.trim() == "0"))
}

/// With `--plot`: draws `rows` (p50 latency and bandwidth against size)
/// with the reference lines and the `--compare` runs; on failure, says so
/// and exits 1 (the results are already printed).
fn plot_rows(
    o: &Opts,
    title: String,
    rows: &[Row],
    lat_refs: Vec<(String, f64)>,
    bw_refs: Vec<(String, f64)>,
) {
    if o.plot.plot.is_none() {
        return;
    }
    let mut fig = Figure::new(title);
    if o.cmd == "bw" {
        fig.latency_axis = "p50 time per message in a window (µs)".into();
    }
    let pts = |f: fn(&Row) -> f64| rows.iter().map(|r| (r.size as f64, f(r))).collect();
    fig.latency.push(Series::new("this run", pts(|r| r.p50_us)));
    fig.bandwidth.push(Series::new("this run", pts(|r| r.gbps)));
    fig.latency_refs = lat_refs;
    fig.bandwidth_refs = bw_refs;
    write_plot(o, fig);
}

fn cores(pin: bool) -> Option<(usize, usize)> {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    (pin && ids.len() >= 2).then(|| (ids[0].id, ids[1].id))
}

struct Limits {
    c2c: C2c,
    line_ring_rtt: f64,
    /// The duplex line ring prototype's half round trip, ns: a ring of
    /// 1024 lines, and one line (a depth-one mailbox).
    duplex_ns: (f64, f64),
    memcpy: [(usize, f64); 3],
}

/// `pinned`: the two cores to pin to, found before anything was pinned
/// (afterwards the affinity mask only shows the pinned core).
fn measure_limits(pinned: Option<(usize, usize)>) -> Limits {
    let c2c = cache_line_round_trip(pinned, 200_000).unwrap_or_else(|e| {
        eprintln!("tandem-perf: c2c measurement failed: {e}");
        std::process::exit(1)
    });
    let line_ring_rtt = line_ring_round_trip(pinned, 200_000).unwrap_or_else(|e| {
        eprintln!("tandem-perf: line-ring measurement failed: {e}");
        std::process::exit(1)
    });
    let duplex = |lines| {
        duplex_ring_round_trip(pinned, lines, 200_000).unwrap_or_else(|e| {
            eprintln!("tandem-perf: duplex-ring measurement failed: {e}");
            std::process::exit(1)
        })
    };
    let duplex_ns = (duplex(1024), duplex(1));
    let memcpy =
        [64 << 10, 1 << 20, 64 << 20].map(|s| (s, memcpy_gbps(s, Duration::from_millis(300))));
    Limits {
        c2c,
        line_ring_rtt,
        duplex_ns,
        memcpy,
    }
}

fn describe(l: &Limits) -> String {
    let m: Vec<String> = l
        .memcpy
        .iter()
        .map(|(s, g)| format!("{} {g:.1} GB/s", fmt_size(*s)))
        .collect();
    format!(
        "c2c: cross-process cache-line round trip {:.1} ns, one-way {:.1} ns (two lines, one per direction); one line both write: {:.1} ns one-way; bare line ring (core only) 8 B half round trip {:.1} ns; duplex line ring (prototype, 8 B half round trip) {:.1} ns, one duplex line {:.1} ns; memcpy (1 thread): {}",
        l.c2c.rtt_ns,
        l.c2c.one_way_ns,
        l.c2c.one_line_ns,
        l.line_ring_rtt / 2.0,
        l.duplex_ns.0,
        l.duplex_ns.1,
        m.join(", ")
    )
}

/// Round trips for `size`: many for small messages, about 2 GiB of
/// traffic for large ones, never fewer than 10.
fn iters_for(size: usize, base: u64) -> u64 {
    if size <= 64 << 10 {
        base
    } else {
        ((2u64 << 30) / size as u64).clamp(10.min(base), base)
    }
}

struct Row {
    size: usize,
    p50_us: f64,
    p99_us: f64,
    gbps: f64,
    /// One-way cache-line latency measured by the ranks just before: two
    /// lines, one per direction.
    c2c_ns: Option<f64>,
    /// The same through one line both ranks write (an 8-byte answer in
    /// the line of the request).
    line1_ns: Option<f64>,
}

/// Whether a launcher started this process (then the ranks may be on
/// different hosts), or TCP is forced: no shared cache-line page, the raw
/// TCP floor instead.
fn network_mode() -> bool {
    let set = |v: &str| std::env::var_os(v).is_some();
    let launched = [
        "PMI_FD",
        "PMI_RANK",
        "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID",
        "TANDEM_ROOT",
    ]
    .iter()
    .any(|v| set(v))
        || (set("RANK") && set("WORLD_SIZE"))
        || (set("TANDEM_RANK") && !set("TANDEM_PERF_C2C_FD"));
    let networked = matches!(
        std::env::var("TANDEM_TRANSPORT").as_deref(),
        Ok("tcp" | "soft" | "verbs" | "rdma")
    );
    launched || networked
}

/// `pingpong` and `bw`: start two ranks, sweep the sizes, report.
fn sweep_sizes(o: &Opts) {
    if o.gpu {
        return sweep_device(o);
    }
    if network_mode() {
        return sweep_network(o);
    }
    let bw = o.cmd == "bw";
    let rank_hint: usize = std::env::var("TANDEM_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    // Rank 0 measures the machine's limits before any rank starts (fork
    // needs a single-threaded process; the ranks must not disturb it).
    let pinned = cores(o.pin);
    let limits = (rank_hint == 0).then(|| measure_limits(pinned));
    let pin = pinned.map(|(a, b)| if rank_hint == 0 { a } else { b });
    let cfg = Config::from_env()
        .unwrap_or_else(|e| fail(&e.to_string()))
        .pin_core(pin);
    // A page shared by the two ranks for the in-run cache-line bounce.
    let mut inline = if rank_hint == 0 {
        InlineC2c::create()
    } else {
        InlineC2c::open()
    }
    .unwrap_or_else(|e| fail(&format!("c2c page: {e}")));
    let comm = Comm::local_with(2, cfg).unwrap_or_else(|e| fail(&e.to_string()));
    let me = comm.rank();
    let sizes = sweep(o.min, o.max);
    let mut buf = vec![0u8; o.max.max(1)];
    let live = me == 0 && std::io::stderr().is_terminal();
    let mut rows = Vec::new();
    for &size in &sizes {
        // Small sizes are compared with the cache-line latency measured by
        // these same two ranks right before them.
        let (c2c_now, line1_now) = if size <= 64 && !bw {
            (
                inline.measure(me == 0, 20_000),
                inline.measure_one_line(me == 0, 20_000),
            )
        } else {
            (None, None)
        };
        let iters = iters_for(size, o.iters);
        let mut samples = if bw {
            bandwidth_samples(&comm, &buf[..size], iters)
        } else {
            pingpong_samples(&comm, &mut buf[..size], iters, o.persistent, o.separate)
        };
        if me == 0 {
            let p50 = percentile(&mut samples, 50.0);
            let p99 = percentile(&mut samples, 99.0);
            let row = Row {
                size,
                p50_us: p50 / 1e3,
                p99_us: p99 / 1e3,
                gbps: size as f64 / p50,
                c2c_ns: c2c_now,
                line1_ns: line1_now,
            };
            if live {
                eprint!("\r\x1b[2K  size {:>6} done", fmt_size(size));
                let _ = std::io::stderr().flush();
            }
            rows.push(row);
        }
    }
    if live {
        eprint!("\r\x1b[2K");
    }
    if let Err(e) = comm.finish() {
        fail(&e.to_string());
    }
    if me != 0 {
        return;
    }
    // The machine's limits again, now that the ranks are gone: on a shared
    // or virtual machine they drift, and a ratio is only meaningful if both
    // ends of the run agree.
    let before = limits.expect("rank 0 measured");
    let after = measure_limits(pinned);
    let memcpy64 = (before.memcpy[2].1 + after.memcpy[2].1) / 2.0;
    let plot = || {
        let one_way_us = (before.c2c.one_way_ns + after.c2c.one_way_ns) / 2e3;
        plot_rows(
            o,
            format!("tandem-perf {}: 2 processes over shared memory", o.cmd),
            &rows,
            vec![(
                format!("one-way cache line {one_way_us:.3} µs (this run)"),
                one_way_us,
            )],
            vec![(
                format!("memcpy 64M, 1 thread {memcpy64:.1} GB/s (this run)"),
                memcpy64,
            )],
        )
    };
    let out = |s: String| header_line(o.json, s);
    out(format!(
        "# tandem-perf {}: 2 processes over shared memory, pinned to cores: {pinned:?}{}",
        o.cmd,
        if o.persistent {
            ", persistent requests"
        } else {
            ""
        }
    ));
    out(format!("# before the run: {}", describe(&before)));
    out(format!("# after the run:  {}", describe(&after)));
    if o.json {
        print_json(&rows);
        return plot();
    }
    if bw {
        println!(
            "# us = time per message within a window of up to 64 in flight; GB/s = size / p50 us"
        );
    } else {
        println!("# half round trip = round trip / 2; GB/s = size / p50 half round trip;");
        println!("# the two floors, measured by the same two ranks right before that size: c2c ns = one-way");
        println!("# latency through two cache lines, one per direction (what tandem's line rings do); 1-line ns =");
        println!("# through one line both ranks write (the answer in the request's line); x = p50 half round trip / floor");
    }
    println!(
        "{:>10} {:>10} {:>10} {:>9} {:>8} {:>8} {:>9} {:>8}",
        "size", "p50 us", "p99 us", "GB/s", "c2c ns", "x c2c", "1-line ns", "x 1-line"
    );
    let floor = |f: Option<f64>, p50_us: f64| match f {
        Some(c) => (format!("{c:.1}"), format!("{:.2}", p50_us * 1e3 / c)),
        None => (String::new(), String::new()),
    };
    for r in &rows {
        let (c, ratio) = floor(r.c2c_ns, r.p50_us);
        let (c1, ratio1) = floor(r.line1_ns, r.p50_us);
        println!(
            "{:>10} {:>10.3} {:>10.3} {:>9.2} {:>8} {:>8} {:>9} {:>8}",
            fmt_size(r.size),
            r.p50_us,
            r.p99_us,
            r.gbps,
            c,
            ratio,
            c1,
            ratio1
        );
    }
    if let Some((small, c, c1)) = rows
        .iter()
        .find(|r| r.size == 8)
        .and_then(|r| Some((r, r.c2c_ns?, r.line1_ns?)))
    {
        println!(
            "# 8 B half round trip = {:.2} x the two-line floor ({c:.1} ns), {:.2} x the one-line floor ({c1:.1} ns){}; p99/p50 = {:.2}",
            small.p50_us * 1e3 / c,
            small.p50_us * 1e3 / c1,
            if o.persistent {
                ", persistent requests"
            } else {
                ""
            },
            small.p99_us / small.p50_us
        );
    }
    if let Some(big) = rows.last().filter(|r| r.size >= 1 << 20) {
        println!(
            "# {} bandwidth = {:.2} x 1-thread memcpy of 64M ({memcpy64:.1} GB/s, mean of before and after)",
            fmt_size(big.size),
            big.gbps / memcpy64
        );
    }
    plot();
}

/// `pingpong` and `bw` as ranks of a launched job or over TCP: the raw TCP
/// floor of the same two ranks before and after, the sweep in between.
fn sweep_network(o: &Opts) {
    let bw = o.cmd == "bw";
    if matches!(
        std::env::var("TANDEM_TRANSPORT").as_deref(),
        Ok("verbs" | "rdma")
    ) {
        if let Err(e) = tandem_driver::transport::fabric::verbs::probe() {
            println!(
                "# tandem-perf {}: skipped, TANDEM_TRANSPORT=verbs but {e}",
                o.cmd
            );
            return;
        }
    }
    let cfg = Config::from_env().unwrap_or_else(|e| fail(&e.to_string()));
    let comm = Comm::local_with(2, cfg).unwrap_or_else(|e| fail(&e.to_string()));
    let me = comm.rank();
    let route = comm.route(1 - me).unwrap_or_else(|e| fail(&e.to_string()));
    let floor_iters = o.iters.min(20_000);
    let stream = 256 << 20;
    let floor =
        || tcp_floor::measure(&comm, floor_iters, stream).unwrap_or_else(|e| fail(&e.to_string()));
    let before = floor();
    // A raw connection kept beside tandem's: each small size is preceded
    // by a raw 8-byte ping-pong, each large one by a raw stream, so every
    // ratio compares neighbours in time (this machine drifts).
    let mut raw = tcp_floor::RawTcp::connect(&comm).unwrap_or_else(|e| fail(&e.to_string()));
    let sizes = sweep(o.min, o.max);
    let mut buf = vec![0u8; o.max.max(1)];
    let mut rows = Vec::new();
    let mut floors = Vec::new();
    for &size in &sizes {
        let iters = iters_for(size, o.iters);
        let next_floor = match raw.as_mut() {
            Some(r) if size <= 64 && !bw => Some(r.ping(floor_iters).map(|p| p.0)),
            Some(r) if size >= 1 << 20 => Some(r.stream((size * 16).clamp(64 << 20, 256 << 20))),
            _ => None,
        }
        .transpose()
        .unwrap_or_else(|e| fail(&e.to_string()));
        let mut samples = if bw {
            bandwidth_samples(&comm, &buf[..size], iters)
        } else {
            pingpong_samples(&comm, &mut buf[..size], iters, o.persistent, o.separate)
        };
        if me == 0 {
            let p50 = percentile(&mut samples, 50.0);
            let p99 = percentile(&mut samples, 99.0);
            rows.push(Row {
                size,
                p50_us: p50 / 1e3,
                p99_us: p99 / 1e3,
                gbps: size as f64 / p50,
                c2c_ns: None,
                line1_ns: None,
            });
            floors.push(next_floor);
        }
    }
    drop(raw);
    let after = floor();
    if let Err(e) = comm.finish() {
        fail(&e.to_string());
    }
    if me != 0 {
        return;
    }
    let out = |s: String| header_line(o.json, s);
    out(format!(
        "# tandem-perf {}: 2 ranks, rank 1 reached over {route:?}{}",
        o.cmd,
        if o.persistent {
            ", persistent requests"
        } else {
            ""
        }
    ));
    let show = |f: &Option<TcpFloor>| match f {
        Some(f) => format!(
            "raw TCP 8 B half round trip p50 {:.2} us p99 {:.2} us; one blocking stream {:.2} GB/s",
            f.half_rtt_ns / 1e3,
            f.half_rtt_p99_ns / 1e3,
            f.stream_gbps
        ),
        None => "no TCP between the ranks (shared memory): no TCP floor".into(),
    };
    out(format!("# before the run: {}", show(&before)));
    out(format!("# after the run:  {}", show(&after)));
    // The floor of the run: the better of before and after.
    let fl = match (before, after) {
        (Some(a), Some(b)) => Some((
            a.half_rtt_ns.min(b.half_rtt_ns),
            a.stream_gbps.max(b.stream_gbps),
        )),
        _ => None,
    };
    let plot = || {
        let (lat_refs, bw_refs) = match fl {
            Some((lat, gbps)) => (
                vec![(
                    format!("raw TCP 8 B half round trip {:.2} µs (this run)", lat / 1e3),
                    lat / 1e3,
                )],
                vec![(
                    format!("raw TCP, one stream {gbps:.2} GB/s (this run)"),
                    gbps,
                )],
            ),
            None => (Vec::new(), Vec::new()),
        };
        plot_rows(
            o,
            format!("tandem-perf {}: 2 ranks over {route:?}", o.cmd),
            &rows,
            lat_refs,
            bw_refs,
        )
    };
    if o.json {
        print_json(&rows);
        return plot();
    }
    println!("# raw = the raw TCP floor right before that size, over a plain connection between the same two ranks:");
    println!("#   up to 64 B: 8-byte busy-polled ping-pong half round trip (us); from 1M: one blocking stream (GB/s)");
    println!("# x raw = p50 / raw (small sizes), GB/s / raw (from 1M)");
    println!(
        "{:>10} {:>10} {:>10} {:>9} {:>9} {:>7}",
        "size", "p50 us", "p99 us", "GB/s", "raw", "x raw"
    );
    for (r, f) in rows.iter().zip(&floors) {
        let (raw, ratio) = match f {
            Some(lat) if r.size <= 64 && !bw => (
                format!("{:.3}", lat / 1e3),
                format!("{:.2}", r.p50_us * 1e3 / lat),
            ),
            Some(gbps) => (format!("{gbps:.3}"), format!("{:.2}", r.gbps / gbps)),
            None => (String::new(), String::new()),
        };
        println!(
            "{:>10} {:>10.3} {:>10.3} {:>9.3} {:>9} {:>7}",
            fmt_size(r.size),
            r.p50_us,
            r.p99_us,
            r.gbps,
            raw,
            ratio
        );
    }
    let pairs = || {
        rows.iter()
            .zip(&floors)
            .filter_map(|(r, f)| f.map(|f| (r, f)))
    };
    if let Some((r, lat)) = pairs().find(|(r, _)| r.size == 8 && !bw) {
        println!(
            "# 8 B half round trip = {:.2} x raw TCP ({:.2} us, measured right before){}; p99/p50 = {:.2}",
            r.p50_us * 1e3 / lat,
            lat / 1e3,
            if o.persistent { ", persistent requests" } else { "" },
            r.p99_us / r.p50_us
        );
    }
    let mut big: Vec<f64> = pairs()
        .filter(|(r, _)| r.size >= 1 << 20)
        .map(|(r, g)| r.gbps / g)
        .collect();
    big.sort_by(f64::total_cmp);
    if let (Some(lo), Some(hi)) = (big.first(), big.last()) {
        println!(
            "# from 1M up: bandwidth = {lo:.2}..{hi:.2} x one raw TCP stream (median {:.2})",
            big[big.len() / 2]
        );
    }
    plot();
}

/// A header line: on stdout for a table, on stderr with `--json` (so
/// stdout stays one JSON document).
fn header_line(json: bool, s: String) {
    if json {
        eprintln!("{s}")
    } else {
        println!("{s}")
    }
}

/// The rows as a JSON array of `{"size","p50_us","p99_us","gbps"}`, with
/// `"c2c_ns"` (the one-way cache-line latency the ranks measured right
/// before that size) where there is one.
fn print_json(rows: &[Row]) {
    let objs: Vec<String> = rows
        .iter()
        .map(|r| {
            let mut c2c = r
                .c2c_ns
                .map(|c| format!(", \"c2c_ns\": {c:.2}"))
                .unwrap_or_default();
            if let Some(c) = r.line1_ns {
                c2c += &format!(", \"line1_ns\": {c:.2}");
            }
            format!(
                "{{\"size\": {}, \"p50_us\": {:.4}, \"p99_us\": {:.4}, \"gbps\": {:.3}{c2c}}}",
                r.size, r.p50_us, r.p99_us, r.gbps
            )
        })
        .collect();
    println!("[\n  {}\n]", objs.join(",\n  "));
}

/// Half round trips (ns) of `msg` between the two ranks: `iters` round
/// trips after a tenth as many for warm-up; small messages timed in
/// batches of 16 so reading the clock is negligible. With `persistent`,
/// through a persistent send of `msg` and a persistent receive into a
/// second buffer of its size, bound once.
fn pingpong_samples(
    comm: &Comm,
    msg: &mut [u8],
    iters: u64,
    persistent: bool,
    separate: bool,
) -> Vec<f64> {
    let (me, peer) = (comm.rank(), 1 - comm.rank());
    let warm = (iters / 10).max(2);
    let batch = if msg.len() <= 4096 { 16 } else { 1 };
    let samples_n = iters.div_ceil(batch);
    let mut samples = Vec::with_capacity(samples_n as usize);
    let or_fail = |r: tandem_driver::Result<()>| r.unwrap_or_else(|e| fail(&e.to_string()));
    // Time `warm` then `samples_n` batches of round trips `rt`.
    let mut run = |rt: &mut dyn FnMut() -> tandem_driver::Result<()>| {
        for _ in 0..warm {
            or_fail(rt());
        }
        for _ in 0..samples_n {
            let t = Instant::now();
            for _ in 0..batch {
                or_fail(rt());
            }
            samples.push(t.elapsed().as_nanos() as f64 / batch as f64 / 2.0);
        }
    };
    if persistent {
        let mut back = vec![0u8; msg.len()];
        let r = comm.scope(|s| {
            let mut tx = s.send_init(msg, peer, 0)?;
            let mut rx = s.recv_init(&mut back, peer, 0)?;
            run(&mut || {
                if me == 0 {
                    tx.send()?;
                    rx.recv().map(|_| ())
                } else {
                    rx.recv()?;
                    tx.send()
                }
            });
            Ok(())
        });
        or_fail(r.and_then(|r| r));
    } else if separate {
        let mut back = vec![0u8; msg.len()];
        run(&mut || {
            if me == 0 {
                comm.send(msg, peer, 0)?;
                comm.recv(&mut back, peer, 0).map(|_| ())
            } else {
                comm.recv(&mut back, peer, 0)?;
                comm.send(msg, peer, 0)
            }
        });
    } else {
        run(&mut || {
            if me == 0 {
                comm.send(msg, peer, 0)?;
                comm.recv(msg, peer, 0).map(|_| ())
            } else {
                comm.recv(msg, peer, 0)?;
                comm.send(msg, peer, 0)
            }
        });
    }
    samples
}

/// Messages in flight per window of `bw` (osu_bw style), at most 64 and
/// at most 256 MiB of receive buffers.
fn window(size: usize) -> usize {
    ((256usize << 20) / size.max(1)).clamp(1, 64)
}

/// Per-message times (ns) of `bw`: rank 0 starts a window of non-blocking
/// sends, the receiver a window of receives into distinct buffers, then a
/// one-byte acknowledgement closes the window; one sample per window
/// (window time / window size).
fn bandwidth_samples(comm: &Comm, msg: &[u8], iters: u64) -> Vec<f64> {
    let (me, peer) = (comm.rank(), 1 - comm.rank());
    let size = msg.len();
    let w = window(size);
    let loops = (iters / w as u64).max(4);
    let warm = (loops / 10).max(1);
    let mut rbuf = vec![0u8; if me == 1 { w * size } else { 0 }];
    let mut one = || -> tandem_driver::Result<()> {
        if me == 0 {
            comm.scope(|s| {
                for _ in 0..w {
                    // Dropped requests are waited for at the end of the scope.
                    let _ = s.isend(msg, peer, 0)?;
                }
                Ok::<_, tandem_driver::Error>(())
            })??;
            comm.recv(&mut [0u8; 1], peer, 1).map(|_| ())
        } else {
            let mut bufs: Vec<&mut [u8]> = if size == 0 {
                (0..w).map(|_| &mut [][..]).collect()
            } else {
                rbuf.chunks_mut(size).collect()
            };
            comm.scope(|s| {
                for b in bufs.drain(..) {
                    let _ = s.irecv(b, peer, 0)?;
                }
                Ok::<_, tandem_driver::Error>(())
            })??;
            comm.send(&[1], peer, 1)
        }
    };
    for _ in 0..warm {
        one().unwrap_or_else(|e| fail(&e.to_string()));
    }
    let mut samples = Vec::with_capacity(loops as usize);
    for _ in 0..loops {
        let t = Instant::now();
        one().unwrap_or_else(|e| fail(&e.to_string()));
        samples.push(t.elapsed().as_nanos() as f64 / w as f64);
    }
    samples
}

/// A collective subcommand: `-n` rank processes (or the launched job),
/// the machine's limits and the reduction kernel measured first by rank 0,
/// then the sweep.
fn sweep_collective(o: &Opts) {
    let coll = Collective::parse(&o.cmd).expect("checked by main");
    if o.gpu {
        return sweep_collective_device(o, coll);
    }
    let rank_hint: usize = std::env::var("TANDEM_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let launched = network_mode();
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let oversubscribed = o.n > ids.len().max(1);
    let lead = rank_hint == 0 && !launched;
    let limits = lead.then(|| measure_limits(cores(o.pin)));
    let kernel = lead.then(|| {
        [1usize << 20, 64 << 20].map(|b| {
            let (k, m) = collperf::kernel_vs_memcpy(o.dtype, o.op, b, Duration::from_millis(300))
                .unwrap_or_else(|e| fail(&e.to_string()));
            (b, k, m)
        })
    });
    let mut cfg = Config::from_env().unwrap_or_else(|e| fail(&e.to_string()));
    if oversubscribed {
        // More ranks than cores: yield almost at once, so the rank that
        // is awaited gets the core (a 200-poll spin measured 4x slower
        // here with 4 ranks on 2 cores).
        cfg.wait.spin = cfg.wait.spin.min(4);
    } else if o.pin && !launched {
        cfg = cfg.pin_core(ids.get(rank_hint).map(|c| c.id));
    }
    let comm = if launched {
        Comm::from_env_with(cfg)
    } else {
        Comm::local_with(o.n, cfg)
    }
    .unwrap_or_else(|e| fail(&e.to_string()));
    let n = comm.size();
    if o.root >= n {
        fail(&format!("--root {} is not a rank of {n}", o.root));
    }
    let co = CollOpts {
        coll,
        n,
        min: if o.min_set { o.min } else { 8 },
        max: o.max,
        iters: o.iters,
        dtype: o.dtype,
        op: o.op,
        root: o.root,
    };
    let sizes = sweep(co.min, co.max);
    let rows = collperf::sweep(&comm, &co, &sizes).unwrap_or_else(|e| fail(&e.to_string()));
    let me = comm.rank();
    if let Err(e) = comm.finish() {
        fail(&e.to_string());
    }
    if me != 0 {
        return;
    }
    header_line(
        o.json,
        format!(
            "# tandem-perf {} -n {n}{}: {} {}",
            coll.name(),
            if oversubscribed {
                format!(
                    " (OVERSUBSCRIBED: {n} ranks on {} cores, spin-then-yield)",
                    ids.len()
                )
            } else {
                String::new()
            },
            o.dtype,
            o.op
        ),
    );
    let mut lat_refs = Vec::new();
    let mut bw_refs = Vec::new();
    if let Some(l) = &limits {
        header_line(o.json, format!("# {}", describe(l)));
        lat_refs.push((
            format!("one-way cache line {:.0} ns (this run)", l.c2c.one_way_ns),
            l.c2c.one_way_ns / 1e3,
        ));
        bw_refs.push((
            format!("memcpy 64M, 1 thread {:.1} GB/s (this run)", l.memcpy[2].1),
            l.memcpy[2].1,
        ));
    }
    if let Some(k) = kernel {
        let parts: Vec<String> = k
            .iter()
            .map(|(b, kg, mg)| {
                format!(
                    "{}: {kg:.1} GB/s vs memcpy {mg:.1} GB/s ({:.2}x)",
                    fmt_size(*b),
                    kg / mg
                )
            })
            .collect();
        header_line(
            o.json,
            format!(
                "# reduction kernel dst = dst {} src ({}, 1 thread, GB/s of dst): {}",
                o.op,
                o.dtype,
                parts.join("; ")
            ),
        );
    }
    if o.json {
        collperf::print_json(&rows);
    } else {
        collperf::print_table(&co, &rows);
    }
    header_line(o.json, collperf::summary(&co, &rows));
    if o.plot.plot.is_some() {
        let mut fig = Figure::new(format!(
            "tandem {} on {n} ranks ({} {})",
            coll.name(),
            o.dtype,
            o.op
        ));
        fig.latency_axis = "p50 time per call (µs)".into();
        fig.bandwidth_axis = "busbw (GB/s)".into();
        let pts =
            |f: fn(&collperf::CollRow) -> f64| rows.iter().map(|r| (r.size as f64, f(r))).collect();
        fig.latency.push(Series::new("this run", pts(|r| r.p50_us)));
        fig.bandwidth
            .push(Series::new("this run", pts(|r| r.busbw)));
        fig.latency_refs = lat_refs;
        fig.bandwidth_refs = bw_refs;
        write_plot(o, fig);
    }
}

/// Writes `fig` (with the `--compare` series) where `--plot` says, if it
/// says; a failure ends the run.
fn write_plot(o: &Opts, fig: Figure) {
    match o.plot.write(fig) {
        Ok(Some(path)) => eprintln!("tandem-perf: plot written to {}", path.display()),
        Ok(None) => {}
        Err(e) => fail(&format!("--plot: {e}")),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("tandem-perf: {msg}");
    std::process::exit(1)
}

fn main() {
    let o = parse().unwrap_or_else(|e| {
        eprintln!("tandem-perf: {e}\n\n{USAGE}");
        std::process::exit(2)
    });
    match o.cmd.as_str() {
        "pingpong" | "bw" => sweep_sizes(&o),
        "plot" => {
            if o.plot.plot.is_none() {
                eprintln!("tandem-perf: plot needs --plot FILE.svg\n\n{USAGE}");
                std::process::exit(2)
            }
            let mut fig = Figure::new(o.title.clone());
            if let Some(l) = &o.bw_axis {
                fig.bandwidth_axis = l.clone();
            }
            fig.latency_refs = o.ref_lat.clone();
            fig.bandwidth_refs = o.ref_bw.clone();
            write_plot(&o, fig);
        }
        c if Collective::parse(c).is_some_and(|c| c != Collective::Barrier) => sweep_collective(&o),
        "gpu-flags" => gpu_flags(&o),
        "c2c" => {
            if o.plot.plot.is_some() {
                eprintln!("tandem-perf: c2c draws no plot (--plot is for sweeps)\n\n{USAGE}");
                std::process::exit(2)
            }
            let l = measure_limits(cores(o.pin));
            if o.json {
                let m: Vec<String> = l
                    .memcpy
                    .iter()
                    .map(|(s, g)| format!("{{\"size\": {s}, \"memcpy_gbps\": {g:.3}}}"))
                    .collect();
                println!(
                    "{{\"c2c_rtt_ns\": {:.2}, \"c2c_one_way_ns\": {:.2}, \"c2c_one_line_ns\": {:.2}, \"line_ring_half_rtt_ns\": {:.2}, \"duplex_ring_half_rtt_ns\": {:.2}, \"duplex_line_half_rtt_ns\": {:.2}, \"memcpy\": [{}]}}",
                    l.c2c.rtt_ns,
                    l.c2c.one_way_ns,
                    l.c2c.one_line_ns,
                    l.line_ring_rtt / 2.0,
                    l.duplex_ns.0,
                    l.duplex_ns.1,
                    m.join(", ")
                );
            } else {
                println!("{}", describe(&l));
            }
        }
        other => {
            eprintln!("tandem-perf: unknown command {other}\n\n{USAGE}");
            std::process::exit(2)
        }
    }
}

/// `tandem-perf gpu-flags`: the GPU handshakes beside the CPU's floors of
/// the same run.
fn gpu_flags(o: &Opts) {
    use tandem_gpu::flags::{cpu_floor, gpu_cpu, gpu_gpu, OneWay};
    let iters = o.iters.clamp(100, 100_000) as u32;
    let l = measure_limits(cores(o.pin));
    let threads = cpu_floor(iters);
    let gpu = match tandem_gpu::Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            println!("# gpu-flags: skipped: {e}");
            println!(
                "# CPU floors of this run: one line {:.1} ns, two lines {:.1} ns, two threads of this process {threads}",
                l.c2c.one_line_ns, l.c2c.one_way_ns
            );
            return;
        }
    };
    let rows: Vec<(&str, tandem_gpu::Result<OneWay>)> = vec![
        (
            "GPU<->CPU, flag and data apart",
            gpu_cpu(&gpu, iters, false),
        ),
        ("GPU<->CPU, one word (LL)", gpu_cpu(&gpu, iters, true)),
        (
            "GPU<->GPU, flag and data apart",
            gpu_gpu(&gpu, iters, false),
        ),
        ("GPU<->GPU, one word (LL)", gpu_gpu(&gpu, iters, true)),
    ];
    let name = gpu.name().unwrap_or_else(|_| "GPU 0".into());
    if o.json {
        let items: Vec<String> = rows
            .iter()
            .map(|(what, r)| match r {
                Ok(w) => format!(
                    "{{\"what\": \"{what}\", \"p50_ns\": {:.1}, \"p99_ns\": {:.1}}}",
                    w.p50_ns, w.p99_ns
                ),
                Err(e) => format!(
                    "{{\"what\": \"{what}\", \"error\": \"{}\"}}",
                    e.to_string().replace('"', "'")
                ),
            })
            .collect();
        println!(
            "{{\"device\": \"{name}\", \"one_line_ns\": {:.1}, \"two_line_ns\": {:.1}, \"threads_p50_ns\": {:.1}, \"rows\": [{}]}}",
            l.c2c.one_line_ns,
            l.c2c.one_way_ns,
            threads.p50_ns,
            items.join(", ")
        );
        return;
    }
    println!("# tandem-perf gpu-flags: {name}, {iters} round trips each, one-way times");
    println!(
        "# CPU floors of this run: one line {:.1} ns, two lines {:.1} ns (processes); two threads: {threads}",
        l.c2c.one_line_ns, l.c2c.one_way_ns
    );
    println!(
        "{:<34} {:>10} {:>10} {:>12}",
        "handshake", "p50 ns", "p99 ns", "x one line"
    );
    for (what, r) in rows {
        match r {
            Ok(w) => println!(
                "{what:<34} {:>10.0} {:>10.0} {:>12.2}",
                w.p50_ns,
                w.p99_ns,
                w.p50_ns / l.c2c.one_line_ns
            ),
            Err(e) => println!("{what:<34} failed: {e}"),
        }
    }
    println!(
        "# two processes on one GPU: not measured (without MPS their contexts take turns on the GPU: that would time the scheduler)"
    );
}

/// Whether there is a GPU for `--device gpu`: what [`tandem_gpu::probe`]
/// found, or `None` after saying why `what` skipped.
fn gpu_or_skip(what: &str) -> Option<tandem_gpu::Found> {
    match tandem_gpu::probe() {
        Ok(f) => Some(f),
        Err(e) => {
            println!("# tandem-perf {what} --device gpu: skipped: {e}");
            None
        }
    }
}

/// Opens this rank's GPU (rank r on device r % devices) and measures its
/// own copy bandwidth, the run's reference line.
fn open_gpu(found: &tandem_gpu::Found, rank: usize) -> (tandem_gpu::Gpu, f64) {
    let gpu = tandem_gpu::Gpu::open(rank % found.devices).unwrap_or_else(|e| fail(&e.to_string()));
    let copy = gpu
        .copy_gbps(256 << 20)
        .unwrap_or_else(|e| fail(&e.to_string()));
    (gpu, copy)
}

/// `pingpong` and `bw` with `--device gpu`: device buffers both ways, each
/// size's p50 and p99 (half round trip, or time per message of a window)
/// and bandwidth, beside the device's own copy.
fn sweep_device(o: &Opts) {
    let bw = o.cmd == "bw";
    let Some(found) = gpu_or_skip(&o.cmd) else {
        return;
    };
    let comm = Comm::local(2).unwrap_or_else(|e| fail(&e.to_string()));
    let me = comm.rank();
    let peer = 1 - me;
    let (gpu, copy) = open_gpu(&found, me);
    let mut rows = Vec::new();
    for size in sweep(o.min, o.max) {
        let a = gpu.alloc(size).unwrap_or_else(|e| fail(&e.to_string()));
        let mut b = gpu.alloc(size).unwrap_or_else(|e| fail(&e.to_string()));
        let iters = iters_for(size, o.iters.min(2000));
        // bw: windows of up to 16 transfers in flight (one tag each: two
        // device transfers with one tag may not fly at once), closed by a
        // one-byte acknowledgement.
        let w = if bw { window(size).min(16) } else { 1 };
        let mut window_bufs: Vec<tandem_gpu::DeviceBuf> = if bw && me == 1 {
            (0..w)
                .map(|_| gpu.alloc(size).unwrap_or_else(|e| fail(&e.to_string())))
                .collect()
        } else {
            Vec::new()
        };
        let mut samples = Vec::with_capacity(iters as usize);
        for i in 0..iters.div_ceil(w as u64) + 10 {
            let t = Instant::now();
            let r = match (bw, me) {
                (false, 0) => tandem_gpu::send(&comm, &gpu, &a, peer, 1)
                    .and_then(|_| tandem_gpu::recv(&comm, &gpu, &mut b, peer, 1).map(|_| ())),
                (false, _) => tandem_gpu::recv(&comm, &gpu, &mut b, peer, 1)
                    .and_then(|_| tandem_gpu::send(&comm, &gpu, &a, peer, 1)),
                // The scope's end waits for the window.
                (true, 0) => tandem_gpu::scope(&comm, &gpu, |s| {
                    (0..w).try_for_each(|k| s.isend(&a, peer, 10 + k as u32).map(drop))
                })
                .and_then(|r| r)
                .and_then(|_| Ok(comm.recv(&mut [0u8; 1], peer, 2).map(|_| ())?)),
                (true, _) => tandem_gpu::scope(&comm, &gpu, |s| {
                    window_bufs
                        .iter_mut()
                        .enumerate()
                        .try_for_each(|(k, rb)| s.irecv(rb, peer, 10 + k as u32).map(drop))
                })
                .and_then(|r| r)
                .and_then(|_| Ok(comm.send(&[1], peer, 2)?)),
            };
            r.unwrap_or_else(|e| fail(&e.to_string()));
            if i >= 10 {
                let per = if bw { w as f64 } else { 2.0 };
                samples.push(t.elapsed().as_nanos() as f64 / per);
            }
        }
        if me == 0 {
            let p50 = percentile(&mut samples, 50.0);
            let p99 = percentile(&mut samples, 99.0);
            rows.push((size, p50 / 1e3, p99 / 1e3, size as f64 / p50));
        }
    }
    if me != 0 {
        std::process::exit(0);
    }
    let name = gpu.name().unwrap_or_else(|_| "GPU".into());
    if o.json {
        let items: Vec<String> = rows
            .iter()
            .map(|(s, p50, p99, g)| {
                format!("{{\"size\": {s}, \"p50_us\": {p50:.3}, \"p99_us\": {p99:.3}, \"gbps\": {g:.3}, \"device_copy_gbps\": {copy:.1}}}")
            })
            .collect();
        println!("[\n  {}\n]", items.join(",\n  "));
    } else {
        println!(
            "# tandem-perf {} --device gpu: {name}, 2 ranks, device buffers staged through pinned host memory",
            o.cmd
        );
        if bw {
            println!("# us = time per message in windows of up to 16 device transfers in flight (tandem_gpu::scope: isend / irecv), closed by an acknowledgement");
        }
        println!(
            "# the device's own copy in this run: {copy:.1} GB/s (bytes read plus bytes written)"
        );
        println!(
            "{:>10} {:>12} {:>12} {:>10} {:>10}",
            "size", "p50 us", "p99 us", "GB/s", "x copy"
        );
        for (s, p50, p99, g) in &rows {
            println!(
                "{:>10} {p50:>12.2} {p99:>12.2} {g:>10.2} {:>10.3}",
                fmt_size(*s),
                g / copy
            );
        }
    }
    comm.finish().unwrap_or_else(|e| fail(&e.to_string()));
}

/// A collective with `--device gpu`: `-n` rank processes, each with its
/// GPU's buffers (tandem-gpu's collectives, staged through pinned host
/// memory), nccl-tests' columns, the device's own copy bandwidth first.
fn sweep_collective_device(o: &Opts, coll: Collective) {
    let Some(found) = gpu_or_skip(coll.name()) else {
        return;
    };
    let comm = Comm::local(o.n).unwrap_or_else(|e| fail(&e.to_string()));
    let (n, me) = (comm.size(), comm.rank());
    if o.root >= n {
        fail(&format!("--root {} is not a rank of {n}", o.root));
    }
    let (gpu, copy) = open_gpu(&found, me);
    let co = CollOpts {
        coll,
        n,
        min: if o.min_set { o.min } else { 8 },
        max: o.max,
        iters: o.iters.min(2000),
        dtype: o.dtype,
        op: o.op,
        root: o.root,
    };
    let sizes = sweep(co.min, co.max);
    let rows =
        collperf::sweep_device(&comm, &gpu, &co, &sizes).unwrap_or_else(|e| fail(&e.to_string()));
    comm.finish().unwrap_or_else(|e| fail(&e.to_string()));
    if me != 0 {
        return;
    }
    let name = gpu.name().unwrap_or_else(|_| "GPU".into());
    header_line(
        o.json,
        format!(
            "# tandem-perf {} -n {n} --device gpu: {name}, {} {}, device buffers staged through pinned host memory",
            coll.name(),
            o.dtype,
            o.op
        ),
    );
    header_line(
        o.json,
        format!(
            "# the device's own copy in this run: {copy:.1} GB/s (bytes read plus bytes written)"
        ),
    );
    if o.json {
        collperf::print_json(&rows);
    } else {
        collperf::print_table(&co, &rows);
    }
    header_line(o.json, collperf::summary(&co, &rows));
}
