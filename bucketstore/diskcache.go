package bucketstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heatscope/heatscope/lru"
)

// DiskCache keeps what a Source read of immutable objects (block data
// ranges, metas) in files of a local directory, bounded by their bytes:
// the least recently used files are deleted first. Each file holds one
// read, named by the SHA-256 of its object name and range, followed by
// its CRC-32C: a file damaged on disk is deleted and read again from the
// bucket, never taken for a damaged block. Files are written under a
// temporary name and renamed, so a crash leaves none half-written. After
// a restart the files there are used again, oldest modified first to go.
// Event segments, which grow, are never cached here. Safe for concurrent
// use; a nil *DiskCache caches nothing.
type DiskCache struct {
	dir   string
	log   *slog.Logger
	files *lru.Cache[string, int64] // file name → its size
	hits  atomic.Uint64
}

// diskCacheTrailer is the CRC-32C after each file's bytes.
const diskCacheTrailer = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenDiskCache opens (creating it, mode 0700) the cache directory dir,
// bounded to limit bytes, and takes in the files a previous run left
// there, deleting the oldest beyond limit.
func OpenDiskCache(dir string, limit int64, log *slog.Logger) (*DiskCache, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("bucket disk cache %s: size %d: want more than 0 bytes", dir, limit)
	}
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("bucket disk cache: %w", err)
	}
	c := &DiskCache{dir: dir, log: log}
	c.files = lru.New(limit, func(n int64) int64 { return n }, func(name string, _ int64) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("bucket disk cache: delete", "err", err)
		}
	})
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bucket disk cache: %w", err)
	}
	type file struct {
		name string
		size int64
		mod  time.Time
	}
	var found []file
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(filepath.Join(dir, name)) // a write a crash cut short
			continue
		}
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || !cacheFileName(name) {
			continue // not the cache's
		}
		found = append(found, file{name, info.Size(), info.ModTime()})
	}
	slices.SortFunc(found, func(a, b file) int { return a.mod.Compare(b.mod) })
	for _, f := range found {
		c.files.Add(f.name, f.size) // oldest first: the newest end up the most recent
	}
	return c, nil
}

// cacheFileName reports whether name is a cache file's: 64 hex digits.
func cacheFileName(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// get returns the bytes cached under key, or nil.
func (c *DiskCache) get(key string) []byte {
	if c == nil {
		return nil
	}
	name := fileName(key)
	if _, ok := c.files.Get(name); !ok {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(c.dir, name))
	if err == nil && len(b) >= diskCacheTrailer {
		data := b[:len(b)-diskCacheTrailer]
		if crc32.Checksum(data, castagnoli) == binary.LittleEndian.Uint32(b[len(data):]) {
			c.hits.Add(1)
			return data
		}
		err = errors.New("CRC mismatch")
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("bucket disk cache: dropping an unreadable file", "file", name, "err", err)
	}
	c.files.Remove(name)
	os.Remove(filepath.Join(c.dir, name))
	return nil
}

// put caches b under key unless it is there already; a failure to write
// is logged, never the query's.
func (c *DiskCache) put(key string, b []byte) {
	if c == nil {
		return
	}
	name := fileName(key)
	if _, ok := c.files.Get(name); ok {
		return
	}
	if err := c.write(name, b); err != nil {
		c.log.Warn("bucket disk cache: write", "err", err)
		return
	}
	c.files.Add(name, int64(len(b))+diskCacheTrailer)
}

func (c *DiskCache) write(name string, b []byte) error {
	f, err := os.CreateTemp(c.dir, ".tmp-")
	if err != nil {
		return err
	}
	var crc [diskCacheTrailer]byte
	binary.LittleEndian.PutUint32(crc[:], crc32.Checksum(b, castagnoli))
	_, err = f.Write(b)
	if err == nil {
		_, err = f.Write(crc[:])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(c.dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func (c *DiskCache) hitCount() uint64 {
	if c == nil {
		return 0
	}
	return c.hits.Load()
}

func (c *DiskCache) size() int64 {
	if c == nil {
		return 0
	}
	return c.files.Weight()
}
