#!/bin/sh
# Trains the MNIST MLP of train.py on the testbed once per backend (Gloo,
# NDMA in the network, NDMA's ring, and with ndma-offload in BACKENDS the
# optimizer in the memory pool), one rank per host, and reports.
#
#   sudo examples/train/run.sh [OUT_DIR]
#
# Environment: HOSTS (8), RATE (100mbit), EPOCHS (2), BATCH (128 per rank),
# STEPS (0: whole epochs; else steps per epoch), HIDDEN (2048,1024),
# OPTIMIZER (sgd or adam), LR (train.py's default for the optimizer),
# BACKENDS ("gloo ndma ndma-ring"; add ndma-offload), MEMNODES (memory
# nodes: 2 when BACKENDS has ndma-offload, else 0), PREFIX (the testbed's
# name prefix, ndmatb: another one runs beside a testbed already up),
# EXTRA (more train.py flags, e.g. --deterministic). Needs root,
# iproute2, Go, a C compiler and Debian's python3-torch and
# python3-numpy. On one machine without root: examples/train/local.sh.
set -eu
cd "$(dirname "$0")/../.."
OUT=$(mkdir -p "${1:-train-out}" && cd "${1:-train-out}" && pwd)
HOSTS=${HOSTS:-8}
RATE=${RATE:-100mbit}
EPOCHS=${EPOCHS:-2}
BATCH=${BATCH:-128}
HIDDEN=${HIDDEN:-2048,1024}
OPTIMIZER=${OPTIMIZER:-sgd}
LR=${LR:-}
STEPS=${STEPS:-0}
BACKENDS=${BACKENDS:-gloo ndma ndma-ring}
case " $BACKENDS " in
*" ndma-offload "*) MEMNODES=${MEMNODES:-2} ;;
*) MEMNODES=${MEMNODES:-0} ;;
esac
EXTRA=${EXTRA:-}
PREFIX=${PREFIX:-ndmatb}
if [ -n "$LR" ]; then
	EXTRA="--lr $LR $EXTRA"
fi

go build -o "$OUT/ndma" ./cmd/ndma
make libndma >/dev/null
go run ./examples/train/export --out "$OUT/mnist"
"$OUT/ndma" testbed up --prefix "$PREFIX" --hosts "$HOSTS" --memnodes "$MEMNODES" --rate "$RATE" --mtu 9000
trap '"$OUT/ndma" testbed down --prefix "$PREFIX"' EXIT INT TERM
files=""
for b in $BACKENDS; do
	echo "== $b"
	rm -f "$OUT/store-$b"
	# shellcheck disable=SC2086 # EXTRA is a list of flags
	"$OUT/ndma" testbed run --prefix "$PREFIX" -- /usr/bin/python3 examples/train/train.py --backend "$b" \
		--data "$OUT/mnist" --store "$OUT/store-$b" --out "$OUT/$b.jsonl" \
		--epochs "$EPOCHS" --steps "$STEPS" --batch "$BATCH" --hidden "$HIDDEN" --optimizer "$OPTIMIZER" $EXTRA
	files="$files $OUT/$b.jsonl"
done
# shellcheck disable=SC2086 # one argument per file
go run ./examples/train/report --plots "$OUT" $files | tee "$OUT/report.md"
echo "plots: $OUT/loss.png $OUT/accuracy.png; JSON Lines:$files"
