#!/usr/bin/env bash
# Runs every test of tandem: unit, multi-process integration and doc tests,
# the benchmark smoke runs, and the verification (model check of the
# protocol engine, loom models, mutation checks). This is the command
# README.md documents and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# The launcher tests start real jobs with Debian's Open MPI and MPICH, the
# multi-host tests build network namespaces with iproute2 and talk to them
# with python3, and the verbs fabric (feature `verbs`, through sideway)
# needs cmake and libclang to build: install what is missing (as root;
# otherwise say so).
need=()
command -v mpirun.openmpi >/dev/null || need+=(openmpi-bin)
command -v mpiexec.hydra >/dev/null || need+=(mpich)
# The MPI library's tests: mpicc.mpich and MPICH's header, a venv for
# mpi4py from PyPI, Debian's NetPIPE built for MPICH.
command -v mpicc.mpich >/dev/null || need+=(libmpich-dev)
python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
command -v NPmpich2 >/dev/null || need+=(netpipe-mpich2)
# Parallel HDF5 built for MPICH: a real client of the library's MPI-IO.
command -v h5pcc.mpich >/dev/null || need+=(libhdf5-mpich-dev)
command -v gcc >/dev/null || need+=(gcc)
command -v ip >/dev/null || need+=(iproute2)
command -v python3 >/dev/null || need+=(python3)
command -v cmake >/dev/null || need+=(cmake)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        step "installing ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "missing ${need[*]}: install them (apt-get install ${need[*]}) or run as root" >&2
        exit 1
    fi
fi

step "unit, integration and doc tests (release)"
cargo test --workspace --release

step "the verbs fabric (sideway): builds, and says clearly when there is no RDMA device"
cargo test -p tandem-driver --release --features verbs --test verbs

step "tandem-perf smoke run (small sweep)"
cargo run --release -q -p tandem-benches --bin tandem-perf -- pingpong --max-size 1M --iters 2000
cargo run --release -q -p tandem-benches --bin tandem-perf -- pingpong --min-size 4M --max-size 4M --json
cargo run --release -q -p tandem-benches --bin tandem-perf -- bw --min-size 0 --max-size 256K --iters 2000 --json
cargo run --release -q -p tandem-driver --example pingpong -- 10000
cargo run --release -q -p tandem-driver --example collectives -- 3
cargo run --release -q -p tandem-benches --bin tandem-perf -- allreduce --max-size 1M --iters 500
cargo run --release -q -p tandem-benches --bin tandem-perf -- alltoall -n 3 --max-size 64K --iters 200 --json --plot target/smoke-alltoall.svg

step "receiver-not-ready reproduced (naive SENDs) and prevented (tandem) on the soft RDMA NIC"
cargo run --release -q -p tandem-driver --example rnr

step "criterion handshake bench, one pass each (--test)"
cargo bench -q -p tandem-benches --bench handshake -- --test

step "the GPU check: both halves build and run; without a GPU every check says it skipped and why"
./scripts/gpu-check.sh --build
./scripts/gpu-check.sh --run | tee target/gpu-check/run.log
cargo run --release -q -p tandem-benches --bin tandem-perf -- gpu-flags --iters 1000
cargo run --release -q -p tandem-benches --bin tandem-perf -- pingpong --device gpu --max-size 64K
cargo run --release -q -p tandem-benches --bin tandem-perf -- bw --device gpu --max-size 4M
cargo run --release -q -p tandem-benches --bin tandem-perf -- allreduce --device gpu --max-size 4M
grep -Eq '^0 passed, 0 failed, [0-9]+ skipped$|^[0-9]+ passed, 0 failed' target/gpu-check/run.log

step "the MPI library: C programs, mpi4py (bench and test suite), NetPIPE (scripts/test-mpi.sh)"
./scripts/test-mpi.sh

step "verification: model check, loom models, mutation checks (scripts/verify.sh)"
./scripts/verify.sh

step "all tests passed"
