// Package profileio reads and writes the profile file formats heatscope
// exchanges with other tools: `perf script` text (as FlameScope reads it),
// pprof (github.com/google/pprof's profile.proto) and Brendan Gregg's folded
// stacks. Everything is built from and read into sample.Sample, the one type
// every stage of heatscope speaks.
//
// Readers stream: they call a function once per sample and never hold a
// file's samples in memory (folded stacks keep the file's aggregated lines,
// pprof the decoded profile, both of which are small). Each sample handed
// over is the callee's to keep. Every reader takes gzip-compressed input as
// well as plain, and Detect and ReadAny tell the formats apart.
//
// Times: a perf script keeps perf's own timestamps (by default the kernel's
// monotonic clock, seconds since boot), so imported perf scripts live in
// their own time base rather than in Unix time; folded stacks carry no
// times and are spread over a range the caller gives; pprof samples take
// their "timestamp_ns" label when written with PprofBuilder.KeepTimestamps,
// else are spread over the profile's window.
package profileio
