package daemon

import (
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

func TestKicks(t *testing.T) {
	for k, want := range map[string]bool{
		keys.Drain("b"):             true,
		keys.FenceVolume("u") + "c": true,
		keys.Volume("u"):            true,
		keys.VolumeStatus("u"):      false,
		keys.TokensPrefix + "x":     false,
	} {
		if got := kicks(k); got != want {
			t.Errorf("kicks(%q) = %v, want %v", k, got, want)
		}
	}
}
