#!/usr/bin/env bash
# Builds tandem's MPI library (MPICH's binary interface) into target/mpi:
#   lib/libmpich.so.12 (soname libmpich.so.12) and the names programs and
#   loaders look for: libmpich.so, libmpi.so.12, libmpi.so;
#   include/mpi.h, declaring what the library implements.
# Run a program built with mpicc.mpich on tandem:
#   LD_LIBRARY_PATH=$PWD/target/mpi/lib mpiexec.hydra -n 2 ./prog
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p tandem-mpi
out=target/mpi
mkdir -p "$out/lib" "$out/include"
cp -f target/release/libtandem_mpi.so "$out/lib/libmpich.so.12"
for name in libmpich.so libmpi.so.12 libmpi.so; do
    ln -sf libmpich.so.12 "$out/lib/$name"
done
cp -f mpi/include/mpi.h "$out/include/mpi.h"
echo "tandem MPI library: $out/lib/libmpich.so.12 (header $out/include/mpi.h)"
