package bucket

import (
	"context"
	"strings"
	"testing"
)

// TestProvidersNotBuiltIn opens a valid config of each provider that only
// a build tag brings in: without the tag the error names the tag to build
// with (CI runs the tests with and without the tags).
func TestProvidersNotBuiltIn(t *testing.T) {
	for _, cfg := range []Config{
		{Provider: "gcs", Bucket: "b"},
		{Provider: "azure", Bucket: "c", StorageAccount: "acct"},
	} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: a valid config was refused: %v", cfg.Provider, err)
		}
		if openers[cfg.Provider] != nil {
			t.Logf("%s is built in (-tags %s)", cfg.Provider, cfg.Provider)
			continue
		}
		_, err := Open(context.Background(), cfg, Options{})
		if err == nil || !strings.Contains(err.Error(), "TAGS="+cfg.Provider) {
			t.Errorf("%s without its build tag: %v, want an error naming TAGS=%s", cfg.Provider, err, cfg.Provider)
		}
	}
	for _, p := range []string{"s3", "filesystem"} {
		if openers[p] == nil {
			t.Errorf("provider %s is not built in: it must always be", p)
		}
	}
}
