package engine

import (
	"errors"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
)

func TestIOStats(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "st", K: 4, M: 2, ChunkSize: 4096}, 1<<20)
	if st := v.IOStats(); st != (IOStats{}) {
		t.Fatalf("new volume: %+v", st)
	}
	p := make([]byte, 3*layout.BlockSize)
	for i := 0; i < 5; i++ {
		if _, err := v.WriteAt(p, int64(i)*layout.BlockSize); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.WriteAtFUA(p[:layout.BlockSize], 0); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteZeroes(0, 2*layout.BlockSize); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 7; i++ {
		if _, err := v.ReadAt(p[:2*layout.BlockSize], int64(i)*layout.BlockSize); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ReadAt(p[:1], 0); err == nil { // unaligned: an error to the caller
		t.Fatal("unaligned read succeeded")
	}
	st := v.IOStats()
	check := func(what string, s OpStats, requests, bytes, errs uint64) {
		t.Helper()
		if s.Requests != requests || s.Bytes != bytes || s.Errors != errs {
			t.Errorf("%s: %d requests, %d bytes, %d errors; want %d, %d, %d", what, s.Requests, s.Bytes, s.Errors, requests, bytes, errs)
		}
		if s.Buckets[len(s.Buckets)-1] > s.Requests || s.Seconds <= 0 {
			t.Errorf("%s latency: %v s, buckets %v", what, s.Seconds, s.Buckets)
		}
		for i := 1; i < len(s.Buckets); i++ {
			if s.Buckets[i] < s.Buckets[i-1] {
				t.Errorf("%s: buckets not cumulative: %v", what, s.Buckets)
			}
		}
	}
	check("read", st.Read, 8, 7*2*layout.BlockSize, 1)
	check("write", st.Write, 7, (5*3+1+2)*layout.BlockSize, 0)
	check("flush", st.Flush, 1, 0, 0)
	if st.MemberErrors != 0 {
		t.Errorf("member errors: %d", st.MemberErrors)
	}

	// An injected member error is counted; the request still succeeds.
	mm[1].SetFailed(true)
	if _, err := v.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	st = v.IOStats()
	if st.MemberErrors != 1 || st.Read.Requests != 9 || st.Read.Errors != 1 {
		t.Errorf("after member error: %d member errors, read %+v", st.MemberErrors, st.Read)
	}
	// Too many failures: the error reaches the caller.
	mm[2].SetFailed(true)
	mm[3].SetFailed(true)
	if _, err := v.WriteAt(p, 0); !errors.Is(err, ErrVolumeFailed) && !errors.Is(err, ErrTooManyFailures) {
		t.Fatalf("write with 3 of 6 failed: %v", err)
	}
	st = v.IOStats()
	if st.Write.Errors != 1 || st.Write.Requests != 8 || st.MemberErrors < 3 {
		t.Errorf("after failed write: %d member errors, write %+v", st.MemberErrors, st.Write)
	}
}
