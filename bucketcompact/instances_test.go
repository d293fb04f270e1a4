package bucketcompact

import (
	"testing"
	"time"

	"github.com/heatscope/heatscope/internal/miniotest"
	"github.com/heatscope/heatscope/internal/storetest"
	"github.com/heatscope/heatscope/internal/synth"
)

// TestInstancesStayApart: two recorders that shipped under one node name
// (two instances, over the same minutes) are merged each on its own: a
// merged block holds one instance's samples, which the query service can
// then show apart, and every sample is kept.
func TestInstancesStayApart(t *testing.T) {
	srv := miniotest.Start(t)
	bkt := &faultyBucket{Bucket: srv.Open("")}
	start := day().Add(5 * time.Minute).UnixNano()
	total := 0
	for seed := range uint64(2) {
		dir, n := storetest.RecordSynth(t, "node-a", nil, synth.Config{CPUs: 2, Hz: 49, Start: start, Seconds: 300, Seed: seed + 1}, 2*time.Minute)
		miniotest.UploadBlocks(t, bkt, "node-a", dir)
		total += n
	}
	c := newCompactor(t, bkt, newClock(time.Now()), Options{Ranges: []time.Duration{2 * time.Hour}})
	for range 3 {
		run(t, c)
	}
	byInstance := map[string]int{}
	samples := 0
	for _, b := range liveBlocks(t, bkt) {
		byInstance[b.Instance]++
		samples += b.Samples
	}
	if len(byInstance) != 2 || samples != total {
		t.Fatalf("blocks by instance after compaction: %v with %d samples; want two instances' blocks, %d samples", byInstance, samples, total)
	}
	for inst, n := range byInstance {
		if inst == "" || n != 1 {
			t.Errorf("instance %q: %d blocks, want one merged block", inst, n)
		}
	}
}
