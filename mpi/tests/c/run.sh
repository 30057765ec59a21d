#!/usr/bin/env bash
# Run the C MPI tests at several process counts and print a summary.
#
# Usage: run.sh [options] [LAUNCHER...]
#   LAUNCHER   command prefix that takes the process count next, then the
#              program: "$LAUNCHER N ./prog" (default: mpiexec.hydra -n)
#   -d DIR     directory holding the built tests (default: <repo>/target/mpi/tests)
#   -n "LIST"  process counts to try (default: "1 2 3 4"); each test only runs
#              at the counts listed on its "run-sizes:" line
#   -t SECS    timeout per run (default: 60)
#   -T "LIST"  tests to run (default: all tests except pingpong)
#   --bench    also run "pingpong --quick" at n=2 (reported, never fails)
#
# A run passes when it exits 0 within the timeout and prints "PASS <name>".
# Exit status: 0 when every run passed, 1 otherwise.  Logs of failing runs
# are printed (last 40 lines) and kept under $LOGDIR (default: a temp dir).
#
# Example with tandem:
#   LD_LIBRARY_PATH=/path/to/tandem/lib tests/c/run.sh mpiexec.hydra -n
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
BINDIR="$repo/target/mpi/tests"
NPS="1 2 3 4"
TMO=60
TESTS=""
BENCH=0
while [ $# -gt 0 ]; do
    case "$1" in
        -d) BINDIR="$2"; shift 2 ;;
        -n) NPS="$2"; shift 2 ;;
        -t) TMO="$2"; shift 2 ;;
        -T) TESTS="$2"; shift 2 ;;
        --bench) BENCH=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
if [ $# -gt 0 ]; then LAUNCHER=("$@"); else LAUNCHER=(mpiexec.hydra -n); fi
if [ -z "$TESTS" ]; then
    for src in "$here"/*.c; do
        t="$(basename "$src" .c)"
        [ "$t" = pingpong ] || TESTS="$TESTS $t"
    done
fi
LOGDIR="${LOGDIR:-$(mktemp -d /tmp/mpi-c-tests.XXXXXX)}"
mkdir -p "$LOGDIR"

pass=0; fail=0; summary=()
for t in $TESTS; do
    bin="$BINDIR/$t"
    if [ ! -x "$bin" ]; then
        summary+=("$(printf '%-10s %-3s %-8s %s' "$t" "-" "MISSING" "$bin")"); fail=$((fail+1)); continue
    fi
    sizes="$(sed -n 's/.*run-sizes:[[:space:]]*\([0-9 ]*\).*/\1/p' "$here/$t.c" 2>/dev/null | head -1)"
    [ -n "$sizes" ] || sizes="1 2 3 4"
    for n in $NPS; do
        case " $sizes " in *" $n "*) ;; *) continue ;; esac
        log="$LOGDIR/$t.n$n.log"
        start=$(date +%s.%N)
        timeout -k 5 "$TMO" "${LAUNCHER[@]}" "$n" "$bin" >"$log" 2>&1
        rc=$?
        secs=$(echo "$(date +%s.%N) - $start" | bc)
        if [ $rc -eq 0 ] && grep -q "^PASS $t\$" "$log"; then
            res=PASS; pass=$((pass+1))
        else
            if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then res=TIMEOUT; else res="FAIL"; fi
            fail=$((fail+1))
            echo "===== $t n=$n: $res (rc $rc), last lines of $log ====="
            tail -n 40 "$log"
        fi
        notes=$(grep -c '^NOTE' "$log")
        extra=""; [ "$notes" -gt 0 ] && extra=" ($notes NOTE lines: known reference-MPICH deviations)"
        summary+=("$(printf '%-10s n=%-2s %-8s %6.2fs rc=%d%s' "$t" "$n" "$res" "$secs" "$rc" "$extra")")
    done
done

if [ $BENCH -eq 1 ] && [ -x "$BINDIR/pingpong" ]; then
    echo "===== pingpong --quick (n=2) ====="
    timeout -k 5 "$TMO" "${LAUNCHER[@]}" 2 "$BINDIR/pingpong" --quick 2>&1 | tee "$LOGDIR/pingpong.log"
fi

echo "===== summary ($(printf '%s ' "${LAUNCHER[@]}")N; logs in $LOGDIR) ====="
printf '%s\n' "${summary[@]}"
echo "passed $pass, failed $fail"
[ $fail -eq 0 ]
