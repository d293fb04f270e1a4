//go:build gcs

package bucket

import (
	"context"

	"github.com/thanos-io/objstore"
	"github.com/thanos-io/objstore/providers/gcs"
)

// The gcs provider is built in with the gcs build tag: its SDK (gRPC,
// xDS, OpenTelemetry) adds about 20 MB to the binary and to the agent's
// resident memory (docs/design.md).
func init() { openers["gcs"] = openGCS }

func openGCS(ctx context.Context, cfg Config, o opening) (objstore.Bucket, error) {
	c := gcs.Config{Bucket: cfg.Bucket, HTTPConfig: o.http, MaxRetries: o.opts.MaxRetries}
	var err error
	if c.ServiceAccount, err = o.readSecret(cfg.Credentials.ServiceAccountFile, "service account file"); err != nil {
		return nil, err
	}
	return gcs.NewBucketWithConfig(ctx, o.logger, c, o.opts.Component, nil)
}
