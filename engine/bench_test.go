package engine

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
)

// benchVolume builds a 4+2 volume on files in /dev/shm (or the test's temp
// directory when /dev/shm is missing).
func benchVolume(b *testing.B, chunk int) (*Volume, []Member) {
	b.Helper()
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = b.TempDir()
	}
	d, err := os.MkdirTemp(dir, "fabraid-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	const size = 64 << 20
	devs := make([]Member, 6)
	for i := range devs {
		f, err := os.CreateTemp(d, "member")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
			b.Fatal(err)
		}
		devs[i] = NewFileMember(f)
	}
	v, err := Create(Config{Name: "bench", K: 4, M: 2, ChunkSize: chunk, AssumeZeroed: true}, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	return v, devs
}

func benchRandom(b *testing.B, write bool, degraded bool) {
	v, _ := benchVolume(b, DefaultChunkSize)
	if degraded {
		if err := v.FailMember(0); err != nil {
			b.Fatal(err)
		}
	}
	blocks := v.Size() / layout.BlockSize
	b.SetBytes(layout.BlockSize)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		p := make([]byte, layout.BlockSize)
		for pb.Next() {
			off := rng.Int64N(blocks) * layout.BlockSize
			var err error
			if write {
				_, err = v.WriteAt(p, off)
			} else {
				_, err = v.ReadAt(p, off)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRandomRead4K(b *testing.B)          { benchRandom(b, false, false) }
func BenchmarkRandomWrite4K(b *testing.B)         { benchRandom(b, true, false) }
func BenchmarkRandomReadDegraded4K(b *testing.B)  { benchRandom(b, false, true) }
func BenchmarkRandomWriteDegraded4K(b *testing.B) { benchRandom(b, true, true) }

func benchSeq(b *testing.B, write, degraded bool) {
	v, _ := benchVolume(b, DefaultChunkSize)
	if degraded {
		if err := v.FailMember(0); err != nil {
			b.Fatal(err)
		}
	}
	sb := v.Geometry().StripeBytes()
	stripes := v.Size() / sb
	b.SetBytes(sb)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		p := make([]byte, sb)
		s := rng.Int64N(stripes)
		for pb.Next() {
			s = (s + 1) % stripes
			var err error
			if write {
				_, err = v.WriteAt(p, s*sb)
			} else {
				_, err = v.ReadAt(p, s*sb)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkStripeWrite(b *testing.B) { benchSeq(b, true, false) }

// BenchmarkStripeWrite4x runs four writers per CPU (oversubscribed).
func BenchmarkStripeWrite4x(b *testing.B) {
	b.SetParallelism(4)
	benchSeq(b, true, false)
}
func BenchmarkStripeRead(b *testing.B)         { benchSeq(b, false, false) }
func BenchmarkStripeReadDegraded(b *testing.B) { benchSeq(b, false, true) }

// BenchmarkRawRandomRead4K is the baseline for BenchmarkRandomRead4K: the
// same members read directly.
func BenchmarkRawRandomRead4K(b *testing.B) {
	v, devs := benchVolume(b, DefaultChunkSize)
	blocks := v.Geometry().MemberDataBytes() / layout.BlockSize
	b.SetBytes(layout.BlockSize)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		p := make([]byte, layout.BlockSize)
		for pb.Next() {
			d := devs[rng.IntN(len(devs))]
			if _, err := d.ReadAt(p, DefaultDataOffset+rng.Int64N(blocks)*layout.BlockSize); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
