#!/bin/sh
# /init of the kernel matrix's initramfs (TestKernelMatrix). It runs the
# workloads and one `heatscope record` that exercises every BPF-facing part
# at once, then prints what the test judges, each piece between
# "==> NAME" and "<== NAME" lines on the console, and powers off.
#
# Phases, each waiting for what heatscope says rather than for a fixed
# time (an emulated machine on a busy host is slow, and unevenly so):
#   zznofp  spins the whole run, pinned to CPU 0, in a container cgroup;
#           everything else runs on CPU 1, the agent too
#   T0      the recorder samples (its first progress line)
#   churn   short-lived processes, four at a time, and zzsys's system
#           calls, until the recorder decides on exit snapshots (20 new
#           processes a second, or one missed, call for them)
#   kmsg    a NETDEV WATCHDOG line written to /dev/kmsg, until it is kept
#   T1      zznofp's table is in (/metrics: heatscope_unwind_tables), or
#           the walk is off (heatscope_unwind_table_walk_fallback)
#   T1..+4  zznofp alone keeps CPU 0 busy: the table walk is judged on its
#           samples from T1+1 s, saturation events on the whole run
#           (--saturation-node 100: the node's average counts the agent's
#           CPU; --saturation-cpu 50: an emulated CPU on a busy host gets
#           its ticks late, and a spinning thread was seen 50% busy)
# Every wait is bounded (generously: on the shared machine, at a load of
# 30, heatscope took 75 s to start sampling under emulation); then SIGINT
# ends the recording. The overhead
# guard is off (--max-cpu 0): under emulation the agent costs many times
# its budget, and the guard would cut the sampling rate.
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 none /sys/fs/cgroup
ip link set lo up # /metrics on 127.0.0.1

section() {
	echo "==> $1"
	cat "$2"
	echo "<== $1"
}
# run NAME COMMAND...: runs it, output and exit status into section NAME.
run() {
	name=$1
	shift
	"$@" >/tmp/run.out 2>&1
	echo "exit status $?" >>/tmp/run.out
	section "$name" /tmp/run.out
}

uname -r >/tmp/uname
section uname /tmp/uname
uname -m >/tmp/arch
section arch /tmp/arch

# A Docker container's cgroup (systemd driver), as container/ reads it.
CID=4e1a8f0c2b9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f
CG=/sys/fs/cgroup/system.slice/docker-$CID.scope
mkdir -p "$CG"
echo "$CID" >/tmp/cid
section container.id /tmp/cid

taskset 1 /bin/zznofp &
NOFP=$!
echo "$NOFP" >"$CG/cgroup.procs"
taskset -p 2 $$ >/dev/null # CPU 1: this shell, and all it starts from now on
/bin/zzsys &
SYS=$!

heatscope record --data /tmp/d --node vm --source vm --listen 127.0.0.1:7070 \
	--cache-dir /tmp/cache --bpf-stats --max-cpu 0 --saturation-cpu 50 --saturation-node 100 >/tmp/record.out 2>/tmp/record.err &
REC=$!
# until CONDITION SECONDS: waits for the condition, at most that long.
until_or() {
	deadline=$(($(date +%s) + $2))
	while ! eval "$1"; do
		[ "$(date +%s)" -ge $deadline ] && return 1
		kill -0 $REC 2>/dev/null || return 1
		sleep 0.1
	done
}
until_or "grep -q '^recording ' /tmp/record.err" 300
for j in 1 2 3 4; do
	while [ ! -e /tmp/churned ]; do
		/bin/busybox true
	done &
done
until_or "grep -q 'snapshot' /tmp/record.err" 60
touch /tmp/churned
kill $SYS
echo "<3>NETDEV WATCHDOG: eth0 (virtio_net): transmit queue 0 timed out 5120 ms" >/dev/kmsg
until_or "grep -q 'pattern=netdev-watchdog' /tmp/record.err" 30
until_or "wget -q -O - http://127.0.0.1:7070/metrics | grep -Eq '^heatscope_unwind_tables [1-9]|^heatscope_unwind_table_walk_fallback'" 60
T1=$(date +%s)
sleep 4
kill -INT $REC
wait $REC
echo "exit status $?" >/tmp/record.rc
section record.rc /tmp/record.rc
section record.out /tmp/record.out
section record.err /tmp/record.err

run walk.folded heatscope export --data /tmp/d --comm zznofp --stack user --format folded --from $((T1 + 1)) -o -
run user.folded heatscope export --data /tmp/d --comm zznofp --stack user --format folded -o -
run kernel.folded heatscope export --data /tmp/d --comm zzsys --stack kernel --format folded -o -
run container.folded heatscope export --data /tmp/d --container "$CID" --format folded -o -
kill $NOFP
echo "==> done"
echo "<== done"
poweroff -f
