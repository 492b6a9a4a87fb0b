package nvmf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabraid/fabraid/internal/durable"
	"github.com/fabraid/fabraid/kernel/internal/nvmesys"
)

// DefaultHostDir is where nvme-cli and libnvme keep the host identity.
const DefaultHostDir = "/etc/nvme"

// HostIdentity is this host's NQN and host id, shared with nvme-cli
// (/etc/nvme/hostnqn, /etc/nvme/hostid) so connections made by either
// tool agree.
type HostIdentity struct {
	NQN string
	ID  string // dashed lowercase UUID
}

// LoadHostIdentity reads dir/hostnqn and dir/hostid. Missing files are
// created the way nvme-cli does: a random host id and the NQN
// nqn.2014-08.org.nvmexpress:uuid:<hostid>. When only hostnqn exists and it
// is of that uuid form, the host id is taken from it, as libnvme does.
func LoadHostIdentity(dir string) (HostIdentity, error) {
	var h HostIdentity
	nqn, err := readLine(filepath.Join(dir, "hostnqn"))
	if err != nil {
		return h, err
	}
	id, err := readLine(filepath.Join(dir, "hostid"))
	if err != nil {
		return h, err
	}
	if id == "" {
		if u, ok := strings.CutPrefix(nqn, nvmesys.UUIDNQNPrefix); ok {
			id = u
		}
	}
	if id == "" {
		u, err := nvmesys.NewRandomUUID()
		if err != nil {
			return h, err
		}
		id = u.String()
	}
	u, err := nvmesys.ParseUUID(id)
	if err != nil {
		return h, fmt.Errorf("host identity %s: hostid: %w", dir, err)
	}
	id = u.String()
	if nqn == "" {
		nqn = nvmesys.UUIDNQNPrefix + id
	}
	if err := nvmesys.ValidateNQN(nqn); err != nil {
		return h, fmt.Errorf("host identity %s: hostnqn: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return h, fmt.Errorf("host identity: %w", err)
	}
	for _, f := range []struct{ name, v string }{{"hostnqn", nqn}, {"hostid", id}} {
		p := filepath.Join(dir, f.name)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if err := durable.WriteFile(p, []byte(f.v+"\n"), 0o644); err != nil {
			return h, fmt.Errorf("host identity: %w", err)
		}
	}
	return HostIdentity{NQN: nqn, ID: id}, nil
}

func readLine(p string) (string, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("host identity: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
