package volmgr

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/fabraid/fabraid/engine"
)

// openMember opens a member device exclusively (O_EXCL on a block device:
// mkfs, mount, md and a second engine are refused while we hold it).
func openMember(path string) (*engine.FileMember, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_EXCL, 0)
	if err != nil {
		return nil, fmt.Errorf("open member %s exclusively: %w", path, err)
	}
	return engine.NewFileMember(f), nil
}

// assemble opens the members exclusively and assembles the volume.
func assemble(paths []string, log *slog.Logger) (*engine.Volume, error) {
	var devs []engine.Member
	for _, p := range paths {
		m, err := openMember(p)
		if err != nil {
			for _, d := range devs {
				d.(*engine.FileMember).Close()
			}
			return nil, err
		}
		devs = append(devs, m)
	}
	return engine.Assemble(devs, paths, engine.Options{Logger: log})
}
