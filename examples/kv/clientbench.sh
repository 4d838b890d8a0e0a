#!/bin/sh
# The clients' own benchmarks, redis-benchmark and memcslap, against
# NDMA's key-value front end (ndma kv serve) and against redis-server and
# memcached, all on this machine's loopback. NDMA's store is the
# README's: a sealed switch, 2 memory nodes, a key space of 2 owners
# (one copy of each value).
#
#   examples/kv/clientbench.sh [ROUNDS]
#
# Needs ndma on PATH (or NDMA=path), redis-server, redis-benchmark
# (redis-tools), memcached and memcslap (libmemcached-tools). Ports 27471,
# 21211, 21212, 26379 and 26380 of 127.0.0.1 must be free.
set -eu
NDMA=${NDMA:-ndma}
ROUNDS=${1:-3}
pids=""
D=$(mktemp -d)
trap 'kill $pids 2>/dev/null; wait; rm -rf "$D"' EXIT
trap 'exit 1' INT TERM
cd "$D"
"$NDMA" fabric init fab --memory-nodes 2 >/dev/null
"$NDMA" switch --listen 127.0.0.1:27471 --token-file fab/token --credential fab/switch.cred >switch.log 2>&1 &
pids="$pids $!"
for i in 0 1; do
	"$NDMA" memd --listen 127.0.0.1:0 --size 256MiB --switch 127.0.0.1:27471 --token-file fab/token \
		--credential fab/memory-$i.cred >memd$i.log 2>&1 &
	pids="$pids $!"
done
export NDMA_SWITCH=127.0.0.1:27471 NDMA_CREDENTIAL=fab/client-0.cred
NDMA_TOKEN=$(cat fab/token)
export NDMA_TOKEN
sleep 2
"$NDMA" kv create --space cache --owners 2 --out cache.space >/dev/null
for r in 0 1; do
	"$NDMA" credential issue --secret-file fab/authority.key --role member --name kv-cache/$r -o kv-$r.cred >/dev/null 2>&1
	"$NDMA" kvd --space-file cache.space --rank $r --clients client-0 --credential kv-$r.cred >kvd$r.log 2>&1 &
	pids="$pids $!"
done
sleep 3
"$NDMA" kv serve --space cache --memcached 127.0.0.1:21211 --redis 127.0.0.1:26379 >serve.log 2>&1 &
pids="$pids $!"
redis-server --port 26380 --bind 127.0.0.1 --save '' --appendonly no >redis.log 2>&1 &
pids="$pids $!"
user=""
[ "$(id -u)" != 0 ] || user="-u root" # memcached refuses root unless told
# shellcheck disable=SC2086 # user is a flag and its value, or nothing
memcached -p 21212 -l 127.0.0.1 -U 0 $user >memcached.log 2>&1 &
pids="$pids $!"
sleep 3
round=1
while [ "$round" -le "$ROUNDS" ]; do
	for target in "ndma 26379" "redis 26380"; do
		# shellcheck disable=SC2086 # a name and a port
		set -- $target
		printf 'round %d, redis-benchmark, %s: ' "$round" "$1"
		redis-benchmark -h 127.0.0.1 -p "$2" -t set,get -n 20000 -c 16 -d 100 -r 10000 -q 2>&1 | tr '\r' '\n' |
			grep -E '^(SET|GET):.*requests per second' | tail -2 | tr '\n' ' '
		echo
	done
	for target in "ndma 21211" "memcached 21212"; do
		# shellcheck disable=SC2086 # a name and a port
		set -- $target
		for t in set get; do
			printf 'round %d, memcslap %s, %s: ' "$round" "$t" "$1"
			memcslap --servers=127.0.0.1:"$2" --concurrency=16 --execute-number=2000 --test=$t 2>&1 |
				grep -E '^Time to (set|get)' | tail -1
		done
	done
	round=$((round + 1))
done
