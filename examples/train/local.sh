#!/bin/sh
# Trains the MNIST MLP of train.py on this one machine: a sealed switch on
# loopback (and memory nodes when BACKEND is ndma-offload) and RANKS rank
# processes, each with its own credential, then reports. No root, no
# testbed: a first look before `sudo examples/train/run.sh` (which gives
# each rank its own host and link).
#
#   examples/train/local.sh [OUT_DIR]
#
# Environment: RANKS (2), BACKEND (ndma; gloo, ndma-ring, ndma-offload),
# EPOCHS (1), STEPS (50 steps per epoch; 0: whole epochs), BATCH (128 per
# rank), PORT (7571, the switch's port on 127.0.0.1), EXTRA (more
# train.py flags). Needs Go, a C compiler and Debian's python3-torch and
# python3-numpy.
set -eu
cd "$(dirname "$0")/../.."
OUT=$(mkdir -p "${1:-train-local}" && cd "${1:-train-local}" && pwd)
RANKS=${RANKS:-2}
BACKEND=${BACKEND:-ndma}
EPOCHS=${EPOCHS:-1}
STEPS=${STEPS:-50}
BATCH=${BATCH:-128}
PORT=${PORT:-7571}
EXTRA=${EXTRA:-}
MEMNODES=0
if [ "$BACKEND" = ndma-offload ]; then
	MEMNODES=2
fi
SW=127.0.0.1:$PORT
JOB=train-$$

go build -o "$OUT/ndma" ./cmd/ndma
make libndma >/dev/null
go run ./examples/train/export --out "$OUT/mnist"
rm -rf "$OUT/fabric"
"$OUT/ndma" fabric init "$OUT/fabric" --job "$JOB" --ranks "$RANKS" --memory-nodes "$MEMNODES" --switch-addr "$SW" >/dev/null

pids=""
cleanup() {
	# shellcheck disable=SC2086 # one argument per process
	[ -z "$pids" ] || kill $pids 2>/dev/null || true
}
trap cleanup EXIT INT TERM
"$OUT/ndma" switch --listen "$SW" --token-file "$OUT/fabric/token" --credential "$OUT/fabric/switch.cred" \
	>"$OUT/switch.log" 2>&1 &
pids="$pids $!"
i=0
while [ "$i" -lt "$MEMNODES" ]; do
	"$OUT/ndma" memd --listen 127.0.0.1:0 --switch "$SW" --size 64MiB --token-file "$OUT/fabric/token" \
		--credential "$OUT/fabric/memory-$i.cred" >"$OUT/memd-$i.log" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done

rm -f "$OUT/store"
ranks=""
r=0
while [ "$r" -lt "$RANKS" ]; do
	# shellcheck disable=SC2086 # EXTRA is a list of flags
	NDMA_RANK=$r NDMA_SIZE=$RANKS NDMA_SWITCH=$SW NDMA_JOB=$JOB NDMA_CREDENTIAL="$OUT/fabric" \
		NDMA_TOKEN="$(cat "$OUT/fabric/token")" \
		/usr/bin/python3 examples/train/train.py --backend "$BACKEND" --data "$OUT/mnist" --store "$OUT/store" \
		--out "$OUT/$BACKEND.jsonl" --epochs "$EPOCHS" --steps "$STEPS" --batch "$BATCH" $EXTRA \
		>"$OUT/rank-$r.log" 2>&1 &
	ranks="$ranks $!"
	r=$((r + 1))
done
status=0
for p in $ranks; do
	wait "$p" || status=$?
done
if [ "$status" -ne 0 ]; then
	echo "a rank failed (exit $status): see $OUT/rank-*.log and $OUT/switch.log" >&2
	exit "$status"
fi
go run ./examples/train/report --plots "$OUT" "$OUT/$BACKEND.jsonl" | tee "$OUT/report.md"
