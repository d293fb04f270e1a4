package bucket

import (
	"regexp"
	"strings"
)

// removed replaces a credential in errors and logs.
const removed = "[credential removed]"

// credentialPlaces are where a client's messages can carry a credential
// whatever its value: a URL's user info, a signed URL's query parameters
// (S3's presigned X-Amz-*, S3 v2's AWSAccessKeyId and Signature, Google's
// X-Goog-*, Azure's SAS sig), an Authorization header or its
// Credential=, and the elements of an S3 error body that echo the request's
// signing. Each match keeps its name and loses its value.
var credentialPlaces = []struct {
	re   *regexp.Regexp
	keep string
}{
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s"']+@`), "${1}" + removed + "@"},
	{regexp.MustCompile(`(?i)([?&;](?:x-amz-credential|x-amz-signature|x-amz-security-token|awsaccesskeyid|signature|x-goog-credential|x-goog-signature|googleaccessid|sig|access_token)=)[^&\s"']*`), "${1}" + removed},
	{regexp.MustCompile(`(?i)(authorization:\s*)[^\r\n"]*`), "${1}" + removed},
	{regexp.MustCompile(`(?i)((?:^|[\s,])credential=)[^,\s"]*`), "${1}" + removed},
	{regexp.MustCompile(`(?i)(<(?:AWSAccessKeyId|SignatureProvided|StringToSign|StringToSignBytes|CanonicalRequest|CanonicalRequestBytes)>)[^<]*`), "${1}" + removed},
}

// scrubber removes credentials from the text of errors and log values:
// the secret values it was given wherever they appear (a secret key or a
// token is long and random: it is never also a name), and any value in a
// place where credentials go (credentialPlaces). An access key id is not
// removed by its value: it is a user's name, which may well equal the
// bucket's ("heatscope" for both), and replacing every occurrence would
// cut the bucket out of every URL; the places credentials travel in are
// removed whatever their value.
type scrubber struct {
	secrets []string
}

// add makes s removed wherever it appears (values under 4 bytes would cut
// common words).
func (sc *scrubber) add(s string) {
	if s = strings.TrimSpace(s); len(s) >= 4 {
		sc.secrets = append(sc.secrets, s)
	}
}

// scrub returns s without credentials.
func (sc *scrubber) scrub(s string) string {
	for _, p := range credentialPlaces {
		s = p.re.ReplaceAllString(s, p.keep)
	}
	for _, secret := range sc.secrets {
		s = strings.ReplaceAll(s, secret, removed)
	}
	return s
}
