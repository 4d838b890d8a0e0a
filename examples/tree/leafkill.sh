#!/bin/sh
# A leaf switch killed (SIGKILL) 12 s into in-network Allreduces of 16 MiB
# on 8 hosts as 2 leaves of 4, every link 20 Mbit/s: run.log has each
# output line with its time after the kill (when each rank failed, and
# why); then the leaf is started again with its own arguments and a new
# job runs on all 8 hosts (after.log).
#
#   sudo examples/tree/leafkill.sh
#
# Environment: B (the ndma binary, default: ndma on PATH), P (the
# testbed's prefix, lk), OUT (the output directory, leafkill-out).
# Needs root, iproute2 and python3.
set -u
B=${B:-$(command -v ndma)}
P=${P:-lk}
OUT=${OUT:-leafkill-out}
mkdir -p "$OUT"
$B testbed down --prefix $P >/dev/null 2>&1
$B testbed up --prefix $P --hosts ${HOSTS:-8} --leaves 2 --rate 20mbit >"$OUT/up.log" 2>&1 || { cat "$OUT/up.log"; exit 1; }
$B testbed status --prefix $P --json >"$OUT/status.json"
LEAF=$(python3 -c "
import json; s=json.load(open('$OUT/status.json'))
d=[d for d in s['daemons'] if d['role']=='switch' and d['ns'].endswith('-l0')][0]
print(d['pid'], d['ns'], ' '.join(d['args']))")
set -- $LEAF
PID=$1; NS=$2; shift 2; ARGS="$*"
echo "leaf l0: pid $PID in $NS: $ARGS" >"$OUT/leaf.txt"
python3 - "$B" "$P" "$PID" "$OUT" <<'PY'
import subprocess, sys, time, os, signal, threading
b, p, pid, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t0 = time.time()
proc = subprocess.Popen([b, "testbed", "run", "--prefix", p, "--", b, "bench", "coll", "--mtu", "8972", "--op", "allreduce",
    "--algo", "innet", "--sizes", "16M", "--iters", "8", "--warmup", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
killed = [None]
def kill():
    time.sleep(12)
    killed[0] = time.time()
    os.kill(pid, signal.SIGKILL)
threading.Thread(target=kill, daemon=True).start()
with open(out + "/run.log", "w") as f:
    for line in proc.stdout:
        now = time.time()
        rel = "%.3f" % (now - killed[0]) if killed[0] else "before"
        f.write("%s %s" % (rel, line))
proc.wait()
with open(out + "/run.log", "a") as f:
    f.write("exit %d, killed at +%.3f s\n" % (proc.returncode, (killed[0] or t0) - t0))
PY
# The leaf again, with its own arguments, and a new job on every host.
ip netns exec "$NS" $ARGS >"$OUT/leaf-restart.log" 2>&1 &
sleep 3
$B testbed run --prefix $P -- $B bench coll --mtu 8972 --op allreduce --algo innet --sizes 1M --iters 3 --warmup 1 >"$OUT/after.log" 2>&1
echo "after restart: exit $?" >>"$OUT/after.log"
kill %1 2>/dev/null
$B testbed down --prefix $P >/dev/null 2>&1
pkill -f "$ARGS" 2>/dev/null
