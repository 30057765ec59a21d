#!/usr/bin/env bash
# MPI-IO throughput (benches/mpi/io_bench.c, built with mpicc.mpich) on
# MPICH (ROMIO) and on tandem's MPI library, the same binary, rounds
# alternating; the file is in /tmp (the page cache).
# Usage: benches/mpi/io-compare.sh [rounds] [MiB per rank] [ranks]
# (BENCHMARKS.md, "MPI-IO").
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
mib=${2:-16}
np=${3:-2}
lscpu | grep "Model name"
./scripts/build-mpi.sh >/dev/null
mkdir -p target/mpi/bench
mpicc.mpich -O2 -o target/mpi/bench/io_bench benches/mpi/io_bench.c
sizes="4 64 1024 4096 65536"
for r in $(seq "$rounds"); do
    echo "== round $r: tandem"
    LD_LIBRARY_PATH=$PWD/target/mpi/lib mpiexec.hydra -n "$np" target/mpi/bench/io_bench "$mib" "$sizes"
    echo "== round $r: MPICH"
    mpiexec.hydra -n "$np" target/mpi/bench/io_bench "$mib" "$sizes" 2>&1 | grep -v "^\[WARNING\] yaksa"
done
