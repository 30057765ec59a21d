#!/usr/bin/env bash
# One-sided latency (benches/mpi/rma_bench.c, built with mpicc.mpich) on
# MPICH and on tandem's MPI library, the same binary, rounds alternating.
# Usage: benches/mpi/rma-compare.sh [rounds] (BENCHMARKS.md, "One-sided").
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
lscpu | grep "Model name"
./scripts/build-mpi.sh >/dev/null
mkdir -p target/mpi/bench
mpicc.mpich -O2 -o target/mpi/bench/rma_bench benches/mpi/rma_bench.c
for r in $(seq "$rounds"); do
    echo "== round $r: tandem"
    LD_LIBRARY_PATH=$PWD/target/mpi/lib mpiexec.hydra -n 2 target/mpi/bench/rma_bench
    echo "== round $r: MPICH"
    mpiexec.hydra -n 2 target/mpi/bench/rma_bench
done
