//go:build linux

package productbench

import (
	"testing"

	"github.com/fabraid/fabraid/internal/benchtools"
)

// Guest paths of fio and mdadm and their libraries (internal/benchtools).
const (
	toolBin = benchtools.Bin
	toolLib = benchtools.Lib
)

func benchTools(t *testing.T) map[string]string { return benchtools.Files(t) }
