package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"
)

// deploy stands for the other work on a node: every interval until ctx is
// done it links a new build of the Go fixture cmd/heatscope/testdata/hotgo,
// one with a GNU build id of its own (so the agent sees a binary it has not
// symbolized), runs it for two seconds and removes it. A node's deployments
// and cron jobs do the same to an agent, and a soak with them has the same
// load from its first hour to its last, whatever else the machine does.
func deploy(ctx context.Context, dir string, interval time.Duration, deployed, failed *atomic.Int64) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := deployOnce(ctx, dir, n); err != nil {
			if ctx.Err() != nil {
				return // stopped while building: not a failure
			}
			failed.Add(1)
			log.Printf("deploy %d: %v", n, err)
			continue
		}
		deployed.Add(1)
	}
}

// deployOnce builds the n-th binary, runs it for two seconds and removes
// it.
func deployOnce(ctx context.Context, dir string, n int) error {
	bin := filepath.Join(dir, fmt.Sprintf("deploy-%d", n))
	defer os.Remove(bin)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin,
		"-ldflags", fmt.Sprintf("-B 0x%016x%08x", time.Now().UnixNano(), n), "./cmd/heatscope/testdata/hotgo")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	run, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// The fixture runs until killed: the timeout's kill is its end.
	_ = exec.CommandContext(run, bin).Run()
	return nil
}
