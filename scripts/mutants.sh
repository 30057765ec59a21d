#!/usr/bin/env bash
# Mutation testing of the driver (cargo-mutants): seeds one-line bugs into
# the files below, one at a time, and runs each file's fast, targeted test
# command against every mutant. A mutant the tests do not notice ("missed")
# is a behaviour no test pins down. Not part of CI: a full run takes hours
# on two cores; run it while you work, a file or a shard at a time.
#
#   scripts/mutants.sh                 every file below, in turn
#   scripts/mutants.sh auth tcp        some of them (names in the table)
#   SHARD=0/8 scripts/mutants.sh coll  one shard of a file's mutants
#   ITERATE=1 scripts/mutants.sh tcp   only the mutants an earlier run of
#                                      the same row/shard did not catch
#   REPLAY=missed.txt scripts/mutants.sh tcp
#                                      only the mutants a list names (a
#                                      missed.txt of an earlier run), found
#                                      again by name whatever their line
#                                      numbers now; results in
#                                      target/mutants/<name>-replay
#   scripts/mutants.sh --summary       kill rates from the results so far
#   scripts/mutants.sh --record        the same, written to
#                                      verify/driver-mutants.txt (committed;
#                                      scripts/verify.sh prints it)
#
# Results go to target/mutants/<name>/mutants.out (cargo-mutants' own
# layout: caught.txt, missed.txt, timeout.txt, unviable.txt), one folder
# per file and shard; --summary (also printed by scripts/verify.sh) counts
# them: caught / (caught + missed + timeout); unviable mutants (that do
# not build) count for nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | package | files (cargo-mutants --file globs, space-separated) | test
# timeout in seconds (a mutant that hangs the tests counts as caught;
# about three times the unmutated command's time on two cores, since
# timeouts are most of a run's time) |
# settings for the tests | targeted test command (cargo test arguments; the test
# profile, opt-level 1, so a mutant rebuilds in seconds). A name filter
# after --lib would apply to every test binary named, so a file checked by
# integration tests names whole binaries instead.
table=(
    "auth|tandem-driver|driver/src/world/bootstrap/auth.rs|30||--lib world::bootstrap::auth"
    "persistent|tandem-driver|driver/src/comm/persistent.rs|60||--test persistent"
    "tcp|tandem-driver|driver/src/transport/tcp.rs|30||--lib transport::tcp transport::contract"
    "soft|tandem-fabric|fabric/src/soft.rs|15||--lib soft"
    "rdma|tandem-driver|driver/src/transport/rdma.rs|60|TANDEM_CONFORMANCE_LINKS=soft-rdma,soft-rdma-read|--lib --test soft_rdma_props --test faults --test conformance"
    "shm|tandem-driver|driver/src/transport/shm/*.rs driver/src/job.rs|90|TANDEM_CONFORMANCE_LINKS=shm|--test p2p --test conformance --test faults"
    "coll|tandem-driver|driver/src/coll/mod.rs driver/src/coll/exec.rs driver/src/coll/plan.rs driver/src/coll/types.rs|40||--test coll_props --test collectives"
    "collective|tandem-driver|driver/src/comm/collective.rs|40||--test coll_props --test collectives"
)

summary() {
    local total_c=0 total_m=0
    printf '%-16s %7s %7s %7s %8s %6s\n' file caught missed timeout unviable kill
    for row in "${table[@]}"; do
        local name=${row%%|*} c=0 m=0 t=0 u=0 label
        label=$name
        for d in target/mutants/"$name" target/mutants/"$name"-shard*; do
            [ -d "$d/mutants.out" ] || continue
            case $d in *-shard*) label="$label ${d##*-shard}" ;; esac
            c=$((c + $(wc -l < "$d/mutants.out/caught.txt")))
            m=$((m + $(wc -l < "$d/mutants.out/missed.txt")))
            t=$((t + $(wc -l < "$d/mutants.out/timeout.txt")))
            u=$((u + $(wc -l < "$d/mutants.out/unviable.txt")))
        done
        local n=$((c + m + t))
        if [ "$n" -eq 0 ]; then
            printf '%-16s %7s\n' "$name" "not run"
            continue
        fi
        # A mutant that hangs the tests is caught (the timeout notices it).
        printf '%-16s %7d %7d %7d %8d %5d%%\n' "$label" "$c" "$m" "$t" "$u" $(( (c + t) * 100 / n ))
        total_c=$((total_c + c + t))
        total_m=$((total_m + m))
    done
    if [ $((total_c + total_m)) -gt 0 ]; then
        echo "driver mutants: $total_c caught of $((total_c + total_m)) ($(( total_c * 100 / (total_c + total_m) ))%)"
    fi
}

if [ "${1:-}" = "--summary" ]; then
    summary
    exit 0
fi
if [ "${1:-}" = "--record" ]; then
    {
        echo "# cargo-mutants over the driver (scripts/mutants.sh), recorded $(date -u +%Y-%m-%d)"
        echo "# at $(git rev-parse --short HEAD) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores."
        echo "# kill = (caught + timeout) / (caught + missed + timeout); a row naming shards (0of8: shard 0 of 8) is a sample."
        summary
    } > verify/driver-mutants.txt
    cat verify/driver-mutants.txt
    exit 0
fi

command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
want=("$@")
for row in "${table[@]}"; do
    IFS='|' read -r name package files timeout settings tests <<< "$row"
    if [ ${#want[@]} -gt 0 ] && ! printf '%s\n' "${want[@]}" | grep -x "$name" >/dev/null; then
        continue
    fi
    args=(-p "$package" -j1 --timeout "$timeout" --baseline skip)
    for f in $files; do args+=(-f "$f"); done
    out="target/mutants/$name"
    if [ -n "${SHARD:-}" ]; then
        args+=(--shard "$SHARD" --sharding round-robin)
        out="target/mutants/$name-shard${SHARD//\//of}"
    fi
    mkdir -p "$out"
    if [ -n "${ITERATE:-}" ]; then
        args+=(--iterate)
    fi
    if [ -n "${REPLAY:-}" ]; then
        out="target/mutants/$name-replay"
        mkdir -p "$out"
        # Each listed mutant by its exact name where the code still has it,
        # else by its description with the line and column left free.
        now=$(cargo mutants "${args[@]}" --list 2>/dev/null)
        while IFS= read -r re; do
            args+=(--re "$re")
        done < <(NOW="$now" python3 - "$REPLAY" <<'PY'
import os, re, sys
now = set(os.environ["NOW"].splitlines())
esc = lambda t: re.sub(r'([\\.+*?()|\[\]{}^$])', r'\\\1', t)
for line in open(sys.argv[1]):
    line = line.strip()
    m = re.match(r'^([^:]+):\d+:\d+: (.*)$', line)
    if not m:
        continue
    if line in now:
        print('^' + esc(line) + '$')
    else:
        print('^' + esc(m.group(1)) + r':\d+:\d+: ' + esc(m.group(2)) + '$')
PY
)
    fi
    # The target selection (--lib, --test X) also goes to cargo-mutants'
    # build step (-C), which otherwise builds every test binary and example
    # of the crate for each mutant; the name filters go to the test run only.
    filters=()
    read -ra words <<< "$tests"
    for ((i = 0; i < ${#words[@]}; i++)); do
        case ${words[i]} in
            --lib) args+=(-C --lib) ;;
            --test) args+=(-C --test -C "${words[i + 1]}"); i=$((i + 1)) ;;
            *) filters+=("${words[i]}") ;;
        esac
    done
    printf '\n==> %s: %s cargo mutants %s -- %s\n' "$name" "$settings" "${args[*]}" "${filters[*]}"
    # cargo-mutants exits non-zero when a mutant is missed: keep going.
    # shellcheck disable=SC2086
    env $settings cargo mutants "${args[@]}" -o "$out" -- "${filters[@]}" || true
done
summary
