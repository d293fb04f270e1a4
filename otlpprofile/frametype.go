package otlpprofile

import "github.com/heatscope/heatscope/sample"

// frameTypes is what each heatscope frame kind is written as in
// profile.frame.type, the attribute the OpenTelemetry eBPF profiler sets
// on each location. A kind not listed (sample.KindUnknown) is written
// without the attribute. A new kind is one more entry here, and its
// value read back in kindOfFrameType.
var frameTypes = map[sample.Kind]string{
	sample.KindKernel: "kernel",
	sample.KindUser:   "native",
	sample.KindJIT:    "jit",
	sample.KindPython: "cpython",
}

// kindOfFrameType reads a location's profile.frame.type back as a frame
// kind. The values heatscope writes read back as their kind. Of the
// values other senders write: "go" and "rust" are native code (the
// conventions ask for the more precise value where there is one); the
// other runtimes' frames ("jvm", "v8js", "dotnet", "php", "ruby",
// "perl", "beam", "luajit") are code a runtime generated or interprets,
// named by the runtime, which heatscope's kind for that is KindJIT;
// anything else, and no value at all, is KindUnknown.
func kindOfFrameType(v string) sample.Kind {
	switch v {
	case "kernel":
		return sample.KindKernel
	case "native", "go", "rust":
		return sample.KindUser
	case "cpython":
		return sample.KindPython
	case "jit", "jvm", "v8js", "dotnet", "php", "ruby", "perl", "beam", "luajit":
		return sample.KindJIT
	default:
		return sample.KindUnknown
	}
}

// unwindMethods is what each unwind method is written as in
// heatscope.unwind.method; MethodNotKnown is written without it.
var unwindMethods = map[sample.Method]string{
	sample.MethodTable: "table",
	sample.MethodFP:    "fp",
}

// methodOf reads heatscope.unwind.method back.
func methodOf(v string) sample.Method {
	for m, name := range unwindMethods {
		if name == v {
			return m
		}
	}
	return sample.MethodNotKnown
}
