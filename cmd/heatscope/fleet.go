package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketstore"
	"github.com/heatscope/heatscope/overview"
	"github.com/heatscope/heatscope/store"
	"github.com/heatscope/heatscope/web"
)

// queryFlags choose what serve and export read: a data directory, the
// blocks a fleet uploaded to a bucket, or both.
type queryFlags struct {
	data, objstore      *string
	cacheDir, cacheSize *string
	timeout             *time.Duration
	fs                  *flag.FlagSet
}

func addQueryFlags(fs *flag.FlagSet, dataHelp string) queryFlags {
	return queryFlags{
		fs:   fs,
		data: fs.String("data", "./heatscope-data", dataHelp),
		objstore: fs.String("objstore-config", "", "also read the blocks every node uploaded to this bucket "+
			"(objstore config YAML: provider, bucket, endpoint, prefix; credentials from files or the environment); "+
			"with it, --data is read only when given"),
		cacheDir: fs.String("objstore-cache-dir", "", "with --objstore-config, keep the block data and metas read from the bucket in this local directory too "+
			"(blocks never change: a restarted query service reads them again without a GET); '' for none"),
		cacheSize: fs.String("objstore-cache-size", "1GiB", "bound of --objstore-cache-dir: the least recently used files are deleted beyond it"),
		timeout: fs.Duration("objstore-timeout", defaultBucketTimeout, "with --objstore-config, how long one request to the bucket may take, its retries included: "+
			"a query that needs what a bucket that does not answer holds fails (503) within about this"),
	}
}

// bucketChunkCacheSamples bounds a query service's decoded-chunk cache:
// 1 M samples, about 20 MB, half the store's default, so that the query
// service stays under its memory limit (serve --memory-limit) whatever
// the fleet's size; one node's 10-minute heatmap of 8 CPUs (0.5 M
// samples) still fits.
const bucketChunkCacheSamples = 1 << 20

// defaultBucketTimeout bounds each request of a query service to its
// bucket by default: an uncached query under a bucket that does not answer
// fails within about this.
const defaultBucketTimeout = 5 * time.Second

// queryStore is what serve and export read: a read-only *store.DB (a data
// directory, with a bucket beside it when both are given) or a
// *store.Reader (a bucket alone).
type queryStore interface {
	web.Reader
	overview.WarmStore
	Stats() store.Stats
	Health() error
	Refresh() error
	Close() error
	KeepStepsIn(store.CPUStepsCache)
}

// open opens the store the flags name, read-only. With a bucket it checks
// at once that the bucket answers and the credentials may list it, so a
// wrong config fails at start with the bucket and the operation named.
// With waitForBucket, a bucket that does not answer (bucket.Permanent says
// which errors are not that) does not stop it: the store opens without
// its blocks and lists them once it answers (serve); without, it fails
// (export).
func (q queryFlags) open(component string, waitForBucket bool) (queryStore, *bucketstore.Source, func(), error) {
	dataGiven := false
	q.fs.Visit(func(f *flag.Flag) { dataGiven = dataGiven || f.Name == "data" })
	dir := *q.data
	if *q.objstore == "" && *q.cacheDir != "" {
		return nil, nil, nil, usageError{errors.New("--objstore-cache-dir: caches a bucket's reads; give --objstore-config too")}
	}
	if *q.objstore == "" {
		db, err := store.Open(dir, store.Options{ReadOnly: true, Logger: slog.Default()})
		if err != nil {
			return nil, nil, nil, err
		}
		return db, nil, func() {}, nil
	}
	if !dataGiven {
		dir = ""
	}
	cfg, err := bucket.LoadConfig(*q.objstore)
	if err != nil {
		return nil, nil, nil, usageError{fmt.Errorf("--objstore-config: %w", err)}
	}
	timeout := *q.timeout
	if timeout <= 0 {
		return nil, nil, nil, usageError{errors.New("--objstore-timeout must be positive")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	bkt, err := bucket.Open(ctx, cfg, bucket.Options{Component: component, ResponseTimeout: timeout, Logger: slog.Default()})
	if err != nil {
		return nil, nil, nil, err
	}
	unavailable := false
	if err := bkt.Check(ctx, ""); err != nil {
		if !waitForBucket || bucket.Permanent(err) {
			bkt.Close()
			return nil, nil, nil, err
		}
		slog.Warn("the bucket does not answer: serving 503 until it does (/healthz not ready)", "err", err)
		unavailable = true
	}
	var disk *bucketstore.DiskCache
	if *q.cacheDir != "" {
		size, err := parseSize(*q.cacheSize)
		if err == nil && size <= 0 {
			err = errors.New("want more than 0 bytes")
		}
		if err != nil {
			bkt.Close()
			return nil, nil, nil, usageError{fmt.Errorf("--objstore-cache-size: %w", err)}
		}
		if disk, err = bucketstore.OpenDiskCache(*q.cacheDir, size, slog.Default()); err != nil {
			bkt.Close()
			return nil, nil, nil, fmt.Errorf("--objstore-cache-dir: %w", err)
		}
	}
	src := bucketstore.New(bkt, bkt.Name(), bucketstore.Options{Timeout: timeout, DiskCache: disk})
	db, err := openBucketStore(dir, src, unavailable)
	if err != nil {
		bkt.Close()
		return nil, nil, nil, err
	}
	slog.Info("reading the fleet's blocks", "bucket", bkt.Name(), "nodes", len(db.Nodes()))
	return db, src, func() { bkt.Close() }, nil
}

// openBucketStore opens a reader of the bucket src (a fleet query
// service), or, when a data directory is given too, a read-only DB of it
// with the bucket beside.
func openBucketStore(dir string, src *bucketstore.Source, unavailable bool) (queryStore, error) {
	if dir == "" {
		rd, err := store.OpenReader([]store.BlockSource{src}, store.ReaderOptions{Logger: slog.Default(),
			ChunkCacheSamples: bucketChunkCacheSamples, OpenUnavailable: unavailable})
		if err != nil {
			return nil, err
		}
		return rd, nil
	}
	db, err := store.Open(dir, store.Options{ReadOnly: true, BlockSources: []store.BlockSource{src}, Logger: slog.Default(),
		ChunkCacheSamples: bucketChunkCacheSamples, OpenUnavailable: unavailable})
	if err != nil {
		return nil, err
	}
	return db, nil
}
