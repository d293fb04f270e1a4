#!/bin/sh
# /init of the kernel matrix's initramfs (TestKernelMatrix). It runs the
# workloads and one `heatscope record` that exercises every BPF-facing part
# at once, then prints what the test judges, each piece between
# "==> NAME" and "<== NAME" lines on the console, and powers off.
#
# Timeline, from the recorder's first progress line (T0):
#   zznofp  spins the whole run, pinned to CPU 0, in a container cgroup
#   zzsys   makes system calls until T0+2 (kernel stacks)
#   churn   short-lived processes until T0+2 (exit snapshots)
#   T0+3    a NETDEV WATCHDOG line written to /dev/kmsg (kernel log events)
#   after   zznofp alone keeps CPU 0 busy (saturation; under TCG the agent
#           itself may keep the node busy: --saturation-node 100)
# The table walk is judged on zznofp's samples from T0+3, when its table
# is in (the first samples of a process are walked with frame pointers).
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 none /sys/fs/cgroup

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

# A Docker container's cgroup (systemd driver), as container/ reads it.
CID=4e1a8f0c2b9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f
CG=/sys/fs/cgroup/system.slice/docker-$CID.scope
mkdir -p "$CG"
echo "$CID" >/tmp/cid
section container.id /tmp/cid

taskset -c 0 /bin/zznofp &
NOFP=$!
echo "$NOFP" >"$CG/cgroup.procs"
/bin/zzsys &
SYS=$!

heatscope record --duration 9s --data /tmp/d --node vm --source vm --listen '' \
	--cache-dir /tmp/cache --bpf-stats --saturation-node 100 >/tmp/record.out 2>/tmp/record.err &
REC=$!
# T0: the recorder samples.
i=0
while ! grep -q '^recording ' /tmp/record.err 2>/dev/null; do
	i=$((i + 1))
	[ $i -gt 600 ] && break
	kill -0 $REC 2>/dev/null || break
	sleep 0.1
done
T0=$(date +%s)
end=$((T0 + 2))
while [ "$(date +%s)" -lt $end ]; do
	/bin/busybox true
done
kill $SYS
sleep 1
echo "<3>NETDEV WATCHDOG: eth0 (virtio_net): transmit queue 0 timed out 5120 ms" >/dev/kmsg
wait $REC
echo "exit status $?" >/tmp/record.rc
section record.rc /tmp/record.rc
section record.out /tmp/record.out
section record.err /tmp/record.err

run walk.folded heatscope export --data /tmp/d --comm zznofp --stack user --format folded --from $((T0 + 3)) -o -
run user.folded heatscope export --data /tmp/d --comm zznofp --stack user --format folded -o -
run kernel.folded heatscope export --data /tmp/d --comm zzsys --stack kernel --format folded -o -
run container.folded heatscope export --data /tmp/d --container "$CID" --format folded -o -
kill $NOFP
echo "==> done"
echo "<== done"
poweroff -f
