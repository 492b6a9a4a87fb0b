package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fabraid/fabraid/internal/durable"
)

// StateVersion is the schema version of State and of the records below.
const StateVersion = 1

// State is what a node keeps on disk about its cluster.
type State struct {
	Version       int    `json:"version"`
	Cluster       string `json:"cluster"`
	CAFingerprint string `json:"ca_sha256"`
	// Member says the node runs an embedded etcd member (ID MemberID);
	// InitialCluster is what it first started with.
	Member         bool   `json:"member"`
	MemberID       string `json:"member_id,omitempty"`
	InitialCluster string `json:"initial_cluster,omitempty"`
	// Members is the voting-member target (members only): set at init
	// from Options.Members and handed to each member at its join. The
	// join service decides from it alone, never from the cluster record
	// (every node can write etcd). 0: a state that predates it.
	Members int `json:"etcd_members,omitempty"`
	// Endpoints are etcd client URLs to dial (refreshed from the member
	// list at every start).
	Endpoints []string  `json:"endpoints"`
	Joined    time.Time `json:"joined"`
}

// Record is the cluster record at keys.Cluster.
type Record struct {
	Version       int       `json:"version"`
	Name          string    `json:"name"`
	CAFingerprint string    `json:"ca_sha256,omitempty"`
	Members       int       `json:"etcd_members"` // voting member target at init; informational (see State.Members)
	Created       time.Time `json:"created"`
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// loadState reads dir's state; nil without error when there is none.
func loadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("cluster state %s: %w", statePath(dir), err)
	}
	if s.Version != StateVersion {
		return nil, fmt.Errorf("cluster state %s: schema version %d, this fabraid reads %d", statePath(dir), s.Version, StateVersion)
	}
	return &s, nil
}

func saveState(dir string, s *State) error {
	s.Version = StateVersion
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cluster state: %w", err)
	}
	if err := durable.WriteFile(statePath(dir), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("cluster state: %w", err)
	}
	return nil
}
