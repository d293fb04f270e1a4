package store

import (
	"regexp"
	"strings"
)

// idleFrame matches the functions of the CPU idle loop. It is FlameScope's
// list (so an imported perf script gives FlameScope's heatmap) plus do_idle
// and default_idle, which the loop shows on kernels FlameScope predates.
var idleFrame = regexp.MustCompile(`cpuidle|cpu_idle|cpu_bringup_and_idle|native_safe_halt|xen_hypercall_sched_op|xen_hypercall_vcpu_op|do_idle|default_idle`)

// idleStacks marks each stack of t that contains an idle-loop frame.
func idleStacks(t *Table) []bool {
	idleFunc := make(map[uint32]bool)
	for _, f := range t.Frames {
		if _, seen := idleFunc[f.Function]; !seen {
			idleFunc[f.Function] = idleFrame.MatchString(t.Strings[f.Function])
		}
	}
	idle := make([]bool, t.NumStacks())
	for i := range idle {
		for _, f := range t.StackOf(uint32(i)) {
			if idleFunc[t.Frames[f].Function] {
				idle[i] = true
				break
			}
		}
	}
	return idle
}

// idleThreads marks each thread of t that is a CPU's idle task: "swapper"
// (perf and FlameScope call every idle task swapper; the kernel names them
// swapper/N).
func idleThreads(t *Table) []bool {
	idle := make([]bool, len(t.Threads))
	for i, th := range t.Threads {
		idle[i] = strings.HasPrefix(t.Strings[th.Comm], "swapper")
	}
	return idle
}

// lazyIdle classifies the stacks and threads of a growing table as they are
// first asked about.
type lazyIdle struct {
	t       *Table
	stacks  []int8 // 0 unknown, 1 idle, 2 not idle
	threads []int8
	funcs   map[uint32]bool
}

func (l *lazyIdle) isIdle(thread, stack uint32) bool {
	for int(thread) >= len(l.threads) {
		l.threads = append(l.threads, 0)
	}
	if l.threads[thread] == 0 {
		l.threads[thread] = 2
		if strings.HasPrefix(l.t.Strings[l.t.Threads[thread].Comm], "swapper") {
			l.threads[thread] = 1
		}
	}
	if l.threads[thread] != 1 {
		return false
	}
	for int(stack) >= len(l.stacks) {
		l.stacks = append(l.stacks, 0)
	}
	if l.stacks[stack] == 0 {
		l.stacks[stack] = 2
		if l.funcs == nil {
			l.funcs = map[uint32]bool{}
		}
		for _, f := range l.t.StackOf(stack) {
			fn := l.t.Frames[f].Function
			idle, seen := l.funcs[fn]
			if !seen {
				idle = idleFrame.MatchString(l.t.Strings[fn])
				l.funcs[fn] = idle
			}
			if idle {
				l.stacks[stack] = 1
				break
			}
		}
	}
	return l.stacks[stack] == 1
}

// IsIdle reports whether a sample of command comm whose stack holds these
// functions is a CPU's idle loop: the rule queries apply when they leave
// idle samples out.
func IsIdle(comm string, functions []string) bool {
	if !strings.HasPrefix(comm, "swapper") {
		return false
	}
	for _, f := range functions {
		if idleFrame.MatchString(f) {
			return true
		}
	}
	return false
}
