package bucket

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScrub removes secrets by value and credentials by where they
// travel, and leaves a bucket path alone when the user's name equals it.
func TestScrub(t *testing.T) {
	const secret, token = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "FwoGZXIvYXdzEJr//////////token"
	var sc scrubber
	sc.add(secret)
	sc.add(token)
	for _, c := range []struct{ in, want string }{
		{`Put "http://127.0.0.1:9000/heatscope/demo/a/blocks/1/data": dial tcp 127.0.0.1:9000: connect: connection refused`,
			`Put "http://127.0.0.1:9000/heatscope/demo/a/blocks/1/data": dial tcp 127.0.0.1:9000: connect: connection refused`},
		{"secret " + secret + " and token " + token, "secret [credential removed] and token [credential removed]"},
		{`Get "https://admin:hunter22@minio:9000/heatscope/x"`, `Get "https://[credential removed]@minio:9000/heatscope/x"`},
		{"GET /heatscope/x?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=heatscope%2F20261127%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=abcdef0123&X-Amz-Security-Token=tok",
			"GET /heatscope/x?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=[credential removed]&X-Amz-Signature=[credential removed]&X-Amz-Security-Token=[credential removed]"},
		{"Authorization: AWS4-HMAC-SHA256 Credential=heatscope/20261127/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00ff\nHost: minio",
			"Authorization: [credential removed]\nHost: minio"},
		{"signed with Credential=AKIAIOSFODNN7EXAMPLE/20261127/us-east-1/s3/aws4_request, SignedHeaders=host", "signed with Credential=[credential removed], SignedHeaders=host"},
		{"<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>heatscope</AWSAccessKeyId><StringToSign>AWS4 x</StringToSign></Error>",
			"<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>[credential removed]</AWSAccessKeyId><StringToSign>[credential removed]</StringToSign></Error>"},
		{"https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sig=abc%2Bdef", "https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sig=[credential removed]"},
		{"bucket s3://heatscope/demo", "bucket s3://heatscope/demo"},
	} {
		if got := sc.scrub(c.in); got != c.want {
			t.Errorf("scrub(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

// TestUserNamedAsTheBucket opens a bucket whose user has the bucket's name
// (README's first example once did) on an endpoint nothing listens on:
// the errors and the logs keep the bucket's path, and carry no secret.
func TestUserNamedAsTheBucket(t *testing.T) {
	dir := t.TempDir()
	const secret = "9f3c2a7d1e5b4c6a8f0e2d4c6b8a0f1e"
	ak, sk := filepath.Join(dir, "access-key"), filepath.Join(dir, "secret-key")
	os.WriteFile(ak, []byte("heatscope\n"), 0o600)
	os.WriteFile(sk, []byte(secret+"\n"), 0o600)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := Config{Provider: "s3", Bucket: "heatscope", Endpoint: "127.0.0.1:1", Prefix: "demo", TLS: TLS{Insecure: true},
		Credentials: Credentials{AccessKeyFile: ak, SecretKeyFile: sk}}
	b, err := Open(context.Background(), cfg, Options{Logger: logger, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Upload(context.Background(), "a/blocks/1/data", strings.NewReader("x"))
	if err == nil {
		t.Fatal("an upload to a closed port succeeded")
	}
	t.Logf("%v", err)
	if !strings.Contains(err.Error(), `"http://127.0.0.1:1/heatscope/`) || strings.Contains(err.Error(), "credential removed") {
		t.Errorf("error %q lost the bucket's path", err)
	}
	for _, text := range []string{err.Error(), logs.String()} {
		if strings.Contains(text, secret) {
			t.Errorf("the secret appears in %q", text)
		}
	}
}
