package engine

import (
	"bytes"
	"testing"

	"github.com/klauspost/reedsolomon"
)

// TestSIMDPathsAgree: every candidate path computes the same parity (the
// selection may only change speed, never the on-disk bytes).
func TestSIMDPathsAgree(t *testing.T) {
	var want [][]byte
	for i, opts := range simdPaths {
		enc, err := reedsolomon.New(4, 2, opts...)
		if err != nil {
			t.Fatal(err)
		}
		sh := make([][]byte, 6)
		for j := range sh {
			sh[j] = make([]byte, 8192)
			for b := range sh[j] {
				sh[j][b] = byte(j*7 + b*13)
			}
		}
		if err := enc.Encode(sh); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			want = sh
			continue
		}
		for j := 4; j < 6; j++ {
			if !bytes.Equal(sh[j], want[j]) {
				t.Fatalf("path %d: parity %d differs from the default path", i, j)
			}
		}
	}
	t.Logf("selected path: %d options", len(fastestSIMD()))
}
