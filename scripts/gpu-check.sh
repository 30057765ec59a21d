#!/usr/bin/env bash
# The GPU check, in two halves (issue 24).
#
#   scripts/gpu-check.sh --build   on the CPU machine: builds the release
#       binaries the check needs, strips their debug information (the
#       release profile keeps it; what is carried must stay small) and puts
#       them in target/gpu-check/.
#   scripts/gpu-check.sh --run     on a machine with an NVIDIA GPU and no
#       Rust toolchain, from target/gpu-check/ alone: runs every check, each
#       under its own time limit (the whole well under 5 minutes), one line
#       per check and a last line "N passed, N failed, N skipped"; exits
#       non-zero on any failure. CUDA's driver and NVRTC are found at run
#       time (libcuda.so.1, libnvrtc.so.13); without them every check says
#       that it skipped and why.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/gpu-check
case "${1:-}" in
    --build)
        cargo build --release -p tandem-gpu --bin tandem-gpu-check
        mkdir -p "$out"
        for b in tandem-gpu-check; do
            cp target/release/$b "$out/$b"
            strip --strip-debug "$out/$b"
        done
        ls -l "$out"
        ;;
    --run)
        [ -x "$out/tandem-gpu-check" ] || { echo "gpu-check: $out/tandem-gpu-check missing: run --build first" >&2; exit 2; }
        command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        timeout 290 "$out/tandem-gpu-check"
        ;;
    *)
        sed -n '2,15p' "$0"
        exit 2
        ;;
esac
