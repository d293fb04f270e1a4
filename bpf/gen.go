// Package bpf holds heatscope's eBPF sampler (profile.bpf.c) and the Go
// bindings bpf2go generates for it. The generated files are committed so that
// `go build` needs no clang; `make generate` rebuilds them (it needs clang and
// bpftool, which also dumps vmlinux.h from the running kernel's BTF).
package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type hs_sample -type hs_counters -type hs_maps -type hs_mapping -type hs_row -type hs_proc -type hs_umap -type hs_py_layout -type hs_py_frame Profile profile.bpf.c -- -I.
