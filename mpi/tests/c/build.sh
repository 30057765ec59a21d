#!/usr/bin/env bash
# Build every C test program in this directory against MPICH's mpi.h.
#
# Usage: build.sh [OUT]
#   OUT      output directory (default: <repo>/target/mpi/tests)
#   MPICC    compiler wrapper (default: mpicc.mpich)
#   CFLAGS   extra flags appended to the defaults
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
OUT="${1:-$repo/target/mpi/tests}"
MPICC="${MPICC:-mpicc.mpich}"
# -Wno-stringop-overflow: GCC false positive on MPI_STATUSES_IGNORE.
# -Wno-int-in-bool-context: generic reduction macro instantiated for bool.
FLAGS=(-O2 -g -Wall -Wno-stringop-overflow -Wno-int-in-bool-context)

command -v "$MPICC" >/dev/null || { echo "build.sh: $MPICC not found (apt-get install -y mpich libmpich-dev)" >&2; exit 2; }
mkdir -p "$OUT"
status=0
for src in "$here"/*.c; do
    name="$(basename "$src" .c)"
    # shellcheck disable=SC2086
    if "$MPICC" "${FLAGS[@]}" ${CFLAGS:-} -o "$OUT/$name" "$src"; then
        echo "built $OUT/$name"
    else
        echo "build.sh: FAILED to build $name" >&2
        status=1
    fi
done
exit $status
