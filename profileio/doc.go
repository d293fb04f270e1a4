// Package profileio writes (and, later, reads) the profile file formats
// heatscope exchanges with other tools: pprof (github.com/google/pprof's
// profile.proto) and Brendan Gregg's folded stacks. Everything is built from
// sample.Sample, the one type every stage of heatscope speaks.
package profileio
