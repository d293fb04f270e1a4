package bucket

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// Permanent reports whether err is one that waiting will not change: the
// store answered that the credentials are refused or may not do this
// (AccessDenied, an unknown key, a bad signature, an expired token), or
// that the bucket does not exist; or its certificate is not one this
// client trusts. Anything else (no answer, a timeout, a refused
// connection, a name that does not resolve, a 5xx) is an outage that may
// end: a query service starts anyway and serves once the store answers.
func Permanent(err error) bool {
	var e *Error
	if errors.As(err, &e) && (e.AccessDenied || e.NoBucket) {
		return true
	}
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host)
}
