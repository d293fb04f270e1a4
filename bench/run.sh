#!/usr/bin/env bash
# Every heatscope benchmark; `make bench` runs it as root. Results go to
# bench/results/ (markdown), from which docs/benchmarks.md is updated.
#
#   bench/run.sh            everything (about an hour and a half: the sampler runs 5 x 30 s and 10 minutes, the churn cases 4 x 5 x 30 s and 10 minutes, the soak 30 minutes)
#   QUICK=1 bench/run.sh    skip the 10-minute runs, use a 2-hour synthetic store, soak 3 minutes
#   SOAK=10m bench/run.sh   the always-on soak's length (default 30m)
#   (bench/fleet needs the MinIO binary: see internal/miniotest)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
out=bench/results
mkdir -p "$out"
machine() { echo "machine: $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r), $(go version | cut -d' ' -f3), $(date -u +%F)"; }

echo "== Go benchmarks"
go test -run '^$' -bench . -benchmem -count 5 ./... | tee "$out/go-bench.txt"

echo "== Sampler vs perf, 5 runs of 30 s, and the workload's throughput under each"
{ machine; go run ./bench/sampler -duration 30s -runs 5 -throughput 30s; } | tee "$out/sampler-30s.md"

echo "== Unwinding: heatscope --unwind fp and dwarf vs perf -g and --call-graph dwarf, 3 runs of 20 s each"
{ machine; go run ./bench/sampler -unwind -duration 20s -runs 3; } | tee "$out/sampler-unwind.md"

if [ -z "${QUICK:-}" ]; then
  echo "== Sampler vs perf, 10 minutes (steady state, bytes per sample on disk)"
  { machine; go run ./bench/sampler -duration 10m -runs 1; } | tee "$out/sampler-10m.md"
fi

echo "== Churn: heatscope (default flags) beside perf record -F 99 -a -g, 5 runs of 30 s per case (quiet, 100 and 500 new processes/s, a Go build)"
{ machine; go run ./bench/churn -runs 5 -duration 30s; } | tee "$out/churn.md"
if [ -z "${QUICK:-}" ]; then
  echo "== Churn: 100 new processes a second for 10 minutes (the rate held, no guard change)"
  { machine; go run ./bench/churn -cases b -runs 1 -duration 10m; } | tee "$out/churn-10m.md"
fi

down=10m; [ -n "${QUICK:-}" ] && down=3m
echo "== OTLP export: record --otlp-endpoint beside record, 5 runs of 30 s; $down with the endpoint down"
{ machine; go run ./bench/otlp -runs 5 -duration 30s -down "$down"; } | tee "$out/otlp.md"

echo "== Python frames: each installed CPython's busy.py recorded (whole chains, BPF µs per sample against a native process, the code cache), new processes' first Python frames, the agent's CPU without Python against a build from before them; 3 runs"
{ machine; go run ./bench/python -runs 3; } | tee "$out/python.md"

soak=${SOAK:-30m}; [ -n "${QUICK:-}" ] && soak=${SOAK:-3m}
echo "== Always-on soak: $soak at 99 Hz with 200 short-lived processes a second"
{ machine; go run ./bench/soak -duration "$soak" -hz 99 -churn 200; } | tee "$out/soak-99hz.md"
echo "== 2 minutes at 999 Hz with the same churn"
{ machine; go run ./bench/soak -duration 2m -hz 999 -churn 200; } | tee "$out/soak-999hz.md"

echo "== Synthetic 64-CPU store"
store=/var/tmp/heatscope-bench-store
hours=24; [ -n "${QUICK:-}" ] && hours=2 && store=/var/tmp/heatscope-bench-store-quick
if [ ! -d "$store/blocks" ]; then
  go run ./bench/store gen -dir "$store" -hours "$hours" | tee "$out/store-gen.md"
fi
{ machine; go run ./bench/store query -dir "$store"; } | tee "$out/store-queries.md"

echo "== Fleet in MinIO: 50/100/200 nodes x 10 min x 8 CPUs at 99 Hz through heatscope serve, 1,000-node simulation, compactor pass"
echo "   (the full 1-hour fleet: go run ./bench/fleet -span 1h)"
{ machine; go run ./bench/fleet; } | tee "$out/fleet.md"

echo "== Fleet overview: 500 nodes x 24 h x 8 CPUs, API and UI (headless chromium)"
{ machine; go run ./bench/overview; } | tee "$out/overview.md"

echo "== OTLP receiver: heatscope receive on one CPU (GOMAXPROCS=1) under 10 nodes x 64 CPUs x 99 Hz, 5 runs of 20 s, and a flood at the size limit"
{ machine; go run ./bench/otlpreceive -runs 5 -duration 20s; } | tee "$out/otlpreceive.md"

echo "== perf script import (10 x a 30 s perf record -F 999 -a -g)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT
gcc -O0 -fno-omit-frame-pointer -o "$tmp/hotc" cmd/heatscope/testdata/hotc.c
go build -o "$tmp/hotgo" ./cmd/heatscope/testdata/hotgo
"$tmp/hotc" & "$tmp/hotgo" & dd if=/dev/zero of=/dev/null bs=1 2>/dev/null &
perf record -q -F 999 -a -g -o "$tmp/perf.data" -- sleep 30 2>/dev/null
kill $(jobs -p) 2>/dev/null || true
perf script -i "$tmp/perf.data" > "$tmp/one.perf" 2>/dev/null
go run ./bench/store perfscript-make -in "$tmp/one.perf" -out "$tmp/ten.perf" -copies 10
{ machine; go run ./bench/store perfscript -dir "$tmp/store" -file "$tmp/ten.perf"; } | tee "$out/perfscript.md"

echo "== Web UI drawing in headless chromium (heatmap of 10 minutes, flame graph of 50k stacks)"
{ machine; go run ./bench/ui; } | tee "$out/ui.md"

echo "== Fleet check (issue 20): a fresh clone, README's fleet, a loop pinned to CPU 1 against /usr/bin/time, the bucket stopped and killed"
{ machine; REPO=$PWD BRANCH=$(git rev-parse --abbrev-ref HEAD) bash bench/fleetcheck/run.sh; } | tee "$out/fleetcheck.md"
