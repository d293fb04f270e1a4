package otlpprofile

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

// MarshalRequest returns the protobuf of an ExportProfilesServiceRequest
// holding p: what an OTLP exporter sends, and what `heatscope export
// --format otlp` writes.
func MarshalRequest(p pprofile.Profiles) ([]byte, error) {
	b, err := pprofileotlp.NewExportRequestFromProfiles(p).MarshalProto()
	if err != nil {
		return nil, fmt.Errorf("otlp: marshal request: %w", err)
	}
	return b, nil
}

// UnmarshalRequest reads the protobuf of an ExportProfilesServiceRequest.
// What it returns is unchecked: Decode checks it.
func UnmarshalRequest(b []byte) (pprofile.Profiles, error) {
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(b); err != nil {
		return pprofile.Profiles{}, fmt.Errorf("otlp: unmarshal request: %w", err)
	}
	return req.Profiles(), nil
}
