#!/usr/bin/env python3
"""tandem's collectives beside Open MPI's and MPICH's, in one benchmark run.

    benches/mpi/compare.py allreduce 2 [--rounds 3] [--max-size 64M]
                           [--out DIR] [--type float] [--plot FILE.svg]

Runs `tandem-perf <op> -n N --json` and `benches/mpi/run.sh <op> N`
(coll_bench under each MPI) alternately, `--rounds` times, so machine drift
hits all three alike; takes the median per size over the rounds and prints
a Markdown table: p50 time and busbw of each, tandem's time as a ratio to
Open MPI's and its busbw as a ratio to the better MPI's. The JSON of every
run and the medians (`DIR/<impl>-<op>-<n>.json`) stay in DIR (default
target/coll-compare); with --plot, `tandem-perf plot` draws the three
medians, with the medians of the same-run limits tandem-perf measured
(one-way cache line, memcpy 64M) as reference lines.

Point to point, tandem-perf pingpong/bw beside p2p_bench.c (2 ranks only):

    benches/mpi/compare.py pingpong 2 [--rounds 3] [--min-size 1]
                           [--max-size 64M] [--iters N] [--out DIR]
                           [--plot FILE.svg] [--tandem-args ARG...]
                           [--mpi-args ARG...]

Each round runs `tandem-perf <op> --json` (it starts its own two
processes), then `benches/mpi/run.sh <op> 2` (p2p_bench under each MPI),
with the same --min-size, --max-size and --iters. The table has the
median p50 (tandem's p99 too), GB/s, and tandem's p50 and GB/s as ratios
to the better MPI's; for pingpong, the one-way cache-line latency that
tandem-perf measured before and after each round and tandem's 8 B p50 as
a multiple of it. Everything after --tandem-args goes to tandem-perf only
(e.g. `--tandem-args --persistent --no-pin`), everything after --mpi-args
to p2p_bench only; put them last. DIR defaults to target/p2p-compare.
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_tandem(op, n, args, out):
    cmd = [os.path.join(ROOT, "target", "release", "tandem-perf"), op, "-n", str(n), "--json"] + args
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"tandem-perf failed: {p.stderr}")
    sys.stderr.write(p.stderr)
    with open(out, "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout), p.stderr


def run_mpis(op, n, args, outdir):
    env = dict(os.environ, OUT=outdir)
    p = subprocess.run([os.path.join(ROOT, "benches", "mpi", "run.sh"), op, str(n)] + args,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"run.sh failed: {p.stderr[-2000:]}")
    res = {}
    for mpi in ("openmpi", "mpich"):
        path = os.path.join(outdir, f"{mpi}-{op}-{n}.json")
        if os.path.exists(path):
            with open(path) as f:
                res[mpi] = json.load(f)
    return res


def parse_limits(header):
    """(one-way c2c ns, memcpy 64M GB/s) from tandem-perf's header."""
    c2c = mem = None
    for line in header.splitlines():
        m = re.search(r"one-way ([0-9.]+) ns", line)
        if m:
            c2c = float(m.group(1))
        m = re.search(r"64M ([0-9.]+) GB/s", line)
        if m and "memcpy" in line and "kernel" not in line:
            mem = float(m.group(1))
    return c2c, mem


def medians(runs):
    """{size: (p50_us, busbw, wrong)} medians over rounds."""
    by = {}
    for rows in runs:
        for r in rows:
            by.setdefault(r["size"], []).append(r)
    return {s: (statistics.median(x["p50_us"] for x in rs),
                statistics.median(x["busbw"] for x in rs),
                sum(x["wrong"] for x in rs)) for s, rs in by.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op")
    ap.add_argument("n", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-size", default="64M")
    ap.add_argument("--min-size", default="8")
    ap.add_argument("--type", default="float")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "coll-compare"))
    ap.add_argument("--plot")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    common = ["--min-size", a.min_size, "--max-size", a.max_size, "--type", a.type]
    runs = {"tandem": [], "openmpi": [], "mpich": []}
    header = ""
    limits = []
    for i in range(a.rounds):
        rows, header = run_tandem(a.op, a.n, common, os.path.join(a.out, f"tandem-{a.op}-{a.n}-r{i}.json"))
        limits.append(parse_limits(header))
        runs["tandem"].append(rows)
        rd = os.path.join(a.out, f"r{i}")
        os.makedirs(rd, exist_ok=True)
        for mpi, rows in run_mpis(a.op, a.n, common, rd).items():
            runs[mpi].append(rows)
    med = {k: medians(v) for k, v in runs.items() if v}
    for k, m in med.items():
        with open(os.path.join(a.out, f"{k}-{a.op}-{a.n}.json"), "w") as f:
            json.dump([{"size": s, "p50_us": t, "algbw": 0.0, "busbw": b, "wrong": w}
                       for s, (t, b, w) in sorted(m.items())], f, indent=1)
    t, o, m = med["tandem"], med.get("openmpi", {}), med.get("mpich", {})
    print(f"{a.op}, {a.n} ranks, {a.type}, medians of {a.rounds} alternating rounds "
          f"(tandem-perf, then Open MPI, then MPICH, each round)\n")
    for line in header.splitlines():
        if line.startswith("# c2c") or line.startswith("# reduction kernel") or "OVERSUBSCRIBED" in line:
            print(f"    {line}")
    # The vCPUs of a VM move between physical cores: say where tandem's
    # rounds ran (one-way cache-line latency measured by each round).
    print("    # one-way cache line before each tandem round: " +
          ", ".join(f"{c:.0f} ns" for c, _ in limits if c is not None))
    print()
    print("| size | tandem p50 µs | Open MPI p50 µs | MPICH p50 µs | tandem / Open MPI time | "
          "tandem busbw GB/s | Open MPI busbw | MPICH busbw | tandem / better MPI busbw | #wrong |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sorted(t):
        tt, tb, tw = t[s]
        ot, ob, ow = o.get(s, (float("nan"), float("nan"), 0))
        mt, mb, mw = m.get(s, (float("nan"), float("nan"), 0))
        best = max(x for x in (ob, mb) if x == x) if (ob == ob or mb == mb) else float("nan")
        print(f"| {s} | {tt:.2f} | {ot:.2f} | {mt:.2f} | {tt / ot:.2f}x | {tb:.2f} | {ob:.2f} | "
              f"{mb:.2f} | {tb / best if best else float('nan'):.2f}x | {tw + ow + mw} |")
    if a.plot:
        cmd = [os.path.join(ROOT, "target", "release", "tandem-perf"), "plot", "--plot", a.plot,
               "--title", f"{a.op} on {a.n} ranks ({a.type}), medians of {a.rounds} alternating rounds",
               "--bw-axis", "busbw (GB/s)"]
        c2c = [x[0] for x in limits if x[0] is not None]
        mem = [x[1] for x in limits if x[1] is not None]
        if c2c:
            v = statistics.median(c2c)
            cmd += ["--ref-lat", f"one-way cache line {v:.0f} ns (same run)={v / 1000:.4f}"]
        if mem:
            v = statistics.median(mem)
            cmd += ["--ref-bw", f"memcpy 64M, 1 thread {v:.1f} GB/s (same run)={v:.3f}"]
        for k in ("tandem", "openmpi", "mpich"):
            if k in med:
                cmd += ["--compare", os.path.join(a.out, f"{k}-{a.op}-{a.n}.json")]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)


# ---------------------------------------------------------------------------
# Point to point: tandem-perf pingpong/bw beside p2p_bench under each MPI.

P2P = ("pingpong", "bw")
MPI_NAMES = {"openmpi": "Open MPI", "mpich": "MPICH"}


def split_passthrough(argv):
    """(own args, tandem-only args, p2p_bench-only args): what follows
    --tandem-args (up to --mpi-args) and --mpi-args (up to --tandem-args)
    is passed through; `--tandem-args="A B"` is split like a shell would."""
    own, extra, cur = [], {"tandem": [], "mpi": []}, None
    for arg in argv:
        name, eq, val = arg.partition("=")
        if name in ("--tandem-args", "--mpi-args"):
            key = name[2:].split("-")[0]
            if eq:
                extra[key] += shlex.split(val)
                cur = None
            else:
                cur = key
        elif cur:
            extra[cur].append(arg)
        else:
            own.append(arg)
    return own, extra["tandem"], extra["mpi"]


def run_tandem_p2p(op, args, out):
    exe = os.path.join(ROOT, "target", "release", "tandem-perf")
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe} not found: cargo build --release -p tandem-benches first")
    p = subprocess.run([exe, op, "--json"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"tandem-perf failed: {p.stderr}")
    sys.stderr.write(p.stderr)
    with open(out, "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout), p.stderr


def run_mpis_p2p(op, args, outdir):
    """({mpi: rows}, {mpi: library line}) from run.sh <op> 2 in outdir."""
    env = dict(os.environ, OUT=outdir)
    p = subprocess.run([os.path.join(ROOT, "benches", "mpi", "run.sh"), op, "2"] + args,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"run.sh failed: {p.stderr[-2000:]}")
    res, lib = {}, {}
    for mpi in MPI_NAMES:
        path = os.path.join(outdir, f"{mpi}-{op}-2.json")
        if os.path.exists(path):
            with open(path) as f:
                res[mpi] = json.load(f)
            try:
                with open(os.path.join(outdir, f"{mpi}-{op}-2.txt")) as f:
                    for line in f:
                        if line.startswith("# p2p_bench"):
                            lib[mpi] = line.split(": ", 1)[-1].strip()
                            break
            except OSError:
                pass
    return res, lib


def c2c_now():
    """The one-way cache-line latency right now (tandem-perf c2c), in ns."""
    exe = os.path.join(ROOT, "target", "release", "tandem-perf")
    p = subprocess.run([exe, "c2c"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       check=False)
    m = re.search(r"one-way ([0-9.]+) ns", p.stdout)
    return float(m.group(1)) if m else None


def parse_p2p_limits(header):
    """{"before"/"after": (one-way c2c ns, memcpy 64M GB/s)} from the lines
    tandem-perf pingpong/bw --json writes to stderr."""
    lim = {}
    for line in header.splitlines():
        m = re.match(r"# (before|after) the run:", line)
        if not m:
            continue
        c = re.search(r"one-way ([0-9.]+) ns", line)
        g = re.search(r"64M ([0-9.]+) GB/s", line)
        lim[m.group(1)] = (float(c.group(1)) if c else None, float(g.group(1)) if g else None)
    return lim


def mean_of(lim, i):
    v = [x[i] for x in lim.values() if x[i] is not None]
    return sum(v) / len(v) if v else None


def p2p_medians(runs):
    """{size: (p50_us, p99_us, gbps)} medians over rounds."""
    by = {}
    for rows in runs:
        for r in rows:
            by.setdefault(r["size"], []).append(r)
    return {s: tuple(statistics.median(x[k] for x in rs) for k in ("p50_us", "p99_us", "gbps"))
            for s, rs in by.items()}


def parse_size(v):
    """'64M' -> 67108864 (K, M, G suffixes, as tandem-perf takes them)."""
    m = re.fullmatch(r"([0-9]+)([KMG]?)", v.strip().upper())
    if not m:
        sys.exit(f"bad size {v!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def sweep_sizes(lo, hi):
    """tandem-perf's sweep: 0 first if lo is 0, doubling from lo, hi always."""
    if hi == 0:
        return [0]
    out = [0] if lo == 0 else []
    z = max(lo, 1)
    while z < hi:
        out.append(z)
        z *= 2
    out.append(hi)
    return out


def fmt_size(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def ratio(a, b):
    return f"{a / b:.2f}x" if a == a and b == b and b else "-"


def num(x, fmt):
    return format(x, fmt) if x == x else "-"


def main_p2p(argv):
    own, tandem_extra, mpi_extra = split_passthrough(argv)
    ap = argparse.ArgumentParser(prog="compare.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op", choices=P2P)
    ap.add_argument("n", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-size", default="1")
    ap.add_argument("--max-size", default="64M")
    ap.add_argument("--iters", help="tandem-perf's and p2p_bench's --iters (default theirs, 20000)")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "p2p-compare"))
    ap.add_argument("--plot")
    ap.add_argument("--per-size", action="store_true",
                    help="size by size: every round of one size (tandem, Open MPI, MPICH) "
                         "before the next size, so all three meet the same machine state")
    a = ap.parse_args(own)
    if a.n != 2:
        ap.error(f"{a.op} runs on exactly 2 ranks, got {a.n}")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    common = ["--min-size", a.min_size, "--max-size", a.max_size]
    if a.iters:
        common += ["--iters", a.iters]
    runs = {"tandem": [], "openmpi": [], "mpich": []}
    header, limits, libs = "", [], {}
    # One sweep per round, or (--per-size) one size at a time: then a
    # round's rows are gathered over every size.
    if a.per_size:
        sizes = sweep_sizes(parse_size(a.min_size), parse_size(a.max_size))
        plans = [["--min-size", str(z), "--max-size", str(z)] for z in sizes]
    else:
        plans = [common[:4]]
    extra = common[4:]
    for i in range(a.rounds):
        runs["tandem"].append([])
        runs["openmpi"].append([])
        runs["mpich"].append([])
    # --per-size: the machine state (one-way c2c) each side met, per size.
    states = {}
    for k, plan in enumerate(plans):
        for i in range(a.rounds):
            rows, header = run_tandem_p2p(a.op, plan + extra + tandem_extra,
                                          os.path.join(a.out, f"tandem-{a.op}-2-r{i}-{k}.json"))
            lim = parse_p2p_limits(header)
            if k == 0:
                limits.append(lim)
            runs["tandem"][i] += rows
            rd = os.path.join(a.out, f"r{i}")
            os.makedirs(rd, exist_ok=True)
            if a.per_size:
                st = states.setdefault(rows[0]["size"] if rows else k, ([], []))
                if lim.get("before", (None,))[0]:
                    st[0].append(lim["before"][0])
                c = c2c_now()
                if c:
                    st[1].append(c)
            res, lib = run_mpis_p2p(a.op, plan + extra + mpi_extra, rd)
            libs.update(lib)
            for mpi, rows in res.items():
                runs[mpi][i] += rows
    runs = {k: v for k, v in runs.items() if any(v)}
    med = {k: p2p_medians(v) for k, v in runs.items() if v}
    for k, m in med.items():
        with open(os.path.join(a.out, f"{k}-{a.op}-2.json"), "w") as f:
            json.dump([{"size": s, "p50_us": p50, "p99_us": p99, "gbps": g}
                       for s, (p50, p99, g) in sorted(m.items())], f, indent=1)
    nan = (float("nan"),) * 3
    t, o, m = med["tandem"], med.get("openmpi", {}), med.get("mpich", {})

    what = "half round trip (MPI_Send/MPI_Recv)" if a.op == "pingpong" else \
        "time per message in windows of up to 64 (MPI_Isend/MPI_Irecv + 1-byte ack)"
    order = "size by size, " if a.per_size else ""
    print(f"{a.op}, 2 ranks, {what}; medians of {a.rounds} alternating rounds "
          f"({order}tandem-perf, then Open MPI, then MPICH, each round)\n")
    for line in header.splitlines():
        if line.startswith("# tandem-perf"):
            print(f"    {line}")
    for mpi, name in MPI_NAMES.items():
        if mpi in libs:
            print(f"    # {name}: {libs[mpi]}")
    if tandem_extra or mpi_extra:
        print(f"    # tandem-perf only: {' '.join(tandem_extra) or '-'}; p2p_bench only: "
              f"{' '.join(mpi_extra) or '-'}")
    # The vCPUs of a VM move between physical cores: each round's limits,
    # as tandem-perf measured them before and after its sweep.
    def pair(lim, i, fmt):
        return "/".join(format(lim[k][i], fmt) if k in lim and lim[k][i] is not None else "?"
                        for k in ("before", "after"))
    print("    # one-way cache line before/after each tandem round: " +
          ", ".join(pair(lim, 0, ".0f") + " ns" for lim in limits))
    if a.op == "pingpong":
        # tandem's 8 B p50 in each round over that round's c2c readings,
        # before and after (they can differ by 4x on a VM: both shown).
        per = {"before": [], "after": []}
        cells = []
        for rows, lim in zip(runs["tandem"], limits):
            r8 = next((r for r in rows if r["size"] == 8), None)
            if not r8:
                continue
            rs = []
            for k in per:
                c = lim.get(k, (None, None))[0]
                if c:
                    per[k].append(r8["p50_us"] * 1e3 / c)
                rs.append(f"{per[k][-1]:.2f}x" if c else "?")
            cells.append("/".join(rs))
        if cells:
            meds = "/".join(f"{statistics.median(v):.2f}x" if v else "?" for v in per.values())
            print("    # tandem 8 B p50 / one-way c2c before/after, per round: " + ", ".join(cells) +
                  f"; medians {meds}")
        # Better: the c2c the same two ranks measured right before the 8 B
        # size (tandem-perf's JSON has it for sizes up to 64 B).
        inrun = [r["p50_us"] * 1e3 / r["c2c_ns"] for rows in runs["tandem"] for r in rows
                 if r["size"] == 8 and r.get("c2c_ns")]
        if inrun:
            c2cs = [r["c2c_ns"] for rows in runs["tandem"] for r in rows
                    if r["size"] == 8 and r.get("c2c_ns")]
            print("    # tandem 8 B p50 / one-way c2c measured right before it, per round: " +
                  ", ".join(f"{x:.2f}x ({c:.0f} ns)" for x, c in zip(inrun, c2cs)) +
                  f"; median {statistics.median(inrun):.2f}x")
            p99 = [r["p99_us"] / r["p50_us"] for rows in runs["tandem"] for r in rows
                   if r["size"] == 8]
            print("    # tandem 8 B p99/p50, per round: " + ", ".join(f"{x:.2f}" for x in p99))
    else:
        print("    # memcpy 64M (1 thread) before/after each tandem round: " +
              ", ".join(pair(lim, 1, ".1f") + " GB/s" for lim in limits))
    big = max(t) if t else None
    mem = [x for x in (mean_of(lim, 1) for lim in limits) if x]
    if big is not None and big >= 1 << 20 and mem:
        print(f"    # tandem {fmt_size(big)} GB/s / memcpy 64M (median of the rounds' means, "
              f"{statistics.median(mem):.1f} GB/s): {t[big][2] / statistics.median(mem):.2f}x")
    print()
    lat = a.op == "pingpong"
    unit = "half RTT" if lat else "per message"
    cols = ["size", f"tandem p50 µs ({unit})", "tandem p99 µs", "Open MPI p50 µs", "MPICH p50 µs"]
    if lat:
        cols.append("tandem / better MPI p50")
    cols += ["tandem GB/s", "Open MPI GB/s", "MPICH GB/s", "tandem / better MPI GB/s"]
    if states:
        cols.append("c2c ns before tandem / before MPI")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---:|" * len(cols))
    for s in sorted(t):
        tp50, tp99, tg = t[s]
        op50, _, og = o.get(s, nan)
        mp50, _, mg = m.get(s, nan)
        p50s = [x for x in (op50, mp50) if x == x]
        gs = [x for x in (og, mg) if x == x]
        best_p50 = min(p50s) if p50s else float("nan")
        best_g = max(gs) if gs else float("nan")
        cells = [fmt_size(s), num(tp50, ".3f"), num(tp99, ".3f"), num(op50, ".3f"), num(mp50, ".3f")]
        if lat:
            cells.append(ratio(tp50, best_p50))
        cells += [num(tg, ".3f"), num(og, ".3f"), num(mg, ".3f"), ratio(tg, best_g)]
        if states:
            st = states.get(s, ([], []))
            cells.append(" / ".join(",".join(f"{x:.0f}" for x in v) or "?" for v in st))
        print("| " + " | ".join(cells) + " |")
    if a.plot:
        cmd = [os.path.join(ROOT, "target", "release", "tandem-perf"), "plot", "--plot", a.plot,
               "--title", f"{a.op}, 2 ranks over shared memory, medians of {a.rounds} alternating rounds"]
        c2c = [x for x in (mean_of(lim, 0) for lim in limits) if x]
        if c2c:
            v = statistics.median(c2c)
            cmd += ["--ref-lat", f"one-way cache line {v:.0f} ns (same run)={v / 1000:.4f}"]
        if mem:
            v = statistics.median(mem)
            cmd += ["--ref-bw", f"memcpy 64M, 1 thread {v:.1f} GB/s (same run)={v:.3f}"]
        for k in ("tandem", "openmpi", "mpich"):
            if k in med:
                cmd += ["--compare", os.path.join(a.out, f"{k}-{a.op}-2.json")]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in P2P:
        main_p2p(sys.argv[1:])
    else:
        main()
