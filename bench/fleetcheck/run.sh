#!/usr/bin/env bash
# bench/fleetcheck/run.sh: issue 20's "Done when" check, as a fleet operator
# would run it. A fresh clone of REPO (default: this repository's main) is
# built with `make build`; README's "A fleet" section is followed with its
# port variables (MinIO from $HOME/.cache/heatscope-minio/bin/minio, data
# directories under a scratch directory rather than /tmp/hs-a so that
# concurrent runs do not meet): MinIO, two recorders (nodes a and b), a
# query service. A third recorder under --node a must be refused, naming
# the first. On node a a loop pinned to CPU 1 runs for LOOP_SECONDS under
# /usr/bin/time -v; every figure (fleet overview, timeline, per-CPU,
# heatmap, pprof and folded exports) is compared with its user+sys. Then
# the unclean cases: the bucket stopped (SIGSTOP/SIGCONT), killed and
# restarted, an empty filter, a wrong flag, a recorder restarted under a
# new --node. Prints one line per check (ok/FAIL) and exits 1 on a FAIL.
# Needs root (BPF), git, go, python3, taskset, /usr/bin/time.
set -u
REPO=${REPO:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}
BRANCH=${BRANCH:-main}
LOOP_SECONDS=${LOOP_SECONDS:-60}
MINIO_BIN=${HEATSCOPE_MINIO:-$HOME/.cache/heatscope-minio/bin/minio}
W=$(mktemp -d /tmp/hs-fleetcheck.XXXXXX)
PIDS=()
FAILS=0
cleanup() {
	for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT
say() { printf '%s\n' "$*"; }
check() { # check NAME OK(0/1) DETAIL
	if [ "$2" = 0 ]; then say "ok    $1: $3"; else say "FAIL  $1: $3"; FAILS=$((FAILS + 1)); fi
}
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

say "# heatscope fleet check, $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
git clone -q --branch "$BRANCH" "$REPO" "$W/heatscope" || exit 1
say "# clone of $REPO $BRANCH at $(git -C "$W/heatscope" log --oneline -1)"
(cd "$W/heatscope" && make build >"$W/build.log" 2>&1) || { cat "$W/build.log"; exit 1; }
HS=$W/heatscope/bin/heatscope
cd "$W" || exit 1

# 0. the ports
MINIO_PORT=$(freeport) MINIO_CONSOLE_PORT=$(freeport) HS_PORT=$(freeport)
# 1. MinIO on loopback, with a bucket
mkdir -p "$W/minio/heatscope"
export MINIO_ROOT_USER=minioadmin MINIO_ROOT_PASSWORD=$(openssl rand -hex 16)
start_minio() {
	"$MINIO_BIN" server --address 127.0.0.1:$MINIO_PORT --console-address 127.0.0.1:$MINIO_CONSOLE_PORT "$W/minio" >>"$W/minio.log" 2>&1 &
	MINIO_PID=$!
	PIDS+=("$MINIO_PID")
	until curl -sf http://127.0.0.1:$MINIO_PORT/minio/health/live; do sleep 0.5; done
}
start_minio
# 2. the objstore config
cat > objstore.yaml <<YAML
provider: s3
bucket: heatscope
endpoint: 127.0.0.1:$MINIO_PORT
prefix: demo
tls:
  insecure: true        # plain HTTP: MinIO on loopback only
YAML
export AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD
# 3. two recorders
"$HS" record --data "$W/hs-a" --node a --node-label zone=us-east-1a --objstore-config objstore.yaml --listen '' >"$W/rec-a.log" 2>&1 &
PIDS+=($!); REC_A=$!
"$HS" record --data "$W/hs-b" --node b --node-label zone=us-east-1b --objstore-config objstore.yaml --listen '' >"$W/rec-b.log" 2>&1 &
PIDS+=($!); REC_B=$!
# 4. the query service
"$HS" serve --objstore-config objstore.yaml --listen 127.0.0.1:$HS_PORT >"$W/serve.log" 2>&1 &
PIDS+=($!)
API=http://127.0.0.1:$HS_PORT
sleep 5

# A third recorder under a live node's name, its own data directory.
timeout 60 "$HS" record --data "$W/hs-a2" --node a --objstore-config objstore.yaml --listen '' >"$W/rec-a2.log" 2>&1
rc=$?
msg=$(tail -c 600 "$W/rec-a2.log" | tr '\n' ' ')
grep -q "node a is being recorded by another heatscope" "$W/rec-a2.log" && grep -q -- "--node" "$W/rec-a2.log" && grep -q "$W/hs-a" "$W/rec-a2.log" && [ $rc -ne 0 ] && [ $rc -ne 124 ]
check "third recorder --node a refused" $? "exit $rc: $msg"

# The loop, pinned to CPU 1, on node a (both recorders see this machine).
cp /usr/bin/yes "$W/hsloop"
LOOP_FROM=$(date +%s.%N)
/usr/bin/time -v -o "$W/time.txt" taskset -c 1 timeout "$LOOP_SECONDS" "$W/hsloop" >/dev/null
LOOP_TO=$(date +%s.%N)
USER=$(awk -F': ' '/User time/ {print $2}' "$W/time.txt")
SYS=$(awk -F': ' '/System time/ {print $2}' "$W/time.txt")
T=$(python3 -c "print(round($USER + $SYS, 2))")
say "# loop: $LOOP_SECONDS s pinned to CPU 1, /usr/bin/time user $USER s + sys $SYS s = $T s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
FROM=$(python3 -c "import math; print(math.floor(($LOOP_FROM - 20) / 10) * 10)")
TO=$(python3 -c "import math; print(math.ceil(($LOOP_TO + 20) / 10) * 10)")

# figures NODE: every figure of the loop on NODE, one "name value" a line.
figures() {
	local node=$1 q="node=$1&comm=hsloop&from=$FROM&to=$TO"
	curl -sf "$API/api/fleet/overview?$q&step=10s" >"$W/ov.json" || echo "overview-error 0"
	curl -sf "$API/api/timeline?$q&step=10s" >"$W/tl10.json" || echo "timeline-error 0"
	curl -sf "$API/api/timeline?$q&step=1s" >"$W/tl1.json" || echo "timeline1-error 0"
	curl -sf "$API/api/percpu?$q&step=1s" >"$W/pc.json" || echo "percpu-error 0"
	curl -sf "$API/api/heatmap?$q" >"$W/hm.json" || echo "heatmap-error 0"
	python3 - "$W" "$node" <<'PY'
import json, sys
w, node = sys.argv[1], sys.argv[2]
ov = json.load(open(w + "/ov.json"))
rows = [n for n in ov["nodes"] if n["name"] == node]
if rows:
    n = rows[0]
    part = {p["column"]: p["seconds"] for p in n.get("partial", [])}
    print("overview-total-cpu", round(sum(n["cpu"]), 3))
    print("overview-busiest-share-x-seconds", round(sum(b * part.get(i, ov["step"]) for i, b in enumerate(n["busiest"])), 3))
    print("overview-max-busiest", max(n["busiest"]))
else:
    print("overview-total-cpu 0")
print("timeline-10s", round(sum(json.load(open(w + "/tl10.json"))["cpu"]), 3))
print("timeline-1s", round(sum(json.load(open(w + "/tl1.json"))["cpu"]), 3))
pc = json.load(open(w + "/pc.json"))
print("percpu", round(sum(sum(r) for r in pc["cpu"]), 3))
print("percpu-cpu1", round(sum(sum(r) for c, r in zip(pc["cpus"], pc["cpu"]) if c == 1), 3))
print("heatmap", round(sum(sum(c) for c in json.load(open(w + "/hm.json"))["cpu"]), 3))
PY
	"$HS" export --objstore-config objstore.yaml --node "$node" --comm hsloop --from "$FROM" --to "$TO" --format pprof -o "$W/loop-$node.pb.gz" 2>"$W/export.err" || echo "pprof-export-error 0"
	go tool pprof -top -sample_index=cpu "$W/loop-$node.pb.gz" 2>/dev/null | python3 -c '
import re, sys
units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "mins": 60, "hrs": 3600}
for line in sys.stdin:
    m = re.search(r"of ([0-9.]+)(ns|us|ms|s|mins|hrs) total", line)
    if m:
        print("pprof-top", round(float(m.group(1)) * units[m.group(2)], 3)); break
else:
    print("pprof-top 0")'
	"$HS" export --objstore-config objstore.yaml --node "$node" --comm hsloop --from "$FROM" --to "$TO" --format folded -o "$W/loop-$node.folded" 2>>"$W/export.err" || echo "folded-export-error 0"
	awk '{n += $NF} END {printf "folded-x-1/99s %.3f\n", n / 99}' "$W/loop-$node.folded"
}

# Wait for the loop's blocks to reach the bucket (a block every 45 s) and
# the query service to read them: until node a's and b's data run past the
# loop's end, then one refresh more.
for i in $(seq 1 40); do
	done_nodes=0
	for n in a b; do
		curl -sf "$API/api/sources?node=$n" | python3 -c "import json,sys; sys.exit(0 if any(s['last'] > $LOOP_TO + 2 for s in json.load(sys.stdin)) else 1)" 2>/dev/null && done_nodes=$((done_nodes + 1))
	done
	[ $done_nodes = 2 ] && break
	sleep 5
done
sleep 15
within() { python3 -c "import sys; v, t = $1, $2; sys.exit(0 if abs(v - t) <= 0.05 * t else 1)"; }
say "# node a, comm=hsloop, from $FROM to $TO, against /usr/bin/time's $T s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
figures a >"$W/figures-a.txt"
while read -r name v; do
	case $name in
	overview-max-busiest) python3 -c "import sys; sys.exit(0 if 0 < $v <= 1 else 1)"; check "a $name" $? "$v (at most 1)";;
	*) within "$v" "$T"; check "a $name" $? "$v s vs $T s ($(python3 -c "print(f'{($v - $T) / $T * 100:+.1f}%')"))";;
	esac
done <"$W/figures-a.txt"
grep -q "a@\|instances" "$W/export.err" && check "a export warnings" 1 "$(tr '\n' ' ' <"$W/export.err")"
# The sampling noise of these figures: a CPU sampled at period w catches
# the loop with probability p (its share of the CPU), so n ticks give a
# CPU time of variance n·p·(1-p)·w² = cpu·w·(1-p), per step of /api/percpu.
curl -sf "$API/api/percpu?node=a&comm=hsloop&from=$FROM&to=$TO&step=10s" | python3 -c "
import json, sys, math
d = json.load(sys.stdin); p = $T / $LOOP_SECONDS
var = sum(c * (c / n) * (1 - p) for c, n in zip(d['cpu'][0], d['counts'][0]) if n)
print(f'#     sampling noise of node a\'s figures (1 sigma): {math.sqrt(var):.2f} s, {math.sqrt(var) / $T * 100:.1f}% of $T s; the loop had {p * 100:.0f}% of CPU 1; {sum(d[\"counts\"][0])} samples')"


# Node b recorded this machine too: its view holds its own recording of
# the loop once, never node a's added to it (not 2x).
figures b >"$W/figures-b.txt"
say "#     node a and node b recorded the same loop: a $(awk '$1 == "percpu" {print $2}' "$W/figures-a.txt") s, b $(awk '$1 == "percpu" {print $2}' "$W/figures-b.txt") s"
for name in percpu timeline-10s overview-total-cpu; do
	v=$(awk -v n=$name '$1 == n {print $2}' "$W/figures-b.txt")
	within "$v" "$T"; check "b $name (b's own recording, not a's added)" $? "$v s vs $T s"
done
curl -sf "$API/api/sources?node=b" >"$W/src-b.json"
python3 -c "import json,sys; names=[x['name'] for x in json.load(open('$W/src-b.json'))]; print(names); sys.exit(0 if names and all(n == 'b' for n in names) else 1)" >"$W/src-b.txt" 2>&1
check "b's sources are b's only" $? "$(cat "$W/src-b.txt")"

# An empty filter: 200 and a message, not an error nor silence.
code=$(curl -s -o "$W/empty.json" -w '%{http_code}' "$API/api/timeline?node=a&comm=nosuch&from=$FROM&to=$TO")
[ "$code" = 200 ] && python3 -c "import json,sys; o=json.load(open('$W/empty.json')); sys.exit(0 if sum(o['counts']) == 0 and o['message'].startswith('None of the ') else 1)"
check "comm=nosuch timeline says of how many samples" $? "HTTP $code $(head -c 300 "$W/empty.json")"
code=$(curl -s -o "$W/empty-ov.json" -w '%{http_code}' "$API/api/fleet/overview?comm=nosuch&from=$FROM&to=$TO")
python3 -c "import json,sys; o=json.load(open('$W/empty-ov.json')); sys.exit(0 if o['nodes'] == [] and o['message'] else 1)"
check "comm=nosuch overview" $? "HTTP $code message: $(python3 -c "import json; print(json.load(open('$W/empty-ov.json')).get('message'))")"
"$HS" export --objstore-config objstore.yaml --node a --comm nosuch --from "$FROM" --to "$TO" --format folded -o "$W/nosuch.folded" >"$W/nosuch.out" 2>&1
rc=$?
check "export --comm nosuch says so" $([ -s "$W/nosuch.out" ] && echo 0 || echo 1) "exit $rc: $(tr '\n' ' ' <"$W/nosuch.out" | head -c 300)"
# A wrong flag.
"$HS" serve --objstore-confg objstore.yaml >"$W/badflag.out" 2>&1
rc=$?
grep -q "objstore-confg" "$W/badflag.out" && [ $rc -ne 0 ]
check "wrong flag" $? "exit $rc: $(head -2 "$W/badflag.out" | tr '\n' ' ')"

# The bucket stopped: answers from cache say so, or fail fast; then back.
PC_A=$(awk '$1 == "percpu" {print $2}' "$W/figures-a.txt")
kill -STOP "$MINIO_PID"
sleep 20
t0=$(date +%s.%N)
code=$(curl -s -m 30 -D "$W/h-stop.txt" -o "$W/b-stop.json" -w '%{http_code}' "$API/api/percpu?node=a&comm=hsloop&from=$FROM&to=$TO&step=10s")
took=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
warn=$(grep -i '^warning' "$W/h-stop.txt" | head -1 | tr -d '\r')
{ [ "$code" = 200 ] && [ -n "$warn" ]; } || [ "$code" = 503 ]
check "MinIO stopped: /api/percpu" $? "HTTP $code in $took s; $warn"
code=$(curl -s -m 30 -D "$W/h-stop2.txt" -o /dev/null -w '%{http_code}' "$API/api/heatmap?node=b&from=$FROM&to=$((FROM + 10))")
say "#     MinIO stopped: /healthz $(curl -s -m 10 -w ' %{http_code}' "$API/healthz" | tr '\n' ' '), heatmap of b HTTP $code $(grep -i '^warning' "$W/h-stop2.txt" | head -1 | tr -d '\r')"
kill -CONT "$MINIO_PID"
sleep 20
code=$(curl -s -D "$W/h-cont.txt" -o "$W/b-cont.json" -w '%{http_code}' "$API/api/percpu?node=a&comm=hsloop&from=$FROM&to=$TO&step=10s")
v=$(python3 -c "import json; print(round(sum(sum(r) for r in json.load(open('$W/b-cont.json'))['cpu']), 3))")
[ "$code" = 200 ] && ! grep -qi '^warning' "$W/h-cont.txt" && python3 -c "import sys; sys.exit(0 if abs($v - $PC_A) < 0.002 else 1)"
check "MinIO continued: /api/percpu" $? "HTTP $code, $v s (before: $PC_A s), warning: $(grep -i '^warning' "$W/h-cont.txt" | tr -d '\r' | head -1)"
# Killed and restarted.
kill "$MINIO_PID"; wait "$MINIO_PID" 2>/dev/null
sleep 15
code=$(curl -s -m 30 -D "$W/h-kill.txt" -o /dev/null -w '%{http_code}' "$API/api/percpu?node=a&comm=hsloop&from=$FROM&to=$TO&step=10s")
warn=$(grep -i '^warning' "$W/h-kill.txt" | head -1 | tr -d '\r')
{ [ "$code" = 200 ] && [ -n "$warn" ]; } || [ "$code" = 503 ]
check "MinIO killed: /api/percpu" $? "HTTP $code; $warn"
start_minio
sleep 25
code=$(curl -s -D "$W/h-back.txt" -o "$W/b-back.json" -w '%{http_code}' "$API/api/percpu?node=a&comm=hsloop&from=$FROM&to=$TO&step=10s")
v=$(python3 -c "import json; print(round(sum(sum(r) for r in json.load(open('$W/b-back.json'))['cpu']), 3))")
[ "$code" = 200 ] && ! grep -qi '^warning' "$W/h-back.txt" && python3 -c "import sys; sys.exit(0 if abs($v - $PC_A) < 0.002 else 1)"
check "MinIO restarted: /api/percpu" $? "HTTP $code, $v s (before: $PC_A s), warning: $(grep -i '^warning' "$W/h-back.txt" | tr -d '\r' | head -1)"
grep -c "level=ERROR" "$W/rec-a.log" "$W/rec-b.log" | tr '\n' ' ' | sed 's/^/#     recorder ERROR lines: /'; echo

# Recorder b restarted under a new name: b's figures neither move nor double.
kill -INT "$REC_B"; wait "$REC_B" 2>/dev/null
"$HS" record --data "$W/hs-b" --node b2 --node-label zone=us-east-1b --objstore-config objstore.yaml --listen '' >"$W/rec-b2.log" 2>&1 &
PIDS+=($!)
sleep 70
grep -q "level=WARN.*b2\|level=WARN.*renamed\|level=WARN.*node" "$W/rec-b2.log"
check "rename b -> b2 warns" $? "$(grep 'level=WARN' "$W/rec-b2.log" | head -1 | cut -c1-300)"
vb=$(curl -sf "$API/api/percpu?node=b&comm=hsloop&from=$FROM&to=$TO&step=10s" | python3 -c 'import json,sys; print(round(sum(sum(r) for r in json.load(sys.stdin)["cpu"]), 3))')
vb2=$(curl -s "$API/api/percpu?node=b2&comm=hsloop&from=$FROM&to=$TO&step=10s" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(sum(sum(r) for r in d.get("cpu", [])), 3))' 2>/dev/null || echo 0)
within "$vb" "$T" && python3 -c "import sys; sys.exit(0 if $vb2 == 0 else 1)"
check "after the rename, b's loop" $? "b $vb s (vs $T s), b2 $vb2 s over the loop (want 0)"
say "# $FAILS checks failed; load average $(cut -d' ' -f1-3 /proc/loadavg); logs in $W (KEEP=1 keeps them)"
[ $FAILS = 0 ]
