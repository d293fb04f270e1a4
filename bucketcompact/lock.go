package bucketcompact

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/thanos-io/objstore"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/bucketlayout"
)

// The bucket's compactor lock (store/FORMAT.md, "Compactor lock") is a
// lease: one object, bucketlayout.CompactorLockKey, that its holder creates only where there is
// none and renews only while it is the version the holder wrote last
// (conditional writes: of two compactors starting at the same instant
// exactly one gets it), every LockTTL/4. Another compactor takes it over
// once its holder has not renewed it for LockTTL: it replaces the version
// it read, so that of two waiting compactors one wins. A holder that could
// not renew it for LockTTL stops changing the bucket, since another may
// have taken over by then.

// lockRecord is the lock object's content.
type lockRecord struct {
	// Holder names the compactor (host:pid by default); Token tells two
	// runs of one holder name apart.
	Holder string `json:"holder"`
	Token  string `json:"token,omitempty"`
	// Renewed is when the holder last renewed it, Expires when another
	// compactor may take it over unless it is renewed (Unix ms; Expires
	// is 0 in locks written before it existed: Renewed plus the reader's
	// LockTTL).
	Renewed int64 `json:"renewed"`
	Expires int64 `json:"expires,omitempty"`
}

// versionedBucket is a bucket with conditional writes (package bucket),
// when its provider has them.
type versionedBucket interface {
	lockObjects
	ConditionalWrites() bool
}

// lockStore returns how the lock is read and written: conditionally when
// the bucket can, else with a read and then a write, which stops a second
// compactor started by mistake but not two starting at the same instant.
func lockStore(bkt objstore.Bucket, log *slog.Logger, name string) lockObjects {
	if vb, ok := bkt.(versionedBucket); ok && vb.ConditionalWrites() {
		return vb
	}
	log.Warn("this bucket's provider has no conditional writes: the compactor lock cannot keep out two compactors started at the same instant; run one", "bucket", name)
	return racyVersions{bkt}
}

// lockObjects reads and writes the lock object.
type lockObjects interface {
	ReadVersioned(ctx context.Context, name string) ([]byte, string, error)
	CreateIfAbsent(ctx context.Context, name string, data []byte) (string, error)
	ReplaceIfVersion(ctx context.Context, name string, data []byte, version string) (string, error)
}

// racyVersions does what a versionedBucket does with a read before each
// write: a writer between the two is not seen.
type racyVersions struct{ bkt objstore.Bucket }

func (r racyVersions) ReadVersioned(ctx context.Context, name string) ([]byte, string, error) {
	rc, err := r.bkt.Get(ctx, name)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxSmallObject))
	if err != nil {
		return nil, "", err
	}
	h := sha256.Sum256(data)
	return data, hex.EncodeToString(h[:]), nil
}

func (r racyVersions) CreateIfAbsent(ctx context.Context, name string, data []byte) (string, error) {
	if _, _, err := r.ReadVersioned(ctx, name); err == nil {
		return "", bucket.ErrConditionFailed
	} else if !r.bkt.IsObjNotFoundErr(err) {
		return "", err
	}
	return r.put(ctx, name, data)
}

func (r racyVersions) ReplaceIfVersion(ctx context.Context, name string, data []byte, version string) (string, error) {
	_, v, err := r.ReadVersioned(ctx, name)
	if r.bkt.IsObjNotFoundErr(err) || err == nil && v != version {
		return "", bucket.ErrConditionFailed
	}
	if err != nil {
		return "", err
	}
	return r.put(ctx, name, data)
}

func (r racyVersions) put(ctx context.Context, name string, data []byte) (string, error) {
	if err := r.bkt.Upload(ctx, name, bytes.NewReader(data)); err != nil {
		return "", err
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:]), nil
}

// LockHeldError is the refusal of a lock another compactor holds.
type LockHeldError struct {
	Bucket, Holder string
	// Renewed is when the holder last renewed it, Expires when it may be
	// taken over unless renewed.
	Renewed, Expires time.Time
	now              time.Time
}

func (e *LockHeldError) Error() string {
	return fmt.Sprintf("bucket %s: another compactor (%s) holds the lock, renewed %s ago; it may be taken over in %s unless renewed: run one compactor per bucket",
		e.Bucket, e.Holder, e.now.Sub(e.Renewed).Round(time.Second), max(0, e.Expires.Sub(e.now)).Round(time.Second))
}

// ErrLockLost is the error of a compactor whose lock another compactor
// took over (it could not renew it in time) or whose renewals failed for
// the lock's time to live.
var ErrLockLost = errors.New("lost the compactor lock")

// ErrLockStale is the error of a write by a compactor that could not
// renew its lock for most of its time to live (its bucket away): another
// compactor may take over, so it writes nothing until it renews the lock.
var ErrLockStale = errors.New("the compactor lock is not renewed")

// lock takes the lock, or renews it when this compactor holds it. Another
// compactor's live lock is a *LockHeldError.
func (c *Compactor) lock(ctx context.Context) error {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	if c.lockVersion != "" {
		return c.renewLocked(ctx)
	}
	return c.acquireLocked(ctx)
}

func (c *Compactor) record(now time.Time) []byte {
	raw, _ := json.Marshal(lockRecord{Holder: c.opts.Holder, Token: c.lockToken, Renewed: now.UnixMilli(), Expires: now.Add(c.opts.LockTTL).UnixMilli()})
	return raw
}

// acquireLocked creates the lock, or takes over an expired one.
func (c *Compactor) acquireLocked(ctx context.Context) error {
	c.stats.gets.Add(1)
	raw, version, err := c.locks.ReadVersioned(ctx, bucketlayout.CompactorLockKey)
	now := c.opts.Now()
	switch {
	case err != nil && c.bkt.IsObjNotFoundErr(err):
		c.stats.puts.Add(1)
		v, err := c.locks.CreateIfAbsent(ctx, bucketlayout.CompactorLockKey, c.record(now))
		if errors.Is(err, bucket.ErrConditionFailed) {
			return c.heldBy(ctx) // another compactor created it first
		}
		if err != nil {
			return fmt.Errorf("take the compactor lock: %w", err)
		}
		c.held(v, now)
		return nil
	case err != nil:
		return fmt.Errorf("read the compactor lock: %w", err)
	}
	l, expires := c.parseLock(raw)
	if l.Token == c.lockToken && l.Holder == c.opts.Holder {
		// This compactor's own (a renewal that failed after writing).
	} else if now.Before(expires) {
		return &LockHeldError{Bucket: c.name, Holder: l.Holder, Renewed: time.UnixMilli(l.Renewed), Expires: expires, now: now}
	} else {
		c.log.Warn("taking over an expired compactor lock", "bucket", c.name, "holder", l.Holder, "renewed", time.UnixMilli(l.Renewed), "expired", expires)
	}
	c.stats.puts.Add(1)
	v, err := c.locks.ReplaceIfVersion(ctx, bucketlayout.CompactorLockKey, c.record(now), version)
	if errors.Is(err, bucket.ErrConditionFailed) {
		return c.heldBy(ctx) // another compactor took it over first
	}
	if err != nil {
		return fmt.Errorf("take the compactor lock: %w", err)
	}
	c.held(v, now)
	return nil
}

// parseLock reads a lock record and when it expires. An unreadable one
// names no holder and has expired.
func (c *Compactor) parseLock(raw []byte) (lockRecord, time.Time) {
	var l lockRecord
	if json.Unmarshal(raw, &l) != nil {
		return lockRecord{Holder: "unreadable lock"}, time.Time{}
	}
	if l.Expires > 0 {
		return l, time.UnixMilli(l.Expires)
	}
	return l, time.UnixMilli(l.Renewed).Add(c.opts.LockTTL)
}

// heldBy returns the refusal naming the lock's holder, after a write whose
// condition failed; nil when the lock is this compactor's after all (a
// write that succeeded, its answer lost, then retried by the client),
// which it then holds.
func (c *Compactor) heldBy(ctx context.Context) error {
	raw, version, err := c.locks.ReadVersioned(ctx, bucketlayout.CompactorLockKey)
	if err != nil {
		return fmt.Errorf("bucket %s: another compactor took the lock at the same time (reading who: %w)", c.name, err)
	}
	l, expires := c.parseLock(raw)
	if l.Token == c.lockToken && l.Holder == c.opts.Holder {
		c.held(version, time.UnixMilli(l.Renewed))
		return nil
	}
	return &LockHeldError{Bucket: c.name, Holder: l.Holder, Renewed: time.UnixMilli(l.Renewed), Expires: expires, now: c.opts.Now()}
}

func (c *Compactor) held(version string, now time.Time) {
	c.lockVersion, c.lockRenewed = version, now
	c.stats.lockHeld.Store(1)
}

// renewLocked renews the lock this compactor holds. Replaced meanwhile,
// it is lost: ErrLockLost.
func (c *Compactor) renewLocked(ctx context.Context) error {
	now := c.opts.Now()
	c.stats.puts.Add(1)
	v, err := c.locks.ReplaceIfVersion(ctx, bucketlayout.CompactorLockKey, c.record(now), c.lockVersion)
	if errors.Is(err, bucket.ErrConditionFailed) {
		held := c.heldBy(ctx)
		if held == nil {
			return nil // this compactor's own write, retried
		}
		c.lockVersion = ""
		c.stats.lockHeld.Store(0)
		return fmt.Errorf("%w: %w", ErrLockLost, held)
	}
	if err != nil {
		return fmt.Errorf("renew the compactor lock: %w", err)
	}
	c.held(v, now)
	return nil
}

// checkLock fails unless this compactor renewed its lock within the
// lock's time to live (less a margin for a write under way): past it,
// another compactor may have taken over, so nothing is written.
func (c *Compactor) checkLock() error {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	if c.lockVersion == "" {
		return fmt.Errorf("bucket %s: %w", c.name, ErrLockLost)
	}
	if age := c.opts.Now().Sub(c.lockRenewed); age > c.opts.LockTTL*3/4 {
		return fmt.Errorf("bucket %s: %w: not for %s (its time to live is %s): writing nothing until it is", c.name, ErrLockStale, age.Round(time.Second), c.opts.LockTTL)
	}
	return nil
}

// Lock takes the bucket's lock, waiting while another compactor holds it
// (logging who) when wait is set, and refusing with a *LockHeldError
// otherwise. A waiting compactor tries again when the holder's lock
// expires, or every LockTTL/4, so that it takes over within the time to
// live of the holder's last renewal.
func (c *Compactor) Lock(ctx context.Context, wait bool) error {
	logged := ""
	for {
		err := c.lock(ctx)
		var held *LockHeldError
		if !wait || !errors.As(err, &held) {
			return err
		}
		if held.Holder != logged {
			c.log.Info("another compactor holds the bucket's lock: waiting to take over should it stop renewing it", "bucket", c.name, "holder", held.Holder,
				"renewed", held.Renewed, "expires", held.Expires)
			logged = held.Holder
		}
		pause := min(max(time.Until(held.Expires), time.Second), c.opts.LockTTL/4)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// KeepLock renews the lock every LockTTL/4 until ctx is done, then returns
// nil; it returns ErrLockLost as soon as another compactor took the lock
// over. A failed renewal is logged and tried again.
func (c *Compactor) KeepLock(ctx context.Context) error {
	t := time.NewTicker(c.opts.LockTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.lock(ctx); err != nil {
			if errors.Is(err, ErrLockLost) {
				return err
			}
			if ctx.Err() == nil {
				c.log.Warn("renew the compactor lock", "bucket", c.name, "err", err)
			}
		}
	}
}

// Unlock deletes the lock if this compactor holds it, so that another may
// start at once.
func (c *Compactor) Unlock(ctx context.Context) error {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	if c.lockVersion == "" {
		return nil
	}
	_, v, err := c.locks.ReadVersioned(ctx, bucketlayout.CompactorLockKey)
	if err != nil {
		if c.bkt.IsObjNotFoundErr(err) {
			return nil
		}
		return fmt.Errorf("read compactor lock: %w", err)
	}
	if v != c.lockVersion {
		return nil // taken over
	}
	if err := c.bkt.Delete(ctx, bucketlayout.CompactorLockKey); err != nil {
		return fmt.Errorf("delete compactor lock: %w", err)
	}
	c.lockVersion = ""
	c.stats.lockHeld.Store(0)
	return nil
}

// newToken returns a random token telling this run's lock apart.
func newToken() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
