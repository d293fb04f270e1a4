package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// identityFile names the data directory's identity (FORMAT.md).
const identityFile = "identity.json"

// Identity is what names a data directory for good: the instance of
// heatscope whose recordings it holds. Two recorders that share a node
// name (cloned machines keep their hostname) are two instances; the
// shipper's lease and the query service tell them apart by it.
type Identity struct {
	Version int `json:"version"`
	// Instance is a random id (16 hex digits) written at the directory's
	// first start, kept in every block it records (Meta.Instance).
	Instance string `json:"instance"`
	// Created is when the directory got it (Unix ms).
	Created int64 `json:"created"`
	// Node is the node the directory recorded as when it was last opened
	// for writing: samples a crash left in its WAL are that node's.
	Node string `json:"node,omitempty"`
}

var instanceRe = regexp.MustCompile(`^[0-9a-f]{16}$`)

// ValidInstance reports whether id is an instance id as an Identity holds.
func ValidInstance(id string) bool { return instanceRe.MatchString(id) }

// readIdentity reads dir's identity; ok is false when it has none yet.
// An identity file that cannot be read is an error: a directory given a
// new identity would look, to the bucket, like a second recorder.
func readIdentity(dir string) (id Identity, ok bool, err error) {
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("data directory identity: %w", err)
	}
	if err := json.Unmarshal(b, &id); err != nil || id.Version != 1 || !ValidInstance(id.Instance) {
		why := "not version 1 with a 16-hex-digit instance"
		if err != nil {
			why = err.Error()
		}
		return Identity{}, false, fmt.Errorf("data directory identity %s is unreadable (%s): remove it to give the directory a new instance id "+
			"(the bucket then sees a new recorder of this node, once the old one's lease has expired)", path, why)
	}
	return id, true, nil
}

// newIdentity returns a new instance's identity.
func newIdentity(now time.Time) Identity {
	var r [8]byte
	rand.Read(r[:])
	return Identity{Version: 1, Instance: hex.EncodeToString(r[:]), Created: now.UnixMilli()}
}

// writeIdentity writes dir's identity: a temporary file, synced, renamed
// over it, the directory synced.
func writeIdentity(dir string, id Identity) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, identityFile)
	if err := writeFileSync(path+".tmp", append(b, '\n')); err != nil {
		return fmt.Errorf("write data directory identity: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("write data directory identity: %w", err)
	}
	return syncDir(dir)
}

// Identity is the data directory's identity: written at its first start
// by a recorder, read by a reader (zero when the directory has none, a
// directory written before identities, or none at all).
func (db *DB) Identity() Identity { return db.identity }

// takeIdentity reads (or, at the first start, creates) the directory's
// identity for a writer, and returns the node its last run recorded as
// ("" when unknown): the node of the samples left in its WAL.
func (db *DB) takeIdentity() (previousNode string, err error) {
	id, ok, err := readIdentity(db.dir)
	if err != nil {
		return "", err
	}
	if !ok {
		id = newIdentity(time.Now())
		db.log.Info("data directory: new instance id", "dir", db.dir, "instance", id.Instance)
	}
	previousNode = id.Node
	if previousNode != "" && previousNode != db.opts.Node {
		db.log.Warn("data directory renamed: it recorded as another node; its blocks keep the node they were recorded as",
			"dir", db.dir, "was", previousNode, "now", db.opts.Node, "instance", id.Instance)
	}
	id.Node = db.opts.Node
	if err := writeIdentity(db.dir, id); err != nil {
		return "", err
	}
	db.identity = id
	return previousNode, nil
}
