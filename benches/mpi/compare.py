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
"""

import argparse
import json
import os
import re
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


if __name__ == "__main__":
    main()
