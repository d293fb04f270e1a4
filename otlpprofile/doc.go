// Package otlpprofile is the one owner of the mapping between heatscope's
// samples (sample.Sample) and OpenTelemetry's profiles signal (OTLP
// profiles, v1development), in both directions: Encoder turns samples
// into a pprofile.Profiles, Decode turns a pprofile.Profiles back into
// samples. Both use the collector's own model and codecs
// (go.opentelemetry.io/collector/pdata/pprofile); nothing here writes
// protobuf by hand.
//
// What a heatscope sample becomes:
//
//   - One ResourceProfiles per node, its resource naming the node as
//     host.name and, where the encoder is given one, the recorder as
//     host.id (its data directory's instance id, which tells two
//     machines under one host.name apart); one ScopeProfiles named "heatscope" with the agent's
//     version; one Profile of sample type cpu/nanoseconds and period type
//     cpu/nanoseconds (its period the batch's most common one).
//   - One OTLP Sample per stack and set of attributes, holding one
//     timestamp (timestamps_unix_nano) and one value per heatscope sample:
//     the value is the sample's own period (PeriodNs), the CPU time it
//     weighs, so a rate the overhead guard changed mid-batch changes no
//     total.
//   - Sample attributes, keyed as OpenTelemetry's semantic conventions
//     and the OpenTelemetry eBPF profiler key them: process.pid,
//     thread.id, thread.name (the kernel's comm), cpu.logical_number;
//     container.id, container.runtime.name, k8s.pod.uid, k8s.pod.name,
//     k8s.namespace.name, k8s.container.name, process.linux.cgroup
//     ("0::" and the cgroup v2 path, as /proc/PID/cgroup writes it); and
//     where the conventions have no key, heatscope's own:
//     heatscope.cgroup.id and heatscope.k8s.pod.qos_class.
//   - Frames as locations (leaf first), each with its address, its
//     module as a mapping (the path, or [kernel.kallsyms]) carrying the
//     GNU build id as process.executable.build_id.gnu, its function as
//     one line, and its kind as profile.frame.type: kernel, native (a
//     file-backed user mapping), jit (code named by a perf map; not in
//     the conventions' list, whose values are open), cpython, none for
//     a frame of unknown kind. A Python frame has no mapping and no
//     address: its function carries the source file and first line, its
//     line the line being run. How a user frame was unwound, when known,
//     is heatscope.unwind.method (table or fp).
//
// Decode reads that back losslessly (a sample's Unwind bits are not
// carried: their result is in the frames' Method), and reads what other
// senders write, the OpenTelemetry eBPF profiler first: its sample type
// samples/count with a cpu/nanoseconds period, its resources per process
// (resource attributes are read as the samples' own, a sample's
// overriding its resource's), its frame types and unsymbolized native
// frames. What a sender leaves out is unknown (zero) in the sample, never
// a panic; a request whose indices point outside its tables is an error.
package otlpprofile

import semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

// ScopeName is the instrumentation scope heatscope's profiles carry.
const ScopeName = "heatscope"

// Attribute keys. The conventions' keys are semconv's; heatscope's own
// keys are for what the conventions do not name.
const (
	keyHostName         = string(semconv.HostNameKey)
	keyHostID           = string(semconv.HostIDKey)
	keyPID              = string(semconv.ProcessPIDKey)
	keyTID              = string(semconv.ThreadIDKey)
	keyThreadName       = string(semconv.ThreadNameKey)
	keyExecutableName   = string(semconv.ProcessExecutableNameKey)
	keyCPU              = string(semconv.CPULogicalNumberKey)
	keyCgroup           = string(semconv.ProcessLinuxCgroupKey)
	keyContainerID      = string(semconv.ContainerIDKey)
	keyContainerRuntime = string(semconv.ContainerRuntimeNameKey)
	keyPodUID           = string(semconv.K8SPodUIDKey)
	keyPodName          = string(semconv.K8SPodNameKey)
	keyNamespace        = string(semconv.K8SNamespaceNameKey)
	keyContainerName    = string(semconv.K8SContainerNameKey)
	keyBuildIDGNU       = string(semconv.ProcessExecutableBuildIDGNUKey)
	keyFrameType        = string(semconv.ProfileFrameTypeKey)

	// keyCgroupID is the cgroup v2 id (its inode number) heatscope's
	// BPF program read.
	keyCgroupID = "heatscope.cgroup.id"
	// keyQoS is the pod's QoS class, from its cgroup path.
	keyQoS = "heatscope.k8s.pod.qos_class"
	// keyUnwindMethod says how a user frame was found: table or fp.
	keyUnwindMethod = "heatscope.unwind.method"
	// keyContainerRuntimeOld is container.runtime, the key older
	// conventions (and older senders) used for the runtime's name.
	keyContainerRuntimeOld = "container.runtime"
)

// cgroupV2Prefix is how /proc/PID/cgroup starts a cgroup v2 path, and so
// how process.linux.cgroup does.
const cgroupV2Prefix = "0::"

// Sample and period types.
const (
	typeCPU         = "cpu"
	typeSamples     = "samples"
	unitNanoseconds = "nanoseconds"
	unitCount       = "count"
)

// schemaURL is the semantic conventions' version the keys are from.
const schemaURL = semconv.SchemaURL
