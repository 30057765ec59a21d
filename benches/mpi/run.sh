#!/usr/bin/env bash
# Builds the MPI baseline against each installed MPI (Open MPI, MPICH) and
# runs it on N ranks of this machine (shared memory only): coll_bench for a
# collective, p2p_bench for pingpong and bw (exactly 2 ranks).
#
#   benches/mpi/run.sh <op> <nranks> [coll_bench or p2p_bench options...]
#   benches/mpi/run.sh allreduce 2
#   benches/mpi/run.sh allreduce 4 --max-size 1M
#   OUT=/tmp/res MPIS=mpich benches/mpi/run.sh broadcast 2 --type f64
#   benches/mpi/run.sh pingpong 2 --max-size 1M
#   benches/mpi/run.sh bw 2
#
# Writes $OUT/openmpi-<op>-<n>.json and $OUT/mpich-<op>-<n>.json (the JSON
# array of coll_bench/p2p_bench --json) and the tables next to them as .txt;
# the tables are also printed. Binaries go to target/mpi-bench/bin/.
#
# Environment:
#   OUT          result directory (default target/mpi-bench)
#   MPIS         which MPIs, in order (default "openmpi mpich")
#   CFLAGS       compiler flags (default -O2)
#   OPENMPI_CC, OPENMPI_RUN, MPICH_CC, MPICH_RUN   override the wrappers
#                (defaults mpicc.openmpi, mpirun.openmpi, mpicc.mpich,
#                mpirun.mpich)
# An MPI whose wrappers are missing is skipped with a message. Exit status:
# non-zero when a run failed or reported wrong results, or no MPI was found.
set -u

usage() {
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}
[ $# -ge 2 ] || usage
case "$1" in -h | --help) usage ;; esac
op=$1
n=$2
shift 2
case "$n" in '' | *[!0-9]*) echo "run.sh: rank count must be a number, got '$n'" >&2; exit 2 ;; esac
# pingpong and bw: p2p_bench, two ranks; anything else: coll_bench (which
# names the collectives it knows).
case "$op" in
pingpong | bw)
    prog=p2p_bench
    if [ "$n" -ne 2 ]; then
        echo "run.sh: $op runs on exactly 2 ranks, got $n" >&2
        exit 2
    fi
    ;;
*) prog=coll_bench ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=$here/$prog.c
bindir=$root/target/mpi-bench/bin
out=${OUT:-$root/target/mpi-bench}
mkdir -p "$bindir" "$out" || exit 1
cflags=${CFLAGS:--O2}
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)

# build <name> <cc>: compiles $prog when the binary is missing or older
# than the source or this script, or was built with other flags; prints
# the binary's path.
build() {
    local name=$1 cc=$2 bin=$bindir/$prog-$1
    if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ] || [ "$0" -nt "$bin" ] ||
        [ "$(cat "$bin.flags" 2>/dev/null)" != "$cc $cflags" ]; then
        echo "# building $bin with $cc $cflags" >&2
        # shellcheck disable=SC2086
        "$cc" $cflags -std=c11 -Wall -Wextra -o "$bin.tmp" "$src" || return 1
        mv "$bin.tmp" "$bin" && echo "$cc $cflags" >"$bin.flags"
    fi
    echo "$bin"
}

# The shared-memory BTL is "vader" in Open MPI 3.x/4.x and "sm" in 5.x.
ompi_btl() {
    local info
    info=$(command -v "$(dirname "$(command -v "$1")")/ompi_info" 2>/dev/null || command -v ompi_info 2>/dev/null)
    if [ -n "$info" ] && "$info" --parsable 2>/dev/null | grep '^mca:btl:vader:' >/dev/null; then
        echo self,vader
    else
        echo self,sm
    fi
}

status=0
ran=0
for mpi in ${MPIS:-openmpi mpich}; do
    case "$mpi" in
    openmpi)
        cc=${OPENMPI_CC:-mpicc.openmpi}
        run=${OPENMPI_RUN:-mpirun.openmpi}
        ;;
    mpich)
        cc=${MPICH_CC:-mpicc.mpich}
        run=${MPICH_RUN:-mpirun.mpich}
        ;;
    *)
        echo "run.sh: unknown MPI '$mpi' (openmpi or mpich)" >&2
        status=1
        continue
        ;;
    esac
    if ! command -v "$cc" >/dev/null || ! command -v "$run" >/dev/null; then
        echo "# $mpi: $cc or $run not found, skipped" >&2
        continue
    fi
    bin=$(build "$mpi" "$cc") || {
        # The wrapper can be there without the headers (openmpi-bin without
        # libopenmpi-dev, as the test command installs it).
        echo "# $mpi: build failed (on Debian the headers are in libopenmpi-dev / libmpich-dev)" >&2
        status=1
        continue
    }

    if [ "$mpi" = openmpi ]; then
        # ob1 + shared-memory BTL: no UCX/OFI/TCP probing on a machine
        # without a network; --allow-run-as-root (and the env pair, for
        # any child launcher) so it works as root.
        if [ "$n" -le "$cores" ]; then bind=core; else bind=none; fi
        launch=(env OMPI_MCA_pml=ob1 OMPI_MCA_btl="$(ompi_btl "$run")"
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
            "$run" --allow-run-as-root --oversubscribe -np "$n" --bind-to "$bind")
    else
        # Hydra: pinned to cores when they suffice, like the Open MPI run.
        if [ "$n" -le "$cores" ]; then bind=(-bind-to core); else bind=(); fi
        launch=("$run" -n "$n" "${bind[@]}")
    fi

    json=$out/$mpi-$op-$n.json
    txt=$out/$mpi-$op-$n.txt
    {
        echo "# $mpi: ${launch[*]} $bin $op --json $*"
        # Other work on the cores shows up as preempted calls (often a
        # whole scheduler slice, milliseconds): note the load.
        [ -r /proc/loadavg ] && echo "# $mpi: load average before the run: $(cut -d' ' -f1-3 /proc/loadavg), $cores cores"
    } | tee "$txt" >&2
    # stdout (the JSON) to the file; stderr (headers and table) on the
    # terminal and in the .txt.
    "${launch[@]}" "$bin" "$op" --json "$@" 2>&1 >"$json.tmp" | tee -a "$txt" >&2
    rc=${PIPESTATUS[0]}
    ran=$((ran + 1))
    if [ "$rc" -ne 0 ]; then
        echo "# $mpi: exit status $rc" >&2
        status=1
    fi
    if [ -s "$json.tmp" ]; then
        mv "$json.tmp" "$json"
        echo "# $mpi: wrote $json" >&2
    else
        rm -f "$json.tmp"
        echo "# $mpi: no JSON written" >&2
        status=1
    fi
    echo >&2
done
if [ "$ran" -eq 0 ]; then
    echo "run.sh: no MPI found (need mpicc.openmpi/mpirun.openmpi or mpicc.mpich/mpirun.mpich)" >&2
    exit 1
fi
exit "$status"
