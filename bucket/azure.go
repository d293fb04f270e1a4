//go:build azure

package bucket

import (
	"context"
	"os"

	"github.com/thanos-io/objstore"
	"github.com/thanos-io/objstore/providers/azure"
)

// The azure provider is built in with the azure build tag: its SDK adds
// to the binary and to the agent's resident memory (docs/design.md).
func init() { openers["azure"] = openAzure }

func openAzure(_ context.Context, cfg Config, o opening) (objstore.Bucket, error) {
	c := azure.DefaultConfig
	c.StorageAccountName, c.ContainerName, c.HTTPConfig = cfg.StorageAccount, cfg.Bucket, o.http
	if cfg.Endpoint != "" {
		c.Endpoint = cfg.Endpoint
	}
	var err error
	if c.StorageAccountKey, err = o.readSecret(cfg.Credentials.AccountKeyFile, "account key file"); err != nil {
		return nil, err
	}
	if c.StorageAccountKey == "" {
		c.StorageAccountKey = os.Getenv("AZURE_STORAGE_ACCOUNT_KEY")
	}
	return azure.NewBucketWithConfig(o.logger, c, o.opts.Component, nil)
}
