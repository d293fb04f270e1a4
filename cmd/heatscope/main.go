// Command heatscope is an always-on eBPF CPU profiler.
//
//	heatscope record [flags]   sample every CPU into the data directory, serving the UI and API
//	heatscope serve [flags]    serve the UI and API over a data directory (no privileges needed)
//	heatscope export [flags]   write a time range as pprof, folded, perf script or OTLP
//	heatscope import [flags] FILE...  store perf script, folded or pprof files
//	heatscope compact [flags]  maintain a fleet's bucket (one compactor per bucket)
//	heatscope version          print the version, commit, Go release and build tags (also --version)
//
// Run "heatscope COMMAND --help" for a command's flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/heatscope/heatscope/internal/buildinfo"
)

// command is one heatscope subcommand.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"record", "sample every CPU into the data directory (and optionally one profile file), serving the UI and API", runRecord},
	{"serve", "serve the UI and HTTP API over a data directory (no privileges needed)", runServe},
	{"export", "write a time range of the data directory as pprof, folded stacks, perf script or OTLP profiles", runExport},
	{"import", "store perf script, folded or pprof files in the data directory as sources", runImport},
	{"receive", "receive OTLP profiles (gRPC and HTTP) from OpenTelemetry profilers and Collectors into a data directory per node", runReceive},
	{"compact", "maintain a fleet's bucket: merge blocks, apply retention, write the bucket index", runCompact},
	{"version", "print the version, commit, Go release and build tags (also --version)", runVersion},
}

// runVersion prints which build this binary is.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, err := fmt.Fprint(stdout, buildinfo.Read())
	return err
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError marks an error in how heatscope was called (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// logLevelEnv names the environment variable that sets the log level
// (debug, info, warn or error; info when unset).
const logLevelEnv = "HEATSCOPE_LOG_LEVEL"

func run(args []string, stdout, stderr io.Writer) int {
	var level slog.Level
	if v := os.Getenv(logLevelEnv); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			fmt.Fprintf(stderr, "heatscope: %s=%q: want debug, info, warn or error\n", logLevelEnv, v)
			return 2
		}
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	if name == "--version" || name == "-version" {
		name = "version"
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "heatscope %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "heatscope %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "heatscope: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: heatscope COMMAND [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'heatscope COMMAND --help' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
// parseQuietly parses args with fs, printing the flag list on -h only.
func parseQuietly(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	case err != nil:
		return usageError{fmt.Errorf("%w ('heatscope %s -h' lists the flags)", err, fs.Name())}
	}
	return nil
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: heatscope %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors. The
// flags are listed on -h only: after a mistake the error is the last thing
// printed, not lost above the list.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseQuietly(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}
