package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// TestConditionalMinIO checks the conditional writes against a real MinIO:
// a create fails on an existing object, a replace on a version that is no
// longer the object's, and of writers racing from one state exactly one
// wins.
func TestConditionalMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	testConditional(t, srv.Open("prefix"))
}

// TestConditionalFilesystem checks the same of the filesystem provider.
func TestConditionalFilesystem(t *testing.T) {
	b, err := bucket.Open(context.Background(), bucket.Config{Provider: "filesystem", Directory: t.TempDir(), Prefix: "p"}, bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testConditional(t, b)
}

func testConditional(t *testing.T, b *bucket.Bucket) {
	ctx := context.Background()
	const name = "node-a/lease.json"
	if _, _, err := b.ReadVersioned(ctx, name); !b.IsObjNotFoundErr(err) {
		t.Fatalf("ReadVersioned of a missing object: %v, want not found", err)
	}
	v1, err := b.CreateIfAbsent(ctx, name, []byte("one"))
	if err != nil || v1 == "" {
		t.Fatalf("CreateIfAbsent of a new object: %q, %v", v1, err)
	}
	if _, err := b.CreateIfAbsent(ctx, name, []byte("two")); !errors.Is(err, bucket.ErrConditionFailed) {
		t.Fatalf("CreateIfAbsent of an existing object: %v, want ErrConditionFailed", err)
	}
	data, v, err := b.ReadVersioned(ctx, name)
	if err != nil || string(data) != "one" || v != v1 {
		t.Fatalf("ReadVersioned = %q, %q, %v; want one, %q", data, v, err, v1)
	}
	v2, err := b.ReplaceIfVersion(ctx, name, []byte("three"), v1)
	if err != nil || v2 == "" || v2 == v1 {
		t.Fatalf("ReplaceIfVersion of the current version: %q, %v (the old one was %q)", v2, err, v1)
	}
	if _, err := b.ReplaceIfVersion(ctx, name, []byte("four"), v1); !errors.Is(err, bucket.ErrConditionFailed) {
		t.Fatalf("ReplaceIfVersion of a replaced version: %v, want ErrConditionFailed", err)
	}
	if data, _, _ := b.ReadVersioned(ctx, name); string(data) != "three" {
		t.Fatalf("after a failed replace the object holds %q, want three", data)
	}

	// Eight writers replace the same version at once: one wins.
	wins := race(t, 8, func(i int) error {
		_, err := b.ReplaceIfVersion(ctx, name, fmt.Appendf(nil, "writer %d", i), v2)
		return err
	})
	if wins != 1 {
		t.Fatalf("%d of 8 writers replaced one version, want exactly 1", wins)
	}
	// Eight writers create one new object at once: one wins.
	wins = race(t, 8, func(i int) error {
		_, err := b.CreateIfAbsent(ctx, "node-b/lease.json", fmt.Appendf(nil, "writer %d", i))
		return err
	})
	if wins != 1 {
		t.Fatalf("%d of 8 writers created one object, want exactly 1", wins)
	}

	// A replace of a deleted object fails: it is not there to replace.
	_, v, _ = b.ReadVersioned(ctx, name)
	if err := b.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReplaceIfVersion(ctx, name, []byte("five"), v); !errors.Is(err, bucket.ErrConditionFailed) {
		t.Fatalf("ReplaceIfVersion of a deleted object: %v, want ErrConditionFailed", err)
	}
	if ok, _ := b.Exists(ctx, name); ok {
		t.Fatal("a failed replace of a deleted object created it")
	}
}

// race runs write(0..n-1) in n goroutines released at once and counts the
// writes that succeeded; any failure but ErrConditionFailed fails the test.
func race(t *testing.T, n int, write func(i int) error) int {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = write(i)
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, bucket.ErrConditionFailed):
			t.Errorf("a racing write failed otherwise: %v", err)
		}
	}
	return wins
}
