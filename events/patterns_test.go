package events

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultPatterns matches kernel messages as drivers and the kernel
// print them, and some that must not match.
func TestDefaultPatterns(t *testing.T) {
	ps := DefaultPatterns()
	for text, want := range map[string]string{
		"ena 0000:00:05.0 eth0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.8.0g": "ena-reset",
		"ena 0000:00:06.0 eth1: Trigger reset is on":                                                            "ena-reset",
		"NETDEV WATCHDOG: eth0 (ena): transmit queue 3 timed out 5376 ms":                                       "netdev-watchdog",
		"ixgbe 0000:01:00.0 eth2: transmit queue 0 timed out":                                                   "tx-timeout",
		"e1000e 0000:00:1f.6 eno1: NIC Link is Down":                                                            "link-down",
		"mlx5_core 0000:3b:00.0 ens1f0: Link down":                                                              "link-down",
		"Out of memory: Killed process 4242 (java) total-vm:8123456kB, anon-rss:4000000kB":                      "oom-kill",
		"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,task=java,pid=4242,uid=0": "oom-kill",
		"kubelet invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=-999":                   "oom-kill",
		"watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:1234]":                                  "soft-lockup",
		"Watchdog detected hard LOCKUP on cpu 2":                                                                "hard-lockup",
		"INFO: task jbd2/nvme0n1p1-:412 blocked for more than 122 seconds.":                                     "hung-task",
		"rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:":                                                 "rcu-stall",
		"rcu: INFO: rcu_sched self-detected stall on CPU":                                                       "rcu-stall",
		"app[4242]: segfault at 0 ip 000055d1c0ffee00 sp 00007ffd2a3b4c50 error 4 in app[55d1c0ff0000+2000]":    "segfault",
	} {
		p := Match(ps, text)
		if p == nil || p.Name != want {
			t.Errorf("%q matched %v, want %s", text, p, want)
		}
	}
	for _, text := range []string{
		"NET: Registered PF_INET6 protocol family",
		"ena 0000:00:05.0 eth0: Elastic Network Adapter (ENA) found at mem febf4000",
		"eth0: link up, 10Gbps",
		"systemd[1]: Started Daily apt download activities.",
	} {
		if p := Match(ps, text); p != nil {
			t.Errorf("%q matched %s", text, p.Name)
		}
	}
}

func TestParsePattern(t *testing.T) {
	p, err := ParsePattern("deploy=^deploy .* done$", 1)
	if err != nil || p.Name != "deploy" || !p.Re.MatchString("deploy api done") {
		t.Fatalf("named pattern: %+v, %v", p, err)
	}
	// A '=' inside the expression is not a name.
	p, err = ParsePattern("a(?:=b)", 3)
	if err != nil || p.Name != "custom-3" || !p.Re.MatchString("a=b") {
		t.Fatalf("bare pattern: %+v, %v", p, err)
	}
	for _, spec := range []string{"bad=(unclosed", "[z-a]", "name="} {
		if _, err := ParsePattern(spec, 1); err == nil || !strings.Contains(err.Error(), spec) {
			t.Errorf("ParsePattern(%q): %v, want an error quoting it", spec, err)
		}
	}
}

func TestReadPatternFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("# network\n\nreset=eth\\d+: reset\n  watchdog fired  \n"), 0o644)
	ps, err := ReadPatternFile(good, 2)
	if err != nil || len(ps) != 2 || ps[0].Name != "reset" || ps[1].Name != "custom-4" || !ps[1].Re.MatchString("watchdog fired") {
		t.Fatalf("ReadPatternFile: %+v, %v", ps, err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("ok=fine\nbroken=(x\n"), 0o644)
	if _, err := ReadPatternFile(bad, 0); err == nil || !strings.Contains(err.Error(), bad+":2") || !strings.Contains(err.Error(), "broken=(x") {
		t.Errorf("bad file: %v", err)
	}
	if _, err := ReadPatternFile(filepath.Join(dir, "missing"), 0); err == nil {
		t.Error("missing file: no error")
	}
}
