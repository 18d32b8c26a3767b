package node

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/rbdcsi/rbdcsi/internal/mapper"
)

// recordVersion changes when the record's meaning does; load refuses a
// version it does not know rather than guess.
const recordVersion = 1

// record is what the node keeps per staged volume, written at stage time
// so the plugin can restart or be upgraded between stage and unstage:
// enough to unpublish, unstage, expand and report on the volume without
// secrets. It never holds a key.
type record struct {
	Version  int          `json:"version"`
	VolumeID string       `json:"volumeID"`
	Image    mapper.Image `json:"image"`
	Mounter  string       `json:"mounter"`
	// UnmapOptions are the unmapOptions for Mounter, needed at unstage,
	// which gets no volume context.
	UnmapOptions string `json:"unmapOptions,omitempty"`
	// Device is set once mapped; empty means a stage stopped before.
	Device string `json:"device,omitempty"`
	// Crypt is the dm-crypt device name of an encrypted volume, set
	// before it is opened (crypt.go).
	Crypt       string  `json:"crypt,omitempty"`
	StagingPath string  `json:"stagingPath"`
	Cap         capSpec `json:"capability"`
	// Staged is false from the first step of NodeStageVolume until its
	// last: a record with Staged false is an unfinished stage to resume or
	// undo, never a staged volume.
	Staged bool `json:"staged"`
	// Targets are the publish targets, each written before its mount.
	Targets map[string]target `json:"targets,omitempty"`
}

// capSpec is a volume capability reduced to what the node acts on.
type capSpec struct {
	Block      bool     `json:"block,omitempty"`
	FsType     string   `json:"fsType,omitempty"`
	MountFlags []string `json:"mountFlags,omitempty"`
	AccessMode string   `json:"accessMode"`
}

func (c capSpec) equal(o capSpec) bool {
	return c.Block == o.Block && c.FsType == o.FsType && c.AccessMode == o.AccessMode &&
		slices.Equal(c.MountFlags, o.MountFlags)
}

// target is one publish: its capability and read-only flag.
type target struct {
	Cap      capSpec `json:"capability"`
	ReadOnly bool    `json:"readOnly,omitempty"`
}

// store keeps one JSON file per volume under dir, written atomically so a
// crash leaves the old or the new record, never half of one.
type store struct {
	dir string
}

func newStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &store{dir: dir}, nil
}

// path names a volume's file by a hash of its ID: IDs hold ':' and are
// up to 128 bytes; the hash is short, fixed and filesystem-safe.
func (s *store) path(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+".json")
}

// The errors of the store say which file and what to check: the records
// are in the node plugin's --state-dir, a directory on the node.

// load returns the volume's record, or nil if there is none.
func (s *store) load(volumeID string) (*record, error) {
	path := s.path(volumeID)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the state record of volume %s: %w (check the directory %s, under the node plugin's --state-dir)", volumeID, err, s.dir)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the state record of volume %s (%s) is corrupt: %w; the node plugin cannot tell what it staged: unmount the volume's staging path, unmap its device and remove the file by hand", volumeID, path, err)
	}
	if r.Version != recordVersion {
		return nil, fmt.Errorf("the state record of volume %s (%s) has version %d, and this node plugin knows %d: a newer plugin staged it; unstage it with that version", volumeID, path, r.Version, recordVersion)
	}
	if r.VolumeID != volumeID {
		return nil, fmt.Errorf("the state record %s belongs to volume %s, not %s; was it copied or renamed by hand?", path, r.VolumeID, volumeID)
	}
	return &r, nil
}

// save writes the record: temp file, fsync, rename, fsync of the directory.
func (s *store) save(r *record) error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	final := s.path(r.VolumeID)
	f, err := os.CreateTemp(s.dir, ".tmp-*") // 0600
	if err != nil {
		return s.saveFailed(r.VolumeID, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return s.saveFailed(r.VolumeID, err)
	}
	if err := syncDir(s.dir); err != nil {
		return s.saveFailed(r.VolumeID, err)
	}
	return nil
}

func (s *store) saveFailed(volumeID string, err error) error {
	return fmt.Errorf("saving the state record of volume %s: %w (the directory %s, under the node plugin's --state-dir, must be writable, on a filesystem that is neither full nor read-only)", volumeID, err, s.dir)
}

// all loads every record.
func (s *store) all() ([]*record, error) {
	files, err := filepath.Glob(filepath.Join(s.dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var recs []*record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading volume state: %w", err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("volume state %s is corrupt: %w", f, err)
		}
		recs = append(recs, &r)
	}
	return recs, nil
}

// remove deletes the record; a missing one is fine.
func (s *store) remove(volumeID string) error {
	if err := os.Remove(s.path(volumeID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the state record of volume %s: %w (the directory %s, under the node plugin's --state-dir, must be writable)", volumeID, err, s.dir)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("removing the state record of volume %s: %w (the directory %s, under the node plugin's --state-dir, must be writable)", volumeID, err, s.dir)
	}
	return nil
}

// sweepTemp removes temp files a crash during save left behind.
func (s *store) sweepTemp() {
	old, _ := filepath.Glob(filepath.Join(s.dir, ".tmp-*"))
	for _, f := range old {
		_ = os.Remove(f)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
