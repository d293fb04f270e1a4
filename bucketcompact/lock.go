package bucketcompact

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// lockRecord is the lock object's content.
type lockRecord struct {
	Holder string `json:"holder"`
	// Renewed is when the holder last renewed it (Unix ms).
	Renewed int64 `json:"renewed"`
}

// lock takes or renews the bucket's compactor lock. Another holder's lock
// renewed within the lock's time to live stops the pass with an error
// naming the holder.
func (c *Compactor) lock(ctx context.Context) error {
	raw, err := c.getSmall(ctx, LockName)
	switch {
	case err == nil:
		var l lockRecord
		if json.Unmarshal(raw, &l) == nil && l.Holder != c.opts.Holder {
			age := c.opts.Now().Sub(time.UnixMilli(l.Renewed))
			if age < c.opts.LockTTL {
				return fmt.Errorf("bucket %s: another compactor (%s) renewed its lock %s ago; run one compactor per bucket (the lock expires after %s)",
					c.name, l.Holder, age.Round(time.Second), c.opts.LockTTL)
			}
			c.log.Warn("taking over an expired compactor lock", "bucket", c.name, "holder", l.Holder, "age", age.Round(time.Second))
		}
	case !c.bkt.IsObjNotFoundErr(err):
		return fmt.Errorf("read compactor lock: %w", err)
	}
	raw, _ = json.Marshal(lockRecord{Holder: c.opts.Holder, Renewed: c.opts.Now().UnixMilli()})
	c.stats.puts.Add(1)
	if err := c.bkt.Upload(ctx, LockName, bytes.NewReader(raw)); err != nil {
		return fmt.Errorf("write compactor lock: %w", err)
	}
	return nil
}

// Unlock deletes the lock if this compactor holds it, so that another may
// start at once.
func (c *Compactor) Unlock(ctx context.Context) error {
	raw, err := c.getSmall(ctx, LockName)
	if err != nil {
		if c.bkt.IsObjNotFoundErr(err) {
			return nil
		}
		return fmt.Errorf("read compactor lock: %w", err)
	}
	var l lockRecord
	if json.Unmarshal(raw, &l) != nil || l.Holder != c.opts.Holder {
		return nil
	}
	if err := c.bkt.Delete(ctx, LockName); err != nil {
		return fmt.Errorf("delete compactor lock: %w", err)
	}
	return nil
}
