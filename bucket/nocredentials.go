package bucket

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
)

// unsignedTransport records whether the latest request went out unsigned:
// the s3 provider's credential chain (environment, shared credentials
// file, instance role) found nothing, so the server saw an anonymous
// request and can only say "Access Denied".
type unsignedTransport struct {
	next     http.RoundTripper
	unsigned *atomic.Bool
}

func (t unsignedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.unsigned.Store(req.Header.Get("Authorization") == "" && req.URL.Query().Get("X-Amz-Signature") == "")
	return t.next.RoundTrip(req)
}

// s3NoCredentials says that the s3 provider found no credentials and
// where it looked, in the order it looks.
func s3NoCredentials() string {
	shared := os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	if shared == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "~"
		}
		shared = filepath.Join(home, ".aws", "credentials")
	}
	return fmt.Sprintf("no credentials found, so the request went unsigned; looked at credentials.access_key_file in the objstore config, "+
		"$AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY, %s, and the instance role", shared)
}
