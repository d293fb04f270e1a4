package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/heatscope/heatscope/events"
	"github.com/heatscope/heatscope/profiler"
	"github.com/heatscope/heatscope/saturation"
	"github.com/heatscope/heatscope/store"
)

// saturationFlags are record's flags for CPU saturation events.
type saturationFlags struct {
	cpu, node *float64
	min       *time.Duration
}

func addSaturationFlags(fs *flag.FlagSet) saturationFlags {
	return saturationFlags{
		cpu: fs.Float64("saturation-cpu", 100*saturation.DefaultCPUBusy,
			"cpu-saturation events: the percent of one CPU one thread keeps busy (50 to 99.9; 0 turns the events off)"),
		node: fs.Float64("saturation-node", 100*saturation.DefaultNodeBusy,
			"cpu-saturation events: the percent the node's other CPUs (the saturated one left out) stay under on average "+
				"(above 0, at most 100; a node of one CPU has no other, and its one busy thread is marked)"),
		min: fs.Duration("saturation-min", saturation.DefaultMinDuration,
			"cpu-saturation events: the shortest span marked (100ms to 10m)"),
	}
}

// config checks the flags; off is true for --saturation-cpu 0.
func (sf saturationFlags) config() (cfg saturation.Config, off bool, err error) {
	if *sf.cpu == 0 {
		return cfg, true, nil
	}
	cfg = saturation.Config{CPUBusy: *sf.cpu / 100, NodeBusy: *sf.node / 100, MinDuration: *sf.min, Emit: func(events.Event) {}}
	if err := cfg.Validate(); err != nil {
		flag := map[string]string{"CPUBusy": "--saturation-cpu", "NodeBusy": "--saturation-node", "MinDuration": "--saturation-min"}
		var ce *saturation.ConfigError
		if errors.As(err, &ce) && flag[ce.Field] != "" {
			return cfg, false, usageError{fmt.Errorf("%s: %w", flag[ce.Field], err)}
		}
		return cfg, false, err
	}
	return cfg, false, nil
}

// detectSaturation returns a detector that marks saturation spans as
// events in db, to be given every sample and flushed at the end. It needs
// every process's samples and the idle ones: with --pid or --cgroup it
// logs that detection is off and returns nil.
func detectSaturation(db *store.DB, cfg saturation.Config, sampler profiler.Config) (*saturation.Detector, error) {
	if len(sampler.PIDs) > 0 || sampler.CgroupID != 0 {
		slog.Info("cpu saturation events are off: they need every process's samples, and --pid or --cgroup limits them")
		return nil, nil
	}
	cfg.Emit = func(e events.Event) {
		if err := db.AppendEvent(e); err != nil {
			slog.Warn("store a cpu saturation event", "err", err)
			return
		}
		slog.Info("cpu saturation", "text", e.Text)
	}
	// The node's busy share is over every CPU sampled, whether or not
	// each sends samples.
	cfg.CPUs = len(sampler.CPUs)
	if cfg.CPUs == 0 {
		online, err := profiler.OnlineCPUs()
		if err != nil {
			slog.Warn("cpu saturation events count the CPUs that send samples", "err", err)
		}
		cfg.CPUs = len(online)
	}
	return saturation.New(cfg)
}
