#!/usr/bin/env bash
# Runs a tg::distributed program as N processes on this host, one GPU each:
#   scripts/launch.sh N program [args...]
# Each gets RANK and LOCAL_RANK (0..N-1), WORLD_SIZE=N and a fresh
# TG_RENDEZVOUS_FILE (rank 0 writes the NCCL id there). Exits non-zero when
# any rank does; a rank's failure does not leave the others running past
# their process group's timeout. On several hosts, start the same program
# with RANK / WORLD_SIZE / LOCAL_RANK set per process and TG_RENDEZVOUS_FILE
# on a file system every host sees (docs/DISTRIBUTED.md).
set -uo pipefail
n=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n TG_RENDEZVOUS_FILE="$dir/nccl_id" "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || rc=1
done
exit $rc
