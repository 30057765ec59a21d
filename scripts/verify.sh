#!/usr/bin/env bash
# Runs all of tandem's verification and prints a summary:
#   1. the exhaustive model check of the protocol engine (tandem-verify):
#      the hand-written specs, every program of up to 3 operations over a
#      small grammar and 600 random programs (cancel, withdraw, probe, peer
#      death, two contexts, counters near 2^16), then every protocol-engine
#      mutant against them;
#   2. the loom models of the lock-free structures (slot ring, line ring,
#      credit window over line rings, request completion / user-proxy
#      hand-off, the hot paths: peek + consume, try_skip, the lock's switch
#      to shared mode), then every ring and lock mutant against them;
#   3. the fuzz targets (header decoding; two engines driven by arbitrary
#      call sequences and hostile headers, audit after every step, a
#      reference matcher as oracle), time-boxed, then against the protocol
#      mutants;
#   4. the deterministic simulation of the driver's real progress layer
#      (seeded scheduler, simulated transport; and transport faults it must
#      catch);
#   5. Miri over core's ring, lock, credit and wire tests, where a nightly
#      toolchain with miri is installed (skipped, with the reason, if not);
#   6. the driver's property tests below the API (TCP framing under partial
#      writes, the soft NIC's RC semantics under RNR, reductions with
#      adversarial operands, persistent requests of changing sizes), and
#      the driver's mutation-testing figures as last recorded by
#      scripts/mutants.sh (too slow for CI: hours on two cores).
# Exits non-zero if a property fails or a mutant goes uncaught.
# LOOM_MAX_PREEMPTIONS (default 3) sets loom's preemption bound.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

printf '\n==> model check of the protocol engine (+ protocol mutants)\n'
cargo run --release -q -p tandem-verify --features mutants --bin tandem-verify | tee -a "$log"

printf '\n==> loom models (+ ring and lock mutants), preemption bound %s\n' "${LOOM_MAX_PREEMPTIONS:-3}"
LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test --release -p tandem-verify --features mutants -- --nocapture --test-threads=1 2>&1 \
    | grep -E 'loom model|caught|^test result|FAILED|panicked at verify' | sed -E 's/^.*(loom model)/\1/' | tee -a "$log"

printf '\n==> fuzzing, time-boxed (TANDEM_FUZZ_SECS a target, default 20; a long run: TANDEM_FUZZ_SECS=3600)\n'
cargo run --release -q -p tandem-verify --features mutants --bin tandem-fuzz -- --secs "${TANDEM_FUZZ_SECS:-20}" | cut -c1-400 | tee -a "$log"
cargo run --release -q -p tandem-verify --features mutants --bin tandem-fuzz -- --mutants --secs 5 | tee -a "$log"

printf '\n==> deterministic simulation of the driver'"'"'s progress layer over a seeded simulated transport\n'
cargo test -q --release -p tandem-driver --lib sim_ -- --nocapture --test-threads=1 2>&1 \
    | grep -oE 'sim: .*|^test result.*|FAILED.*|panicked.*' | tee -a "$log"

printf '\n==> Miri over core'"'"'s ring, lock, credit and wire tests (undefined behaviour in the unsafe views)\n'
if cargo +nightly miri --version >/dev/null 2>&1; then
    # proptest keeps failure files (needs the file system); a few cases
    # each is enough for Miri, which checks every memory access of them.
    MIRIFLAGS="-Zmiri-disable-isolation" PROPTEST_CASES="${TANDEM_MIRI_CASES:-4}" \
        cargo +nightly miri test -q -p tandem-core --lib -- line_ring slot_ring lock wire credit 2>&1 \
        | grep -E '^test result|FAILED|Undefined Behavior|error' | sed 's/^/miri: /' | tee -a "$log"
else
    echo "miri: skipped: no nightly toolchain with the miri component (rustup component add miri --toolchain nightly)" | tee -a "$log"
fi

printf '\n==> the driver'"'"'s property tests below the API\n'
cargo test -q --release -p tandem-driver --lib -- transport::tcp prop 2>&1 \
    | grep -E '^test result|FAILED|panicked' | sed 's/^/driver props (lib): /' | tee -a "$log"
cargo test -q --release -p tandem-fabric --lib -- soft 2>&1 \
    | grep -E '^test result|FAILED|panicked' | sed 's/^/soft NIC props: /' | tee -a "$log"
cargo test -q --release -p tandem-driver --test coll_props --test persistent 2>&1 \
    | grep -E '^test result|FAILED|panicked' | sed 's/^/driver props: /' | tee -a "$log"

printf '\n==> summary\n'
models=$(grep -c '^loom model' "$log" || true)
execs=$(awk '/^loom model/ { for (i = 1; i <= NF; i++) if ($i == "executions,") s += $(i - 1) } END { print s + 0 }' "$log")
echo "model check: $(grep -c 'all properties held\|deadlock found as expected' "$log") specs held; $(grep '^  total:' "$log" | sed -E 's/^  total: //; s/; properties.*//')"
echo "generated programs: $(awk '/^  generated:/ { n += $2; s += $(NF-8); v += $(NF-2) } END { printf "%d checked exhaustively, %d states, %d violations", n, s, v }' "$log") ($(grep '^  generated:' "$log" | sed -E 's/^  generated: ([0-9]+) ([^:]+):.*/\1 \2/' | paste -sd ';' | sed 's/;/; /g'))"
echo "loom: $models model runs, $execs executions (bound ${LOOM_MAX_PREEMPTIONS:-3})"
echo "mutants caught: $(grep -c 'CAUGHT by\|caught by the loom' "$log") of $(grep -c 'CAUGHT by\|NOT CAUGHT\|caught by the loom' "$log")"
echo "fuzz: $(awk '/^fuzz (header|engine):/ { s += $3 } END { print s + 0 }' "$log") executions ($(grep -E '^fuzz (header|engine):' "$log" | awk '{ printf "%s%s %s", sep, $2, $3; sep=", " }')), $(grep -c 'FAILED at input' "$log") failures; protocol mutants the fuzzer catches: $(grep -c '^fuzz mutant .*CAUGHT' "$log") of $(grep -c '^fuzz mutant' "$log")"
grep -E 'CAUGHT by|caught by the loom|broken variant caught' "$log" | sed -E 's/^ +//; s/ after [0-9]+ states//' | cut -c1-160
grep -E '^sim: [0-9]+ seeds' "$log" | head -1 || echo "sim: no summary line found" 
echo "sim: transport faults caught: $(grep -E '^sim: fault (Drop|Duplicate|Corrupt|SwapChunks) ' "$log" | sed -E 's/^sim: fault ([A-Za-z]+) struck in ([0-9]+) of [0-9]+ seeds, caught in ([0-9]+)/\1 \3 of \2/' | paste -sd ',' | sed 's/,/, /g')"
grep '^miri:' "$log" | head -1
echo "driver property tests: $(awk '/^driver props.*test result/ { for (i = 2; i <= NF; i++) { if ($i == "passed;") p += $(i - 1); if ($i == "failed;") f += $(i - 1) } } END { printf "%d passed, %d failed", p, f }' "$log")"
if [ -f verify/driver-mutants.txt ]; then
    echo "driver mutation testing (recorded, not rerun here; scripts/mutants.sh):"
    grep -v '^#' verify/driver-mutants.txt | sed 's/^/  /'
    grep '^# at ' verify/driver-mutants.txt | sed 's/^# /  /'
fi
if grep -qE 'NOT CAUGHT|FAILED|VIOLATION|Undefined Behavior|^miri: error' "$log"; then
    echo "verification FAILED"
    exit 1
fi
echo "verification passed in $(( $(date +%s) - start )) s"
