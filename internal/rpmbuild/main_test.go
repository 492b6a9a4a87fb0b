package rpmbuild

import (
	"os"
	"testing"
)

// TestMain removes the shared package fixture after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if fix.dir != "" {
		os.RemoveAll(fix.dir)
	}
	os.Exit(code)
}
