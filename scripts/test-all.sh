#!/usr/bin/env bash
# Runs every test of tandem: unit, multi-process integration and doc tests,
# the benchmark smoke runs, and the verification (model check of the
# protocol engine, loom models, mutation checks). This is the command
# README.md documents and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "unit, integration and doc tests (release)"
cargo test --workspace --release

step "tandem-perf smoke run (small sweep)"
cargo run --release -q -p tandem-benches --bin tandem-perf -- pingpong --max-size 1M --iters 2000
cargo run --release -q -p tandem-benches --bin tandem-perf -- pingpong --min-size 4M --max-size 4M --json
cargo run --release -q -p tandem-benches --bin tandem-perf -- bw --min-size 0 --max-size 256K --iters 2000 --json
cargo run --release -q -p tandem-driver --example pingpong -- 10000

step "criterion handshake bench, one pass each (--test)"
cargo bench -q -p tandem-benches --bench handshake -- --test

step "verification: model check, loom models, mutation checks (scripts/verify.sh)"
./scripts/verify.sh

step "all tests passed"
