package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/store"
)

// filterCases pair each filter parameter with the filter it must give.
var filterCases = []struct {
	name, query string
	f           store.Filter
}{
	{"default", "", store.Filter{}},
	{"source", "source=capture", store.Filter{Sources: []string{"capture"}}},
	{"sources", "source=host,capture", store.Filter{Sources: []string{"host", "capture"}}},
	{"comm", "comm=kubelet", store.Filter{Comm: "kubelet"}},
	{"comm regex", "comm=" + url.QueryEscape("~^(java|Web)"), store.Filter{CommRegex: regexp.MustCompile(`^(java|Web)`)}},
	{"pid", "pid=1000,1300,777", store.Filter{PIDs: []uint32{1000, 1300, 777}}},
	{"tid", "tid=1101,4243", store.Filter{TIDs: []uint32{1101, 4243}}},
	{"cpu", "cpu=1-2", store.Filter{CPUs: []uint32{1, 2}}},
	{"cgroup", "cgroup=5003,5005", store.Filter{Cgroups: []uint64{5003, 5005}}},
	{"cgroup paths", "cgroup=" + url.QueryEscape("/sys/fs/cgroup/system.slice/ssh.service,system.slice/containerd.service"),
		store.Filter{CgroupPaths: []string{"/system.slice/ssh.service", "/system.slice/containerd.service"}}},
	{"cgroup id or path", "cgroup=5000," + url.QueryEscape("/system.slice/ssh.service"),
		store.Filter{Cgroups: []uint64{5000}, CgroupPaths: []string{"/system.slice/ssh.service"}}},
	{"container", "container=cart,istio-proxy", store.Filter{Containers: []string{"cart", "istio-proxy"}}},
	{"pod", "pod=etl-1", store.Filter{Pods: []string{"etl-1"}}},
	{"namespace", "namespace=shop", store.Filter{Namespaces: []string{"shop"}}},
	{"qos", "qos=besteffort", store.Filter{QoS: []string{"besteffort"}}},
	{"frame", "frame=" + url.QueryEscape("mem_cgroup|naïve_3"), store.Filter{Frame: regexp.MustCompile(`mem_cgroup|naïve_3`)}},
	{"stack kernel", "stack=kernel", store.Filter{Stack: store.KernelFrames}},
	{"stack user", "stack=user", store.Filter{Stack: store.UserFrames}},
	{"idle", "idle=include", store.Filter{IncludeIdle: true}},
	{"all at once", "source=capture&comm=java&cpu=0&stack=kernel&idle=include&frame=vfs",
		store.Filter{Sources: []string{"capture"}, Comm: "java", CPUs: []uint32{0}, Stack: store.KernelFrames,
			IncludeIdle: true, Frame: regexp.MustCompile(`vfs`)}},
}

// rangeA covers most of the recording and all of the capture; rangeB, the
// baseline, a few seconds before.
var (
	rangeA = store.Range{From: (base + 10) * 1e9, To: (base + 80) * 1e9}
	rangeB = store.Range{From: (base*1000 + 2500) * 1e6, To: (base*1000 + 9750) * 1e6}
)

const queryA = "from=1795237390&to=1795237460"

func withQuery(path string, parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return path + "?" + strings.Join(kept, "&")
}

// wantJSON fails unless body is exactly encoding/json's encoding of v.
func wantJSON(t *testing.T, what string, body []byte, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, want) {
		i := 0
		for i < len(body) && i < len(want) && body[i] == want[i] {
			i++
		}
		lo := max(0, i-80)
		t.Fatalf("%s: the JSON differs from the query package's at byte %d:\n got ...%s\nwant ...%s", what, i,
			body[lo:min(len(body), i+80)], want[lo:min(len(want), i+80)])
	}
}

func mustOK(t *testing.T, what string, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %s", what, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); what != "pprof" && ct != "application/json; charset=utf-8" {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
}

// TestEndpointsMatchQueryPackage asks every endpoint with every filter
// parameter and compares the answer with the query package's own.
func TestEndpointsMatchQueryPackage(t *testing.T) {
	db := testStore(t)
	fx := newFixture(t, db, Options{})
	ctx := context.Background()
	for _, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			resp, body := fx.get(t, withQuery("/api/heatmap", queryA, "rows=7", tc.query))
			mustOK(t, "heatmap", resp, body)
			h, _, err := query.HeatmapOf(ctx, db, rangeA, &f, 7)
			if err != nil {
				t.Fatal(err)
			}
			wantJSON(t, "heatmap", body, heatmapJSON{Heatmap: h})

			resp, body = fx.get(t, withQuery("/api/timeline", queryA, "step=10s", tc.query))
			mustOK(t, "timeline", resp, body)
			tl, _, err := db.Timeline(ctx, rangeA, 10e9, &f)
			if err != nil {
				t.Fatal(err)
			}
			wantJSON(t, "timeline 10s", body, newTimelineJSON((base+10)*1e9, 10e9, tl))

			// A step that is no multiple of 10 s: the range is kept as given.
			resp, body = fx.get(t, withQuery("/api/timeline", "from=1795237390.25&to=1795237459&step=2.5", tc.query))
			mustOK(t, "timeline", resp, body)
			r := store.Range{From: (base+10)*1e9 + 250e6, To: (base + 79) * 1e9}
			if tl, _, err = db.Timeline(ctx, r, 2500e6, &f); err != nil {
				t.Fatal(err)
			}
			wantJSON(t, "timeline 2.5 s", body, newTimelineJSON(r.From, 2500e6, tl))

			resp, body = fx.get(t, withQuery("/api/percpu", "from=1795237390.25&to=1795237459", "step=0.5", tc.query))
			mustOK(t, "percpu", resp, body)
			pc, _, err := query.PerCPUOf(ctx, db, r, &f, 500e6)
			if err != nil {
				t.Fatal(err)
			}
			if len(pc.CPUs) == 0 {
				t.Fatal("per-CPU: the filter selects nothing: the comparison proves nothing")
			}
			wantJSON(t, "percpu 0.5 s", body, perCPUJSON{PerCPU: pc})

			// The default step: 70 s / 600 columns rounds up to 200 ms.
			resp, body = fx.get(t, withQuery("/api/percpu", queryA, tc.query))
			mustOK(t, "percpu", resp, body)
			if pc, _, err = query.PerCPUOf(ctx, db, rangeA, &f, 200e6); err != nil {
				t.Fatal(err)
			}
			wantJSON(t, "percpu default step", body, perCPUJSON{PerCPU: pc})

			resp, body = fx.get(t, withQuery("/api/flamegraph", queryA, tc.query))
			mustOK(t, "flamegraph", resp, body)
			root, _, err := query.FlameGraphOf(ctx, db, rangeA, &f)
			if err != nil {
				t.Fatal(err)
			}
			wantJSON(t, "flamegraph", body, flameJSON{Node: root})

			resp, body = fx.get(t, withQuery("/api/diff", queryA, "from2=1795237382.5&to2=1795237389.75", tc.query))
			mustOK(t, "diff", resp, body)
			d, _, err := query.DiffOf(ctx, db, rangeA, rangeB, &f, query.ByTotals, query.GroupAddresses)
			if err != nil {
				t.Fatal(err)
			}
			want := nestedDiff(d)
			if d.SamplesB == 0 {
				// The capture has no sample in B: the answer says so.
				capture := sourceNamed(t, db, "capture")
				if len(f.Sources) != 1 || f.Sources[0] != "capture" {
					t.Fatalf("no sample in B with filter %s", tc.query)
				}
				want.Message = fmt.Sprintf(`The baseline B (from2, to2): no samples of source "capture" from %s to %s: they span %s to %s.`,
					query.FormatTime(rangeB.From), query.FormatTime(rangeB.To), query.FormatTime(capture.First), query.FormatTime(capture.Last))
			}
			wantJSON(t, "diff", body, want)

			resp, body = fx.get(t, withQuery("/api/diff", queryA, "from2=1795237382.5&to2=1795237389.75&normalize=length", tc.query))
			mustOK(t, "diff by length", resp, body)
			d, _, err = query.DiffOf(ctx, db, rangeA, rangeB, &f, query.ByLength, query.GroupAddresses)
			if err != nil {
				t.Fatal(err)
			}
			msg := want.Message
			want = nestedDiff(d)
			want.Message = msg
			wantJSON(t, "diff by length", body, want)

			resp, body = fx.get(t, withQuery("/api/top", queryA, "limit=20", tc.query))
			mustOK(t, "top", resp, body)
			top, _, err := query.TopOf(ctx, db, rangeA, &f, query.GroupNone, query.GroupAddresses)
			if err != nil {
				t.Fatal(err)
			}
			if top.Samples == 0 {
				t.Fatal("the filter selects nothing: the comparison proves nothing")
			}
			top.Functions = top.Functions[:min(20, len(top.Functions))]
			wantJSON(t, "top", body, topJSON{Top: top})

			resp, body = fx.get(t, withQuery("/api/pprof", queryA, tc.query))
			mustOK(t, "pprof", resp, body)
			p, _, err := query.PprofOf(ctx, db, rangeA, &f)
			if err != nil {
				t.Fatal(err)
			}
			// The samples must match; their order need not: a head being
			// written as a block between the two queries moves its samples
			// after the older blocks'.
			got, err := profile.ParseData(body)
			if err != nil {
				t.Fatalf("parse the pprof download: %v", err)
			}
			if g, w := pprofSamples(got), pprofSamples(p); !maps.Equal(g, w) || len(w) == 0 {
				t.Fatalf("pprof download has %d distinct samples, query.PprofOf %d, or they differ", len(g), len(w))
			}
		})
	}
}

// pprofSamples counts a profile's samples by their labels and stack.
func pprofSamples(p *profile.Profile) map[string]int64 {
	out := map[string]int64{}
	for _, s := range p.Sample {
		key := fmt.Sprint(s.Label, s.NumLabel)
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				key += ";" + line.Function.Name + "@" + loc.Mapping.File
			}
		}
		out[key] += s.Value[0]
	}
	return out
}

func TestDefaultPerCPUStep(t *testing.T) {
	for _, tc := range []struct{ width, want int64 }{
		{1, 10e6}, {int64(time.Second), 10e6}, {6e9, 10e6}, {6e9 + 1, 20e6}, {70e9, 200e6},
		{int64(time.Hour), 10e9}, {maxTime, 10e15},
	} {
		got := defaultPerCPUStep(tc.width)
		if got != tc.want || (tc.width+got-1)/got > defaultPerCPUSteps {
			t.Errorf("defaultPerCPUStep(%d) = %d, want %d", tc.width, got, tc.want)
		}
	}
}

// TestFlameGraphGroups asks for flame graphs grouped by each kind of
// container metadata, filtered and not, and compares them with the query
// package's.
func TestFlameGraphGroups(t *testing.T) {
	db := testStore(t)
	fx := newFixture(t, db, Options{})
	for _, g := range []query.Group{query.GroupContainer, query.GroupPod, query.GroupNamespace, query.GroupQoS, query.GroupCgroup} {
		for _, filter := range []string{"", "namespace=shop"} {
			resp, body := fx.get(t, withQuery("/api/flamegraph", queryA, "group="+string(g), filter))
			mustOK(t, "flamegraph", resp, body)
			f, err := query.ParseFilter(func(n string) string {
				if n == "namespace" && filter != "" {
					return "shop"
				}
				return ""
			})
			if err != nil {
				t.Fatal(err)
			}
			root, _, err := query.GroupedFlameGraphOf(context.Background(), db, rangeA, &f, g, query.GroupAddresses)
			if err != nil {
				t.Fatal(err)
			}
			if len(root.Children) < 2 && filter == "" || len(root.Children) == 0 || root.Children[0].Kind != "group" {
				t.Fatalf("group=%s %s: root children %d, first %+v: not a grouped tree", g, filter, len(root.Children), root.Children)
			}
			wantJSON(t, "flamegraph group="+string(g), body, flameJSON{Node: root})
		}
	}
}

// TestTopGroups asks for the top table grouped by each kind of container
// metadata, compares it with the query package's, and checks that a
// function's rows add up to its row in the ungrouped table.
func TestTopGroups(t *testing.T) {
	db := testStore(t)
	fx := newFixture(t, db, Options{})
	var whole query.Top
	resp, body := fx.get(t, withQuery("/api/top", queryA, "limit=10000"))
	mustOK(t, "top", resp, body)
	if err := json.Unmarshal(body, &whole); err != nil {
		t.Fatal(err)
	}
	for _, g := range []query.Group{query.GroupContainer, query.GroupPod, query.GroupNamespace, query.GroupQoS, query.GroupCgroup} {
		resp, body := fx.get(t, withQuery("/api/top", queryA, "limit=10000", "group="+string(g)))
		mustOK(t, "top", resp, body)
		want, _, err := query.TopOf(context.Background(), db, rangeA, &store.Filter{}, g, query.GroupAddresses)
		if err != nil {
			t.Fatal(err)
		}
		wantJSON(t, "top group="+string(g), body, topJSON{Top: want})
		groups := map[string]bool{}
		self, total := map[string]int64{}, map[string]int64{}
		for _, fn := range want.Functions {
			if fn.Group == "" {
				t.Fatalf("group=%s: a row without a group: %+v", g, fn)
			}
			groups[fn.Group] = true
			self[fn.Kind+" "+fn.Name] += fn.Self
			total[fn.Kind+" "+fn.Name] += fn.Total
		}
		if len(groups) < 2 || want.Samples != whole.Samples {
			t.Fatalf("group=%s: %d groups, %d samples (ungrouped %d)", g, len(groups), want.Samples, whole.Samples)
		}
		for _, fn := range whole.Functions {
			if k := fn.Kind + " " + fn.Name; self[k] != fn.Self || total[k] != fn.Total {
				t.Errorf("group=%s: %s: self %d total %d over the groups, %d and %d ungrouped", g, k, self[k], total[k], fn.Self, fn.Total)
			}
		}
	}
}
