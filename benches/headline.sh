#!/usr/bin/env bash
# The headline of BENCHMARKS.md, in one run on the machine at hand:
#
#   1. the CPU, the rendezvous paths and the cell threshold this host's
#      calibration chose;
#   2. tandem's 8 B half round trip (send/recv, then persistent requests)
#      against both cache-line floors, measured by the same two ranks right
#      before (tandem-perf pingpong);
#   3. ping-pong from 1 B to 64 MiB beside Open MPI and MPICH (p2p_bench),
#      rounds alternating tandem / Open MPI / MPICH: with osu_latency's
#      separate send and receive buffers, then with one buffer both ways;
#   4. windowed bandwidth from 64 KiB to 64 MiB, the same way;
#   5. the machine's memcpy (tandem-perf c2c), the reference from 16 MiB.
#
#   benches/headline.sh [rounds]        (default 1; OUT=dir, default target/headline)
#
# Needs Open MPI and MPICH with their compilers (Debian: openmpi-bin
# libopenmpi-dev mpich libmpich-dev); an MPI that is missing is skipped by
# benches/mpi/run.sh with a message. Runs for about ten minutes per round.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
out=${OUT:-target/headline}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release -q -p tandem-benches --bin tandem-perf
perf=target/release/tandem-perf

echo "## machine"
lscpu | grep -E "Model name|^CPU\(s\)|Vendor ID" || true
date -u
echo "## calibration (TANDEM_DEBUG=INFO)"
TANDEM_DEBUG=INFO "$perf" pingpong --min-size 8 --max-size 8 --iters 2000 2>&1 | grep "calibrated\|cells" || true

echo "## 8 B against both floors"
"$perf" pingpong --min-size 8 --max-size 8 --iters 200000 | grep -E "^ +8 |x the"
"$perf" pingpong --min-size 8 --max-size 8 --iters 200000 --persistent | grep -E "^ +8 |x the"

echo "## ping-pong, separate send and receive buffers (osu_latency's pattern)"
python3 benches/mpi/compare.py pingpong 2 --rounds "$rounds" --min-size 1 --max-size 64M \
    --out "$out/pingpong-separate" --tandem-args --separate --mpi-args --separate

echo "## ping-pong, one buffer both ways"
python3 benches/mpi/compare.py pingpong 2 --rounds "$rounds" --min-size 1 --max-size 64M \
    --out "$out/pingpong-one"

echo "## windowed bandwidth"
python3 benches/mpi/compare.py bw 2 --rounds "$rounds" --min-size 64K --max-size 64M \
    --out "$out/bw"

echo "## the machine's limits"
"$perf" c2c
