#!/usr/bin/env bash
# fio on a replicated volume, as a user would run it: the volume mounted
# through FUSE (ndma vol mount), a loop device on it, ext4 on that, and fio
# on a file in the ext4, from a host of the testbed; beside it, the same
# fio jobs on a storage node's own disk (the local limit), and a verify
# run that kills one storage node halfway and must finish with no verify
# error.
#
# Needs root, fio, e2fsprogs, /dev/fuse, and a testbed with storage nodes:
#
#   sudo ndma testbed up --hosts 1 --stornodes 3
#   sudo tools/storage/fio.sh                 # JSON Lines on stdout, fio's own output in $OUT
#
# Environment: PREFIX (testbed prefix, ndmatb), NDMA (the ndma binary,
# ndma on PATH), RUNTIME (seconds per job, 10), FILESIZE (the fio file,
# 256M), VOLSIZE (1GiB), OUT (directory for fio's JSON, a temporary one),
# JOBS (fio patterns: random ones in 4 KiB blocks, sequential ones (read,
# write) in 1 MiB blocks; "randread randwrite randrw"), QDS ("1 32"),
# KILL (0 skips the verify run with a node killed), KILLAFTER (seconds into
# the verify run's writes, 8), LOCAL (0 skips the local runs).
set -euo pipefail

PREFIX=${PREFIX:-ndmatb}
NDMA=${NDMA:-$(command -v ndma)}
RUNTIME=${RUNTIME:-10}
FILESIZE=${FILESIZE:-256M}
VOLSIZE=${VOLSIZE:-1GiB}
JOBS=${JOBS:-randread randwrite randrw}
QDS=${QDS:-1 32}
KILL=${KILL:-1}
STATE=/run/ndma-testbed/$PREFIX
OUT=${OUT:-$(mktemp -d /tmp/ndma-fio.XXXXXX)}
mkdir -p "$OUT"

for t in fio mkfs.ext4 losetup jq pkill; do
  command -v $t >/dev/null || { echo "fio.sh: needs $t" >&2; exit 2; }
done
[ -f "$STATE/state.json" ] || { echo "fio.sh: no testbed $PREFIX (ndma testbed up --hosts 1 --stornodes 3)" >&2; exit 2; }
SWITCH=$(jq -r .switch_addr "$STATE/state.json")
MTU=$(jq -r .datagram_mtu "$STATE/state.json")
H0=$(jq -r '.hosts[0].ns' "$STATE/state.json")
CRED=$(jq -r '.hosts[0].credential // empty' "$STATE/state.json")
S0DIR=$STATE/s0.d

# job NAME FILE RW QD [extra fio args...]: one fio run, its JSON line on stdout.
job() {
  local where=$1 file=$2 rw=$3 qd=$4
  shift 4
  local out="$OUT/$where-$rw-qd$qd.json"
  local bs=4k
  case $rw in rand*) ;; *) bs=1M ;; esac # fio's sequential patterns (read, write): 1 MiB blocks
  local timed=(--runtime="$RUNTIME" --time_based)
  [ "${UNTIMED:-0}" = 1 ] && timed=()
  fio --name="$where-$rw" --filename="$file" --size="$FILESIZE" --rw="$rw" --rwmixread=70 --bs="$bs" \
    --iodepth="$qd" --ioengine=libaio --direct=1 "${timed[@]}" --group_reporting \
    --output-format=json "$@" > "$out"
  jq -c --arg where "$where" --arg rw "$rw" --argjson qd "$qd" --arg bs "$bs" '.jobs[0] as $j | {where: $where, pattern: $rw, bs: $bs, qd: $qd,
    read_iops: $j.read.iops, write_iops: $j.write.iops,
    read_p50_us: (($j.read.clat_ns.percentile["50.000000"] // 0) / 1000), write_p50_us: (($j.write.clat_ns.percentile["50.000000"] // 0) / 1000),
    read_p99_us: (($j.read.clat_ns.percentile["99.000000"] // 0) / 1000), write_p99_us: (($j.write.clat_ns.percentile["99.000000"] // 0) / 1000),
    errors: $j.error}' "$out"
}

# The local limit: fio on storage node 0's own directory (the same disk).
[ "${LOCAL:-1}" = 0 ] || for rw in $JOBS; do
  for qd in $QDS; do
    job local "$S0DIR/fio.local" "$rw" "$qd"
  done
done
rm -f "$S0DIR/fio.local"

# The volume, mounted in the host namespace h0. Everything below runs in
# one shell there (its mounts live in that shell's mount namespace).
export SWITCH MTU CRED NDMA OUT RUNTIME FILESIZE VOLSIZE JOBS QDS KILL KILLAFTER STATE
export -f job
ip netns exec "$H0" bash -euo pipefail -c '
  export NDMA_SWITCH=$SWITCH NDMA_TOKEN=$(cat "$STATE/token") NDMA_MTU=$MTU
  [ -n "$CRED" ] && export NDMA_CREDENTIAL=$CRED
  # Everything this shell makes is undone on any exit, a failed step
  # included: the filesystem, the loop device, the mount (SIGTERM
  # unmounts it and gives the lease back), the volume, the directories.
  tmp=$(mktemp -d /tmp/ndma-fio-mnt.XXXXXX); fuse=$tmp/fuse; fs=$tmp/ext4; mkdir "$fuse" "$fs"
  dev= mpid=
  cleanup() {
    mountpoint -q "$fs" && umount "$fs" 2>/dev/null || true
    [ -n "$dev" ] && losetup -d "$dev" 2>/dev/null || true
    if [ -n "$mpid" ]; then kill "$mpid" 2>/dev/null || true; wait "$mpid" 2>/dev/null || true; fi
    mountpoint -q "$fuse" && fusermount3 -u "$fuse" 2>/dev/null || true
    "$NDMA" vol rm fio --force >/dev/null 2>&1 || true
    rm -rf "$tmp"
  }
  trap cleanup EXIT
  "$NDMA" vol rm fio --force >/dev/null 2>&1 || true
  "$NDMA" vol create fio --size "$VOLSIZE" --replicas 3 >&2
  "$NDMA" vol mount fio "$fuse" --ready-file "$tmp/ready" >&2 & mpid=$!
  while [ ! -e "$tmp/ready" ]; do kill -0 "$mpid" || { echo "fio.sh: vol mount exited" >&2; exit 1; }; sleep 0.1; done
  dev=$(losetup --find --show "$fuse/fio")
  mkfs.ext4 -q -F "$dev"
  mount "$dev" "$fs"
  for rw in $JOBS; do
    for qd in $QDS; do
      job volume "$fs/f" "$rw" "$qd"
    done
  done
  if [ "$KILL" != 0 ]; then
    # Write FILESIZE once and verify it (crc32c in every block); storage
    # node 2 is killed KILLAFTER seconds into the writes.
    # Node 2 of this testbed only: its --dir is under the testbed state.
    ( sleep "${KILLAFTER:-8}"; pkill -KILL -f -- "ndma stord .*--dir $STATE/s2\\.d( |$)" && echo "fio.sh: killed storage node 2" >&2 || true ) &
    killer=$!
    UNTIMED=1 job volume-verify-kill "$fs/v" randwrite 16 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0
    wait $killer
  fi
'
echo "fio.sh: fio output in $OUT" >&2
