#!/usr/bin/env bash
# tandem on a real RDMA host pair: the conformance scenarios and
# tandem-perf over verbs, beside perftest's ib_send_lat / ib_write_bw
# measured in the same run between the same two hosts.
#
#   scripts/rdma-check.sh HOST_A HOST_B
#
# Run it on HOST_A from a checkout on a file system both hosts share (NFS,
# as on most clusters), with password-less ssh to HOST_B. It needs cargo,
# cmake and libclang (to build the verbs feature), libibverbs with the
# device's provider, and perftest (`apt-get install perftest`) on both.
#
# Environment: TANDEM_IB_DEV (default: the first device with an ACTIVE
# port 1), TANDEM_IB_PORT (1), TANDEM_IB_GID_INDEX (RoCE: default the first
# RoCE v2 GID that is not link-local), ROOT_PORT (29970).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { sed -n '2,16p' "$0"; exit 2; }
A=$1
B=$2
PORT=${ROOT_PORT:-29970}
step() { printf '\n==> %s\n' "$*"; }

step "build with the verbs feature"
cargo build --release --features tandem-driver/verbs -p tandem-driver -p tandem-benches \
    --bin tandem-run --bin tandem-perf
conf=$(cargo test --release -p tandem-driver --features verbs --test conformance --no-run \
    --message-format=json 2>/dev/null | sed -n 's/.*"executable":"\([^"]*conformance[^"]*\)".*/\1/p' | tail -1)
run=./target/release/tandem-run
perf=./target/release/tandem-perf
dev=${TANDEM_IB_DEV:-$(for d in /sys/class/infiniband/*; do
    grep -q ACTIVE "$d/ports/${TANDEM_IB_PORT:-1}/state" 2>/dev/null && basename "$d" && break
done)}
[ -n "$dev" ] || { echo "no RDMA device with an ACTIVE port on $A" >&2; exit 1; }
echo "device $dev on $A and $B"
export TANDEM_TRANSPORT=verbs TANDEM_IB_DEV=$dev TANDEM_RNR_RETRY=0
gidopt=()
[ -n "${TANDEM_IB_GID_INDEX:-}" ] && gidopt=(-x "$TANDEM_IB_GID_INDEX")

step "the verbs tests, on each host"
for h in "$A" "$B"; do
    ssh "$h" "cd $PWD && cargo test --release -q -p tandem-driver --features verbs --test verbs"
done

step "conformance scenarios between $A and $B over verbs (rnr_retry = 0)"
fail=0
for s in send_flood_without_loss:2 probe_waits_for_a_later_message:2 \
    tiny_message_into_huge_receive:2 many_large_messages_in_flight:2 \
    cancel_unmatched_and_matched_receives:2 dup_traffic_never_matches_world_receives:2 \
    truncation_delivers_a_prefix_and_keeps_the_next_message:2 wait_any_and_test_all:2 \
    unexpected_messages_beyond_the_eager_credits_never_block_a_matchable_one:2 \
    any_source_any_tag_keep_per_sender_order:4 huge_messages_with_wildcards:3 \
    sendrecv_ring_and_group_exchanges_complete:4; do
    name=${s%%:*} n=${s##*:}
    for rndv in write read; do
        PORT=$((PORT + 1))
        if TANDEM_RDMA_RNDV=$rndv TANDEM_CONFORMANCE_PROCESS=1 "$run" -n "$n" --hosts "$A,$B" \
            --root "$A:$PORT" -- "$conf" "$name" --exact -q --test-threads=1 >/tmp/rdma-check.log 2>&1; then
            echo "ok    $name ($n ranks, rendezvous $rndv)"
        else
            echo "FAIL  $name ($n ranks, rendezvous $rndv)"; cat /tmp/rdma-check.log; fail=1
        fi
    done
done

step "perftest ib_send_lat (8 B), then tandem-perf pingpong over verbs"
ssh "$B" "ib_send_lat -d $dev -s 8 -n 20000 ${gidopt[*]}" >/tmp/ib_send_lat.srv 2>&1 &
sleep 2
ib_send_lat -d "$dev" -s 8 -n 20000 "${gidopt[@]}" "$B" | tail -4
wait
"$run" -n 2 --hosts "$A,$B" --root "$A:$((PORT + 100))" -- "$perf" pingpong --iters 20000

step "perftest ib_write_bw, then tandem-perf bw over verbs"
ssh "$B" "ib_write_bw -d $dev -a ${gidopt[*]}" >/tmp/ib_write_bw.srv 2>&1 &
sleep 2
ib_write_bw -d "$dev" -a "${gidopt[@]}" "$B" | tail -25
wait
"$run" -n 2 --hosts "$A,$B" --root "$A:$((PORT + 101))" -- "$perf" bw --min-size 4K

exit $fail
