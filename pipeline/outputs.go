package pipeline

import (
	"io"

	"github.com/google/pprof/profile"

	"github.com/heatscope/heatscope/profileio"
	"github.com/heatscope/heatscope/query"
	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/saturation"
	"github.com/heatscope/heatscope/store"
)

// Saturation is the sink that feeds a saturation detector, and flushes it
// when the recording stops (the detector emits its events).
type Saturation struct{ d *saturation.Detector }

// NewSaturation returns a sink feeding d.
func NewSaturation(d *saturation.Detector) *Saturation { return &Saturation{d: d} }

// Add gives s to the detector.
func (st *Saturation) Add(s *sample.Sample) { st.d.Add(s) }

// Close flushes the detector: the spans still open are judged.
func (st *Saturation) Close() error {
	st.d.Flush()
	return nil
}

// Profile is the sink that keeps the run's samples as a pprof profile
// (record --output, --top).
type Profile struct{ b *profileio.PprofBuilder }

// NewProfile returns an empty profile of samples taken every periodNs
// (the period the recording starts at: the profile's Period field).
func NewProfile(periodNs int64) *Profile { return &Profile{b: profileio.NewPprofBuilder(periodNs)} }

// Add adds s to the profile.
func (p *Profile) Add(s *sample.Sample) { p.b.Add(s) }

// Close does nothing: the profile is read with Profile.
func (p *Profile) Close() error { return nil }

// Profile returns the profile of the samples added.
func (p *Profile) Profile() *profile.Profile { return p.b.Profile() }

// Busy returns the profile of the samples added without their CPU idle
// samples (store.IsIdle), and how many those were: what export and the UI
// count.
func (p *Profile) Busy() (busy *profile.Profile, idleSamples int64) {
	return withoutIdle(p.b.Profile())
}

// withoutIdle returns p without its CPU idle samples, and how many it left
// out.
func withoutIdle(p *profile.Profile) (*profile.Profile, int64) {
	busy := p.Copy()
	all := busy.Sample
	busy.Sample = nil
	var idle int64
	var names []string
	for _, s := range all {
		names = names[:0]
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil {
					names = append(names, line.Function.Name)
				}
			}
		}
		if comm := s.Label["comm"]; len(comm) > 0 && store.IsIdle(comm[0], names) {
			idle += s.Value[0]
			continue
		}
		busy.Sample = append(busy.Sample, s)
	}
	return busy, idle
}

// Folded is the sink that keeps the run's samples as folded stacks,
// unresolved frames grouped by module as export does by default.
type Folded struct{ b *profileio.FoldedBuilder }

// NewFolded returns empty folded stacks of samples taken every periodNs
// until a sample says otherwise.
func NewFolded(periodNs int64) *Folded {
	b := profileio.NewFoldedBuilder()
	b.SetPeriod(periodNs)
	return &Folded{b: b}
}

// Add adds s.
func (f *Folded) Add(s *sample.Sample) { f.b.Add(query.GroupAddresses.Sample(s)) }

// Close does nothing: the stacks are written with WriteTo.
func (f *Folded) Close() error { return nil }

// WriteTo writes the stacks, sorted, to w.
func (f *Folded) WriteTo(w io.Writer) (int64, error) { return f.b.WriteTo(w) }
