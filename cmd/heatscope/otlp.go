package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/heatscope/heatscope/internal/buildinfo"
	"github.com/heatscope/heatscope/otlpexport"
)

// The environment variables OpenTelemetry's exporters read their headers
// from; the profiles signal's own wins over the general one.
const (
	otlpHeadersEnv         = "OTEL_EXPORTER_OTLP_HEADERS"
	otlpProfilesHeadersEnv = "OTEL_EXPORTER_OTLP_PROFILES_HEADERS"
)

// otlpFlags are record's flags of the continuous OTLP export. Headers
// (an authorization token) come from the environment or a file, never
// from a flag's value, which any user of the machine can read.
type otlpFlags struct {
	endpoint, protocol, caFile, headersFile, queueSize *string
	compression                                        *string
	insecure                                           *bool
	interval, timeout                                  *time.Duration
}

func addOTLPFlags(fs *flag.FlagSet) *otlpFlags {
	return &otlpFlags{
		endpoint:    fs.String("otlp-endpoint", "", "also send the samples, as OTLP profiles, to this endpoint while recording: host:port (a Collector's 4317 for grpc, 4318 for http) or a URL ('' for none)"),
		protocol:    fs.String("otlp-protocol", "grpc", "protocol of --otlp-endpoint: grpc or http (OTLP/HTTP, POSTed to "+otlpexport.ProfilesPath+" unless the URL has a path)"),
		insecure:    fs.Bool("otlp-insecure", false, "send to --otlp-endpoint in plaintext (default: TLS)"),
		compression: fs.String("otlp-compression", otlpexport.CompressionGzip, "compression of the requests to --otlp-endpoint: gzip (as the Collector's exporters send) or none"),
		caFile:      fs.String("otlp-ca-file", "", "PEM file of the CAs to trust for --otlp-endpoint's TLS (default: the system's)"),
		headersFile: fs.String("otlp-headers-file", "", "file of 'Name: value' lines sent as headers with every export, e.g. 'Authorization: Bearer TOKEN' "+
			"(also $"+otlpHeadersEnv+" and $"+otlpProfilesHeadersEnv+", as name=value,...; the file wins)"),
		interval:  fs.Duration("otlp-interval", otlpexport.DefaultInterval, "how often a batch is sent to --otlp-endpoint"),
		queueSize: fs.String("otlp-queue-size", "4MiB", "bound of the batches waiting for --otlp-endpoint (their protobuf, which is what they take in memory, on top of --memory-limit): past it the oldest are dropped and counted, recording never waits"),
		timeout:   fs.Duration("otlp-timeout", otlpexport.DefaultTimeout, "bound of one export request, and of the wait for the queue when recording stops"),
	}
}

// config checks the flags and reads the headers; node is the samples'
// host.name. It returns false when no endpoint is given.
func (f *otlpFlags) config(node string) (otlpexport.Config, bool, error) {
	if *f.endpoint == "" {
		return otlpexport.Config{}, false, nil
	}
	cfg := otlpexport.Config{Endpoint: *f.endpoint, Protocol: *f.protocol, Insecure: *f.insecure, CAFile: *f.caFile,
		Compression: *f.compression, Interval: *f.interval, Timeout: *f.timeout, Node: node, Version: buildinfo.Read().Version}
	if *f.protocol != "grpc" && *f.protocol != "http" {
		return cfg, true, usageError{fmt.Errorf("--otlp-protocol %q: want grpc or http", *f.protocol)}
	}
	if *f.compression != otlpexport.CompressionGzip && *f.compression != otlpexport.CompressionNone {
		return cfg, true, usageError{fmt.Errorf("--otlp-compression %q: want gzip or none", *f.compression)}
	}
	if *f.interval <= 0 || *f.timeout <= 0 {
		return cfg, true, usageError{errors.New("--otlp-interval and --otlp-timeout: want a positive duration")}
	}
	size, err := parseSize(*f.queueSize)
	if err != nil || size < 1 {
		return cfg, true, usageError{fmt.Errorf("--otlp-queue-size %q: want a size like 4MiB", *f.queueSize)}
	}
	cfg.QueueBytes = size
	if cfg.Headers, err = otlpHeaders(*f.headersFile); err != nil {
		return cfg, true, usageError{err}
	}
	return cfg, true, nil
}

// otlpHeaders reads the export's headers: the environment's, then the
// file's, a later one replacing an earlier one of the same name.
func otlpHeaders(file string) (map[string]string, error) {
	headers := map[string]string{}
	for _, env := range []string{otlpHeadersEnv, otlpProfilesHeadersEnv} {
		h, err := otlpexport.ParseHeaderList(os.Getenv(env))
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", env, err)
		}
		maps.Copy(headers, h)
	}
	if file != "" {
		fh, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--otlp-headers-file: %w", err)
		}
		defer fh.Close()
		h, err := otlpexport.ParseHeaderFile(fh)
		if err != nil {
			return nil, fmt.Errorf("--otlp-headers-file %s: %w", file, err)
		}
		maps.Copy(headers, h)
	}
	return headers, nil
}
