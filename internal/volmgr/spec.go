package volmgr

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/ublk"
)

// Engine spec files
//
// An engine run as a systemd unit (fabraid-engine@<volume>) gets no command
// line from the daemon: systemd starts it, and restarts it after a crash, as
// "fabraidd engine --volume NAME". It reads what it serves from a spec file
// <runDir>/engines/<NAME>.json (0600), which the daemon writes before it
// starts the unit and the engine keeps current: after creating a ublk device
// it records the device id (so a restart recovers the same /dev/ublkbN with
// user recovery) and after a replace it records the new member list.
// Every write is atomic (a temporary file renamed over the old one).

// SpecFile is the content of an engine spec file.
type SpecFile struct {
	UUID    string   `json:"uuid"`
	Name    string   `json:"name"`
	Members []string `json:"members"`
	UblkID  int      `json:"ublk_id"` // ublk.AnyID: none yet
	Socket  string   `json:"socket"`
	// OwnerDomain is engine.Options.OwnerDomain; absent (older files): off.
	OwnerDomain string `json:"owner_domain,omitempty"`
	// Epoch is engine.Options.Epoch: the owner epoch of the assembly
	// (kept current by a thaw); absent: one more than on disk.
	Epoch uint64 `json:"epoch,omitempty"`
	// NoZeroCopy is ServeOptions.NoZeroCopy (ublk_zero_copy = off);
	// absent: zero copy where the kernel offers it.
	NoZeroCopy bool `json:"no_zero_copy,omitempty"`
	// RebuildBusyRate is ServeOptions.RebuildBusyRate; absent (older
	// files): none.
	RebuildBusyRate int64 `json:"rebuild_busy_rate,omitempty"`
}

// SpecDir is the directory of the engine spec files.
func SpecDir(runDir string) string { return filepath.Join(runDir, "engines") }

// SpecPath is the spec file of volume name.
func SpecPath(runDir, name string) string {
	return filepath.Join(SpecDir(runDir), name+".json")
}

// ReadSpec reads and checks the spec file at path.
func ReadSpec(path string) (SpecFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return SpecFile{}, fmt.Errorf("engine spec: %w", err)
	}
	s := SpecFile{UblkID: ublk.AnyID}
	if err := json.Unmarshal(b, &s); err != nil {
		return SpecFile{}, fmt.Errorf("engine spec %s: %w", path, err)
	}
	if _, err := volid.ParseUUID(s.UUID); err != nil {
		return SpecFile{}, fmt.Errorf("engine spec %s: uuid: %w", path, err)
	}
	if s.Name == "" || len(s.Members) == 0 || s.Socket == "" {
		return SpecFile{}, fmt.Errorf("engine spec %s: name, members and socket are required", path)
	}
	return s, nil
}

// WriteSpec writes s to path atomically (mode 0600, directory 0700).
func WriteSpec(path string, s SpecFile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("engine spec: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("engine spec %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".spec-*")
	if err != nil {
		return fmt.Errorf("engine spec: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("engine spec %s: %w", path, err)
	}
	return nil
}

// UpdateSpec applies f to the spec file at path and writes it back when f
// changed it.
func UpdateSpec(path string, f func(*SpecFile)) error {
	s, err := ReadSpec(path)
	if err != nil {
		return err
	}
	old := s
	old.Members = slices.Clone(s.Members)
	f(&s)
	if old.UblkID == s.UblkID && old.Name == s.Name && old.UUID == s.UUID && old.Socket == s.Socket && old.OwnerDomain == s.OwnerDomain && old.Epoch == s.Epoch &&
		slices.Equal(old.Members, s.Members) {
		return nil
	}
	return WriteSpec(path, s)
}

// RemoveSpec removes the spec file at path; a missing file is no error.
func RemoveSpec(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("engine spec: %w", err)
	}
	return nil
}
