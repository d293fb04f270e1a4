package needs

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// stops records how Missing stops a test, and ends its goroutine as
// testing.T's Fatalf and Skipf do.
type stops struct {
	testing.TB
	fatal, skip string
}

func (s *stops) Helper() {}

func (s *stops) Fatalf(format string, args ...any) {
	s.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (s *stops) Skipf(format string, args ...any) {
	s.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestMissing: a test that misses what it needs skips saying why and how
// to make it a failure, and fails saying why where the environment
// requires it.
func TestMissing(t *testing.T) {
	const env = "HEATSCOPE_REQUIRE_NEEDS_TEST"
	for _, c := range []struct {
		value       string
		fatal, skip bool
	}{{"", false, true}, {"0", false, true}, {"1", true, false}} {
		t.Setenv(env, c.value)
		s := &stops{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Missing(s, env, "no widget here")
		}()
		<-done
		if (s.fatal != "") != c.fatal || (s.skip != "") != c.skip {
			t.Errorf("%s=%q: failed %q, skipped %q", env, c.value, s.fatal, s.skip)
		}
		if msg := s.fatal + s.skip; !strings.Contains(msg, "no widget here") || !strings.Contains(msg, env+"=1") {
			t.Errorf("%s=%q: %q names neither why nor the variable", env, c.value, msg)
		}
	}
}
