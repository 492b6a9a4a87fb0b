package volmgr

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
)

// checkJournal applies the engine's bounds to the smallest drive: with a
// 16 MiB drive beside 64 MiB ones, 4 MiB (a quarter) is accepted and
// 8 MiB is ErrInvalid, as is a journal below one record.
func TestCheckJournal(t *testing.T) {
	var devs []engine.Member
	for _, size := range []int64{64 << 20, 16 << 20, 64 << 20} {
		f, err := os.Create(filepath.Join(t.TempDir(), "d"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, engine.NewFileMember(f))
	}
	r := api.CreateRequest{Name: "v", K: 2, M: 1}
	for _, c := range []struct {
		journal int64
		ok      bool
	}{{0, true}, {4 << 20, true}, {8 << 20, false}, {4096, false}} {
		r.JournalBytes = c.journal
		err := checkJournal(r, devs)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("journal %d: %v, want ok=%v (else ErrInvalid)", c.journal, err, c.ok)
		}
	}
}
