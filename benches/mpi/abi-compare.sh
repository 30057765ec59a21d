#!/usr/bin/env bash
# The same binaries on MPICH and on tandem's MPI library (LD_LIBRARY_PATH is
# the only difference), rounds interleaved, beside tandem-perf's 8 B
# ping-pong in the same session: our C benchmark (mpi/tests/c/pingpong.c,
# built with mpicc.mpich), Debian's NetPIPE (NPmpich2) and mpi4py's
# pingpong. Usage: benches/mpi/abi-compare.sh [rounds] (BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
lscpu | grep "Model name"
./scripts/build-mpi.sh >/dev/null
bash mpi/tests/c/build.sh target/mpi/tests >/dev/null
cargo build --release -q -p tandem-benches --bin tandem-perf
tandem=$PWD/target/mpi/lib
# MPICH's own library under the name mpi4py's wheel links (Debian ships
# libmpich.so.12 only).
mpich=$PWD/target/mpi/mpich-lib
mkdir -p "$mpich"
ln -sf "$(ldconfig -p | awk '/libmpich.so.12 /{print $NF; exit}')" "$mpich/libmpi.so.12"
py=${PYTHON:-target/mpi/venv/bin/python}
for r in $(seq "$rounds"); do
    for lib in MPICH tandem; do
        if [ $lib = tandem ]; then export LD_LIBRARY_PATH=$tandem; else export LD_LIBRARY_PATH=$mpich; fi
        echo "## round $r, $lib: pingpong.c"
        mpiexec.hydra -n 2 target/mpi/tests/pingpong | grep -v "^#"
        echo "## round $r, $lib: NetPIPE (8 B, 1 KiB, 64 KiB, 1 MiB)"
        (cd target/mpi && mpiexec.hydra -n 2 NPmpich2 -u 1048576 -o np-$lib.out >/dev/null 2>&1)
        awk '$1==8||$1==1024||$1==65536||$1==1048576 {printf "netpipe %d %.3f us %.2f GB/s\n", $1, $3*1e6, $2/8000}' target/mpi/np-$lib.out
        if [ -x "$py" ]; then
            echo "## round $r, $lib: mpi4py pingpong (8 B, 64 KiB)"
            mpiexec.hydra -n 2 "$py" -m mpi4py.bench pingpong -m 8 -n 65536 | awk '$1==8||$1==65536 {printf "mpi4py %d %.3f us\n", $1, $4*1e6}'
        fi
    done
    unset LD_LIBRARY_PATH
    echo "## round $r: tandem-perf pingpong (8 B), the same session"
    target/release/tandem-perf pingpong --min-size 8 --max-size 8 | grep -E "^ *8 |x the|cache" | head -4
done
