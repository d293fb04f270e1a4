package miniotest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heatscope/heatscope/bucket"
)

// TestLaunch starts servers as the benchmarks do, on HTTP and HTTPS, and
// reads back through an objstore config file what was written through
// Config; Stop leaves no server behind.
func TestLaunch(t *testing.T) {
	Require(t)
	for _, tls := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[tls], func(t *testing.T) {
			s, err := Launch(t.TempDir(), Options{TLS: tls})
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			defer s.Stop()
			if (s.CAFile != "") != tls {
				t.Fatalf("CAFile %q with TLS %t", s.CAFile, tls)
			}
			ctx := context.Background()
			w, err := bucket.Open(ctx, s.Config("p"), bucket.Options{Component: "test"})
			if err != nil {
				t.Fatalf("open through Config: %v", err)
			}
			defer w.Close()
			if err := w.Upload(ctx, "obj", strings.NewReader("hello")); err != nil {
				t.Fatalf("upload: %v", err)
			}
			path, err := s.ConfigFile(s.Config("p"))
			if err != nil {
				t.Fatalf("ConfigFile: %v", err)
			}
			cfg, err := bucket.LoadConfig(path)
			if err != nil {
				t.Fatalf("load %s: %v", path, err)
			}
			r, err := bucket.Open(ctx, cfg, bucket.Options{Component: "test"})
			if err != nil {
				t.Fatalf("open through %s: %v", path, err)
			}
			defer r.Close()
			rc, err := r.Get(ctx, "obj")
			if err != nil {
				t.Fatalf("get through %s: %v", path, err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || string(got) != "hello" {
				t.Fatalf("read back %q, %v; want \"hello\"", got, err)
			}

			pid := s.cmd.Process.Pid
			s.Stop()
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("after Stop, signal 0 to the server (pid %d): %v; want ESRCH", pid, err)
			}
			s.Stop() // stopping a stopped server does nothing
		})
	}
}

// TestLaunchErrors: without a binary, or with one that exits at once,
// Launch says so.
func TestLaunchErrors(t *testing.T) {
	exits := filepath.Join(t.TempDir(), "minio")
	if err := os.WriteFile(exits, []byte("#!/bin/sh\necho not a minio >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ binary, want string }{
		{filepath.Join(t.TempDir(), "absent"), "no MinIO server binary at"},
		{exits, "exited at start: not a minio"},
	} {
		t.Setenv("HEATSCOPE_MINIO", c.binary)
		s, err := Launch(t.TempDir(), Options{})
		if err == nil {
			s.Stop()
			t.Fatalf("Launch with %s: no error; want %q", c.binary, c.want)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Launch with %s: %v; want %q", c.binary, err, c.want)
		}
	}
}
