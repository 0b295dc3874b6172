#!/usr/bin/env bash
# Starts P ranks of a program on this machine, one process per GPU, the way torchrun does:
#   tools/launch.sh P ./chapter12 [options...]
# Each process gets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and `--rendezvous FILE`, a
# fresh file in a temporary folder through which rank 0 hands the NCCL id to the others. NVLink
# multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0. Rank 0 prints as it is; the other ranks' lines
# are prefixed "[rank R]". When a rank ends with an error the others are stopped (they would wait
# for it forever). Exits with the exit status of the first rank that failed (0 when none did).
#
# Several nodes: run the program on each node with RANK = node·GPUs + LOCAL_RANK and the same
# WORLD_SIZE, and one --rendezvous path on a file system every node sees (tools/launch.sh starts
# the ranks of one node only).
set -u
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: tools/launch.sh P PROGRAM [options...]   (P ranks, one per GPU, on this machine)" >&2
  exit 2
fi
P=$1
shift
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$gpus" -lt "$P" ]; then
  echo "tools/launch.sh: $P ranks need $P GPUs; nvidia-smi lists $gpus" >&2
  exit 3
fi
export NCCL_NVLS_ENABLE=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
declare -a pids
for ((r = 0; r < P; r++)); do
  if [ "$r" = 0 ]; then
    RANK=0 WORLD_SIZE=$P LOCAL_RANK=0 LOCAL_WORLD_SIZE=$P "$@" --rendezvous "$dir/nccl-id" &
  else
    RANK=$r WORLD_SIZE=$P LOCAL_RANK=$r LOCAL_WORLD_SIZE=$P "$@" --rendezvous "$dir/nccl-id" \
      > >(sed "s/^/[rank $r] /") 2> >(sed "s/^/[rank $r] /" >&2) &
  fi
  pids[r]=$!
done
worst=0
while [ "${#pids[@]}" -gt 0 ]; do
  wait -n -p done_pid "${pids[@]}"  # only ranks still running: bash forgets a pid once reaped
  status=$?
  for r in "${!pids[@]}"; do [ "${pids[r]}" = "$done_pid" ] && unset 'pids[r]'; done
  if [ "$status" != 0 ] && [ "$worst" = 0 ]; then  # the first failure: the others would wait for it forever
    worst=$status
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  fi
done
exit "$worst"
