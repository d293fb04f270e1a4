package bucket_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// TestMinIO writes, lists, reads and deletes objects in a real MinIO
// through the prefix.
func TestMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("fleet")
	ctx := context.Background()
	if err := b.Check(ctx, "node-a/"); err != nil {
		t.Fatalf("Check on an empty bucket: %v", err)
	}
	if err := b.Upload(ctx, "node-a/blocks/1/data", strings.NewReader("0123456789")); err != nil {
		t.Fatal(err)
	}
	if got := srv.Objects(""); !slices.Equal(got, []string{"fleet/node-a/blocks/1/data"}) {
		t.Fatalf("objects in the bucket: %q, want the one under the prefix", got)
	}
	rc, err := b.GetRange(ctx, "node-a/blocks/1/data", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "234" {
		t.Fatalf("GetRange(2, 3) = %q, want 234", got)
	}
	var names []string
	if err := b.Iter(ctx, "node-a/blocks/", func(n string) error { names = append(names, n); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"node-a/blocks/1/"}) {
		t.Fatalf("Iter = %q", names)
	}
	_, err = b.Get(ctx, "node-a/blocks/2/data")
	if !b.IsObjNotFoundErr(err) {
		t.Fatalf("Get of a missing object: %v, want not found", err)
	}
	for _, want := range []string{"bucket s3://" + srv.Bucket + "/fleet", "get node-a/blocks/2/data"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if err := b.Delete(ctx, "node-a/blocks/1/data"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Exists(ctx, "node-a/blocks/1/data"); ok || err != nil {
		t.Fatalf("Exists after Delete: %v, %v", ok, err)
	}
}

// TestMinIOWrongCredentials checks what a user sees with a wrong secret,
// an unknown access key and a missing bucket: an error naming the bucket
// and the operation, and no credential in it or in the logs.
func TestMinIOWrongCredentials(t *testing.T) {
	srv := miniotest.Start(t)
	wrongSecret := "wrong-" + srv.SecretKey[:20]
	unknownKey := "unknownkey" + srv.AccessKey
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		cfg         bucket.Config
		want        string
		denied      bool
		credentials []string
	}{
		{"wrong secret", srv.ConfigWith("p", srv.AccessKey, wrongSecret, srv.Bucket), "SignatureDoesNotMatch|signature we calculated does not match", true, []string{wrongSecret, srv.SecretKey}},
		{"unknown access key", srv.ConfigWith("p", unknownKey, srv.SecretKey, srv.Bucket), "Access Key Id you provided does not exist", true, []string{unknownKey, srv.SecretKey}},
		{"missing bucket", srv.ConfigWith("p", srv.AccessKey, srv.SecretKey, "no-such-bucket"), "bucket does not exist", false, []string{srv.SecretKey}},
	} {
		b, err := bucket.Open(ctx, c.cfg, bucket.Options{Logger: logger})
		if err != nil {
			t.Fatalf("%s: Open: %v", c.name, err)
		}
		err = b.Check(ctx, "node-a/")
		if err == nil {
			t.Fatalf("%s: Check succeeded", c.name)
		}
		msg := err.Error()
		t.Logf("%s: %s", c.name, msg)
		if !strings.Contains(msg, "bucket s3://"+c.cfg.Bucket+"/p: list node-a/") {
			t.Errorf("%s: %q does not name the bucket and the operation", c.name, msg)
		}
		if !matchesAny(msg, c.want) {
			t.Errorf("%s: %q does not say %q", c.name, msg, c.want)
		}
		if b.IsAccessDeniedErr(err) != c.denied {
			t.Errorf("%s: IsAccessDeniedErr = %v, want %v", c.name, !c.denied, c.denied)
		}
		if !bucket.Permanent(err) {
			t.Errorf("%s: not a permanent error: a query service would wait for it forever", c.name)
		}
		upErr := b.Upload(ctx, "node-a/x", strings.NewReader("x"))
		if upErr == nil || !strings.Contains(upErr.Error(), "upload node-a/x") {
			t.Errorf("%s: Upload: %v, want an error naming the upload", c.name, upErr)
		}
		for _, s := range c.credentials {
			for _, text := range []string{msg, upErr.Error(), logs.String()} {
				if strings.Contains(text, s) {
					t.Errorf("%s: a credential appears in %q", c.name, text)
				}
			}
		}
		b.Close()
	}
}

func matchesAny(s, alternatives string) bool {
	for _, a := range strings.Split(alternatives, "|") {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

// TestMinIOStopped checks that an operation on a stopped MinIO fails in
// time with an error naming the bucket, and works again after a restart.
func TestMinIOStopped(t *testing.T) {
	srv := miniotest.Start(t)
	b := srv.Open("")
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := b.Upload(ctx, "a/x", strings.NewReader("x"))
	if err == nil || !strings.Contains(err.Error(), "bucket s3://"+srv.Bucket+": upload a/x") {
		t.Fatalf("upload to a stopped MinIO: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the upload took the whole 20 s: %v", err)
	}
	if bucket.Permanent(err) {
		t.Fatalf("a stopped MinIO is a permanent error: %v", err)
	}
	srv.Restart()
	if err := b.Upload(context.Background(), "a/x", strings.NewReader("x")); err != nil {
		t.Fatalf("upload after restart: %v", err)
	}
}

// TestSecretFiles checks the credential files: a missing or empty one is
// an error naming it, and a secret in a client error is removed.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	ak, sk := filepath.Join(dir, "ak"), filepath.Join(dir, "sk")
	os.WriteFile(ak, []byte("AKIAEXAMPLE\n"), 0o600)
	os.WriteFile(sk, nil, 0o600)
	cfg := bucket.Config{Provider: "s3", Bucket: "b", Endpoint: "127.0.0.1:1", Credentials: bucket.Credentials{AccessKeyFile: ak, SecretKeyFile: sk}}
	if _, err := bucket.Open(context.Background(), cfg, bucket.Options{}); err == nil || !strings.Contains(err.Error(), "secret key file "+sk+" is empty") {
		t.Errorf("empty secret file: %v", err)
	}
	cfg.Credentials.SecretKeyFile = filepath.Join(dir, "missing")
	if _, err := bucket.Open(context.Background(), cfg, bucket.Options{}); err == nil || !strings.Contains(err.Error(), "bucket s3://b: read secret key file") {
		t.Errorf("missing secret file: %v", err)
	}
}

// TestFilesystem uses the filesystem provider: the same client over a
// directory.
func TestFilesystem(t *testing.T) {
	dir := t.TempDir()
	b, err := bucket.Open(context.Background(), bucket.Config{Provider: "filesystem", Directory: dir, Prefix: "p"}, bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.Upload(ctx, "n/blocks/1/meta.json", strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "p", "n", "blocks", "1", "meta.json")); err != nil {
		t.Fatal(err)
	}
	_, err = b.Get(ctx, "n/none")
	var be *bucket.Error
	if !errors.As(err, &be) || !be.NotFound || be.Op != "get" || be.Bucket != "filesystem:"+dir+"/p" {
		t.Fatalf("Get of a missing object: %#v", err)
	}
}

// TestMinIONoCredentials opens the bucket with no credential anywhere (no
// files in the config, none in the environment, no shared credentials
// file, no instance role): the error says none were found and where it
// looked, not only what the server answered.
func TestMinIONoCredentials(t *testing.T) {
	srv := miniotest.Start(t)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	shared := filepath.Join(t.TempDir(), "aws-credentials")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", shared)
	cfg := srv.Config("p")
	cfg.Credentials = bucket.Credentials{}
	b, err := bucket.Open(context.Background(), cfg, bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	start := time.Now()
	err = b.Check(context.Background(), "node-a/")
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("Check without credentials succeeded")
	}
	for _, want := range []string{"bucket s3://" + srv.Bucket + "/p: list node-a/: ", "no credentials found",
		"credentials.access_key_file", "$AWS_ACCESS_KEY_ID", shared, "instance role"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !b.IsAccessDeniedErr(err) {
		t.Errorf("IsAccessDeniedErr = false for %v", err)
	}
	// With credentials, a denial does not claim there were none.
	wrong := srv.ConfigWith("p", srv.AccessKey, "wrong-"+srv.SecretKey, srv.Bucket)
	wb, err := bucket.Open(context.Background(), wrong, bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	if err := wb.Check(context.Background(), "node-a/"); err == nil || strings.Contains(err.Error(), "no credentials found") {
		t.Errorf("with a wrong secret: %v, want a denial that does not say no credentials were found", err)
	}
}

// TestMinIOUserNamedAsTheBucket uses a MinIO user whose name is the
// bucket's: errors name the bucket and keep it in URLs, and no secret
// appears in them or in the logs.
func TestMinIOUserNamedAsTheBucket(t *testing.T) {
	srv := miniotest.Start(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := srv.ConfigWith("demo", srv.AccessKey, srv.SecretKey, srv.AccessKey)
	b, err := bucket.Open(context.Background(), cfg, bucket.Options{Logger: logger, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checkErr := b.Check(context.Background(), "a/")
	if checkErr == nil || !strings.Contains(checkErr.Error(), "bucket s3://"+srv.AccessKey+"/demo: list a/: The specified bucket does not exist") {
		t.Errorf("Check of a bucket named as the user, not created: %v", checkErr)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	upErr := b.Upload(ctx, "a/blocks/1/data", strings.NewReader("x"))
	if upErr == nil {
		t.Fatal("upload to a stopped MinIO succeeded")
	}
	t.Logf("%v\n%v", checkErr, upErr)
	if !strings.Contains(upErr.Error(), srv.Endpoint+"/"+srv.AccessKey+"/") {
		t.Errorf("the upload's error %q lost the bucket from its URL", upErr)
	}
	for _, text := range []string{checkErr.Error(), upErr.Error(), logs.String()} {
		if strings.Contains(text, srv.SecretKey) || strings.Contains(text, "credential removed]/") {
			t.Errorf("a secret, or a path cut by the scrubber, in %q", text)
		}
	}
}
