#!/usr/bin/env bash
# Two network namespaces joined by a veth pair, as two "hosts" for the
# benchmarks in BENCHMARKS.md: tq0 (10.250.0.1) and tq1 (10.250.0.2).
#   scripts/netns-pair.sh up     # create (as root)
#   scripts/netns-pair.sh down   # remove
# Then e.g.:
#   tandem-run -n 2 --hosts tq0,tq1 --exec 'ip netns exec {host}' \
#       --root 10.250.0.1:29961 -- tandem-perf pingpong
set -euo pipefail
case "${1:-}" in
up)
    for i in 0 1; do
        ip netns add "tq$i"
        ip -n "tq$i" link set lo up
    done
    ip link add tqv0 netns tq0 type veth peer name tqv1 netns tq1
    for i in 0 1; do
        ip -n "tq$i" addr add "10.250.0.$((i + 1))/24" dev "tqv$i"
        ip -n "tq$i" link set "tqv$i" up
    done
    ip netns exec tq0 ping -c 1 -W 2 10.250.0.2 >/dev/null
    echo "tq0 10.250.0.1 <-> tq1 10.250.0.2"
    ;;
down)
    for i in 0 1; do ip netns del "tq$i" 2>/dev/null || true; done
    ;;
*)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
