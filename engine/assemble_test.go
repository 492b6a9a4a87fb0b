package engine

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine/superblock"
)

// baseSBs returns the superblocks of a healthy 3+2 volume, one per slot.
func baseSBs(events uint64) []*superblock.Superblock {
	v := &superblock.Superblock{
		VolumeUUID: [16]byte{0xaa}, Name: "fz", Codec: superblock.CodecRS,
		DataOffset: 1 << 20, BitmapOffset: 32768, BitmapBytes: 4096, RegionRows: 4,
		Events: events, Epoch: 1,
	}
	v.Geometry.K, v.Geometry.M, v.Geometry.Groups, v.Geometry.ChunkSize, v.Geometry.Rows = 3, 2, 1, 4096, 64
	for i := 0; i < 5; i++ {
		v.Members = append(v.Members, superblock.Member{UUID: [16]byte{0xbb, byte(i)}, Domain: "d", Role: superblock.RoleActive})
	}
	out := make([]*superblock.Superblock, 5)
	for i := range out {
		c := v.Clone()
		c.Slot, c.MemberUUID = i, c.Members[i].UUID
		out[i] = c
	}
	return out
}

func cands(sbs []*superblock.Superblock, size int64) []Candidate {
	var c []Candidate
	for i, sb := range sbs {
		c = append(c, Candidate{Name: "dev" + string(rune('a'+i)), Size: size, SB: sb})
	}
	return c
}

func TestPlanAssembly(t *testing.T) {
	const size = 2 << 20
	for _, tc := range []struct {
		name    string
		mutate  func([]Candidate) []Candidate
		wantErr string // substring; "" means success
		check   func(*testing.T, *AssemblyPlan)
	}{
		{name: "healthy", mutate: func(c []Candidate) []Candidate { return c }},
		{name: "missing two", mutate: func(c []Candidate) []Candidate { return c[:3] },
			check: func(t *testing.T, p *AssemblyPlan) {
				for _, m := range p.SB.Members[3:] {
					if m.Role != superblock.RoleFailed || m.Failure != superblock.FailMissing {
						t.Fatalf("missing members not failed (missing): %+v", p.SB.Members)
					}
				}
			}},
		{name: "missing, failed before", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[:4] {
				x.SB.Members[4].Role, x.SB.Members[4].Failure = superblock.RoleFailed, superblock.FailIO
			}
			return c[:4]
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if m := p.SB.Members[4]; m.Role != superblock.RoleFailed || m.Failure != superblock.FailIO {
				t.Fatalf("reason of a failed member changed by its absence: %+v", m)
			}
		}},
		{name: "missing three", mutate: func(c []Candidate) []Candidate { return c[:2] }, wantErr: "group 0 has 2 current members"},
		{name: "stale member", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events = 9
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if !p.Stale[0] || p.SB.Members[0].Role != superblock.RoleRebuilding || !p.SB.Members[0].Resync {
				t.Fatalf("stale member not resync target: %+v", p.SB.Members[0])
			}
		}},
		{name: "one write behind (torn metadata write)", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events = 6
				x.SB.Members[0].Role, x.SB.Members[0].Checkpoint = superblock.RoleRebuilding, 7
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if p.Stale[0] || p.SB.Members[0].Role != superblock.RoleRebuilding || p.SB.Members[0].Checkpoint != 7 {
				t.Fatalf("member one write behind not current with the newest role: %+v stale %v", p.SB.Members[0], p.Stale[0])
			}
		}},
		{name: "one write behind, failed in the newest", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events = 6
				x.SB.Members[0].Role = superblock.RoleFailed
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if p.Device[0] != -1 || p.SB.Members[0].Role != superblock.RoleFailed {
				t.Fatalf("failed member assembled: device %d, %+v", p.Device[0], p.SB.Members[0])
			}
		}},
		{name: "failed member present", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events = 9
				x.SB.Members[0].Role, x.SB.Members[0].Failure = superblock.RoleFailed, superblock.FailAdmin
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			m := p.SB.Members[0]
			if p.Device[0] != -1 || p.Stale[0] || m.Role != superblock.RoleFailed || m.Failure != superblock.FailAdmin {
				t.Fatalf("failed member not left out: device %d stale %v %+v", p.Device[0], p.Stale[0], m)
			}
			if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "deva: member of slot 0 failed (admin); not assembled") {
				t.Fatalf("warnings %q", p.Warnings)
			}
		}},
		{name: "missing member back", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events = 9
				x.SB.Members[0].Role, x.SB.Members[0].Failure = superblock.RoleFailed, superblock.FailMissing
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			m := p.SB.Members[0]
			if p.Device[0] != 0 || !p.Stale[0] || m.Role != superblock.RoleRebuilding || !m.Resync || m.Failure != superblock.FailUnrecorded {
				t.Fatalf("missing member back: device %d stale %v %+v, want a resync target", p.Device[0], p.Stale[0], m)
			}
		}},
		{name: "unreachable member back", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events = 9
				x.SB.Members[0].Role, x.SB.Members[0].Failure = superblock.RoleFailed, superblock.FailUnreachable
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			m := p.SB.Members[0]
			if p.Device[0] != 0 || !p.Stale[0] || m.Role != superblock.RoleRebuilding || !m.Resync || m.Failure != superblock.FailUnrecorded {
				t.Fatalf("unreachable member back: device %d stale %v %+v, want a resync target", p.Device[0], p.Stale[0], m)
			}
			if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "was unreachable and is back; resync") {
				t.Fatalf("warnings %q", p.Warnings)
			}
		}},
		{name: "missing member back, it was a full-rebuild target", mutate: func(c []Candidate) []Candidate {
			c[0].SB.Members[0].Role, c[0].SB.Members[0].Checkpoint = superblock.RoleRebuilding, 7
			for _, x := range c[1:] {
				x.SB.Events = 9
				x.SB.Members[0].Role, x.SB.Members[0].Failure = superblock.RoleFailed, superblock.FailMissing
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			m := p.SB.Members[0]
			if p.Device[0] != 0 || !p.Stale[0] || m.Role != superblock.RoleRebuilding || m.Resync || m.Checkpoint != 0 {
				t.Fatalf("returning full-rebuild target: device %d stale %v %+v, want a full rebuild", p.Device[0], p.Stale[0], m)
			}
		}},
		{name: "full-rebuild target missing", mutate: func(c []Candidate) []Candidate {
			for _, x := range c {
				x.SB.Members[0].Role, x.SB.Members[0].Checkpoint = superblock.RoleRebuilding, 7
			}
			return c[1:]
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if m := p.SB.Members[0]; m.Role != superblock.RoleFailed || m.Failure != superblock.FailIO {
				t.Fatalf("full-rebuild target absent: %+v, want failed (io-error)", m)
			}
		}},
		{name: "failed member present, reason unrecorded", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events = 9
				x.SB.Members[0].Role = superblock.RoleFailed
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if p.Device[0] != -1 || p.SB.Members[0].Role != superblock.RoleFailed {
				t.Fatalf("member failed for an unrecorded reason assembled: device %d, %+v", p.Device[0], p.SB.Members[0])
			}
		}},
		{name: "one write behind, older owner epoch", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[1:] {
				x.SB.Events, x.SB.Epoch = 6, 2
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if !p.Stale[0] {
				t.Fatal("member of an older owner epoch trusted")
			}
		}},
		{name: "three stale", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[3:] {
				x.SB.Events = 9
			}
			return c
		}, wantErr: "devc stale"},
		{name: "mixed volumes", mutate: func(c []Candidate) []Candidate {
			c[2].SB.VolumeUUID[0] = 1
			return c
		}, wantErr: "mixed volumes"},
		{name: "duplicate", mutate: func(c []Candidate) []Candidate {
			return append(c, Candidate{Name: "copy", Size: size, SB: c[1].SB.Clone()})
		}, wantErr: "both claim slot 1"},
		{name: "too small", mutate: func(c []Candidate) []Candidate {
			c[3].Size = 4096
			return c
		}, wantErr: "devd: 4096 bytes"},
		{name: "garbage", mutate: func(c []Candidate) []Candidate {
			c[0].SB, c[0].Err = nil, superblock.ErrInvalid
			return c
		}, wantErr: "deva: invalid superblock"},
		{name: "conflict same events", mutate: func(c []Candidate) []Candidate {
			c[2].SB.Members[4].Role = superblock.RoleFailed
			return c
		}, wantErr: "disagree"},
		{name: "geometry differs", mutate: func(c []Candidate) []Candidate {
			c[2].SB.Events = 3
			c[2].SB.Geometry.Rows = 32
			return c
		}, wantErr: "geometry"},
		{name: "replaced member ignored", mutate: func(c []Candidate) []Candidate {
			for _, x := range c[:4] {
				x.SB.Events = 9
				x.SB.Members[4].UUID = [16]byte{0xcc}
				x.SB.Members[4].Role = superblock.RoleRebuilding
			}
			return c
		}, check: func(t *testing.T, p *AssemblyPlan) {
			if p.Device[4] != -1 || len(p.Warnings) == 0 {
				t.Fatalf("replaced member used: %+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanAssembly(tc.mutate(cands(baseSBs(5), size)))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.check != nil {
					tc.check(t, p)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrAssembly) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzPlanAssembly: arbitrary sets of (possibly garbage, conflicting or
// stale) superblocks never panic, and a plan that is returned never mixes
// volumes, never fills a slot twice or with the wrong member, never trusts
// a stale member, and always has k current members per group.
func FuzzPlanAssembly(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4})
	f.Add([]byte{0x10, 0x21, 0x32, 0x43, 0x54, 0x65})
	f.Add([]byte{0xff, 0x80, 0x01})
	raw, _ := baseSBs(5)[0].Marshal()
	f.Add(append([]byte{0xfe}, raw...))
	f.Add([]byte{0xfd, 0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		var cs []Candidate
		if data[0] == 0xfd {
			cs = append(cs, Candidate{Name: "unreadable", Err: errors.New("i/o error")})
			data = data[1:]
		}
		if len(data) > 0 && data[0] == 0xfe && len(data) > superblock.CopySize {
			// One raw copy decoded from fuzz bytes among good ones.
			sb, err := superblock.Unmarshal(data[1:])
			cs = append(cs, Candidate{Name: "raw", Size: 2 << 20, SB: sb, Err: err})
			data = data[superblock.CopySize+1:]
		}
		for i, b := range data {
			if len(cs) >= 12 {
				break
			}
			sbs := baseSBs(5 + uint64(b>>6))
			sb := sbs[int(b)%5]
			switch (b >> 3) & 7 {
			case 1:
				sb.VolumeUUID[1] = b
			case 2:
				sb.Members[(int(b)+1)%5].Role = superblock.RoleFailed
				sb.Members[(int(b)+1)%5].Failure = superblock.FailReason(b>>5) % (superblock.FailMax + 1) // every reason
			case 3:
				sb.Members[int(b)%5].Role = superblock.RoleRebuilding
				sb.Members[int(b)%5].Checkpoint = int64(b % 64)
			case 4:
				sb.Geometry.Rows = 32
			case 5:
				sb.Epoch = uint64(b)
			}
			if sb.Validate() != nil {
				continue
			}
			size := int64(2 << 20)
			if b&0x7 == 7 {
				size = 1 << 20
			}
			cs = append(cs, Candidate{Name: string(rune('a' + i)), Size: size, SB: sb})
		}
		p, err := PlanAssembly(cs)
		if err != nil {
			if !errors.Is(err, ErrAssembly) {
				t.Fatalf("error does not wrap ErrAssembly: %v", err)
			}
			return
		}
		if err := p.SB.Validate(); err != nil {
			t.Fatalf("plan superblock invalid: %v", err)
		}
		g := p.SB.Geometry
		used := map[int]bool{}
		for slot, i := range p.Device {
			if i < 0 {
				continue
			}
			c := cs[i]
			if used[i] {
				t.Fatalf("device %d used twice", i)
			}
			used[i] = true
			if c.SB.VolumeUUID != p.SB.VolumeUUID || c.SB.Slot != slot || c.SB.MemberUUID != p.SB.Members[slot].UUID {
				t.Fatalf("slot %d filled with a foreign device", slot)
			}
			if c.Size < p.SB.MinDeviceSize() {
				t.Fatalf("slot %d: device too small", slot)
			}
			// Current: the newest version, or one metadata write behind it
			// (a torn write) in the same epoch.
			if !p.Stale[slot] && (c.SB.Epoch != p.SB.Epoch || (c.SB.Events != p.SB.Events && c.SB.Events+1 != p.SB.Events)) {
				t.Fatalf("slot %d: stale device trusted", slot)
			}
			if p.Stale[slot] && p.SB.Members[slot].Role == superblock.RoleActive {
				t.Fatalf("slot %d: stale device active", slot)
			}
			if p.SB.Members[slot].Role == superblock.RoleFailed {
				t.Fatalf("slot %d: device of a failed member assembled", slot)
			}
			// Of the failed slots, only those failed as missing or
			// unreachable take their device back, and never as current.
			if r := p.Recorded[slot]; r.Role == superblock.RoleFailed &&
				(!r.Failure.Returns() || !p.Stale[slot] || p.SB.Members[slot].Role != superblock.RoleRebuilding) {
				t.Fatalf("slot %d: device of a member failed (%s) assembled as %s, stale %v", slot, r.Failure, p.SB.Members[slot].Role, p.Stale[slot])
			}
		}
		for grp := 0; grp < g.Groups; grp++ {
			n := 0
			for mem := 0; mem < g.Width(); mem++ {
				s := g.Slot(grp, mem)
				if p.Device[s] >= 0 && !p.Stale[s] && p.SB.Members[s].Role == superblock.RoleActive {
					n++
				}
			}
			if n < g.K {
				t.Fatalf("group %d assembled with %d current members", grp, n)
			}
		}
	})
}

// End to end: superblocks written by Create, then damaged on the devices.
func TestAssembleFromDevices(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "asm", K: 3, M: 2, ChunkSize: 4096}, 1<<20)
	p := bytes.Repeat([]byte("fabraid!"), int(v.Size()/8))
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	reopen := func() []Member {
		var d []Member
		for _, m := range mm {
			m.Reopen()
			d = append(d, m)
		}
		return d
	}
	// Tear copy A of member 0 and wipe both copies of member 1: member 0
	// still assembles from copy B; member 1 is refused by name.
	mm[0].Corrupt(superblock.CopyAOffset+100, []byte("torn"))
	if v2, err := Assemble(reopen()[:1:1], []string{"m0"}, Options{Logger: quietLogger()}); err == nil {
		v2.Abandon()
		t.Fatal("assembled from one member of five")
	}
	mm[1].Corrupt(superblock.CopyAOffset, make([]byte, superblock.CopySize*2))
	_, err := Assemble(reopen(), []string{"m0", "m1", "m2", "m3", "m4"}, Options{Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "m1") {
		t.Fatalf("assemble with a wiped member: %v", err)
	}
	devs := reopen()
	v, err = Assemble([]Member{devs[0], devs[2], devs[3], devs[4]}, []string{"m0", "m2", "m3", "m4"}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read after degraded assembly: %v", err)
	}
	if st := v.Status(); st.Members[1].Role != superblock.RoleFailed || st.Epoch < 2 {
		t.Fatalf("status %+v", st)
	}
	// Stale owner epochs are refused.
	v.Abandon()
	devs = reopen()
	_, err = Assemble([]Member{devs[0], devs[2], devs[3], devs[4]}, nil, Options{Logger: quietLogger(), Epoch: 1})
	if err == nil || !strings.Contains(err.Error(), "stale owner") {
		t.Fatalf("stale owner epoch: %v", err)
	}
}

func TestPlanAssemblyUnreadableDevice(t *testing.T) {
	c := cands(baseSBs(5), 2<<20)
	c[1].SB, c[1].Err = nil, errors.New("read: input/output error")
	p, err := PlanAssembly(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Device[1] != -1 || p.SB.Members[1].Role != superblock.RoleFailed || p.Device[4] != 4 {
		t.Fatalf("plan %+v", p)
	}
	if len(p.Warnings) == 0 || !strings.Contains(p.Warnings[0], "devb") {
		t.Fatalf("warnings %q", p.Warnings)
	}
}

// A newer owner epoch wins over a higher event counter written by an older
// (fenced) owner, and the old owner notices at its next metadata write.
func TestOwnerEpochFencing(t *testing.T) {
	c := cands(baseSBs(5), 2<<20)
	for _, x := range c[:3] {
		x.SB.Epoch, x.SB.Events = 2, 6 // new owner, fewer events
	}
	for _, x := range c[3:] {
		x.SB.Events = 40 // old owner kept writing
	}
	p, err := PlanAssembly(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.SB.Epoch != 2 || !p.Stale[3] || !p.Stale[4] || p.Stale[0] {
		t.Fatalf("plan: epoch %d stale %v", p.SB.Epoch, p.Stale)
	}

	v1, mm := newTestVolume(t, Config{Name: "fence", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	v2, err := Assemble([]Member{mm[0], mm[1], mm[2]}, nil, Options{Logger: quietLogger(), Epoch: v1.Status().Epoch + 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.FailMember(2); !errors.Is(err, ErrFenced) && err != nil {
		t.Fatalf("old owner fail member: %v", err)
	}
	if _, err := v1.ReadAt(make([]byte, 4096), 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner read after fencing: %v", err)
	}
	if _, err := v2.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatalf("new owner write: %v", err)
	}
}

// The old owner is fenced although only one superblock copy holds the new
// owner's epoch and the other its own, higher event counter (the new
// owner's metadata write was interrupted after copy A).
func TestFencedByOneCopy(t *testing.T) {
	v1, mm := newTestVolume(t, Config{Name: "fence1", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	for i, m := range mm {
		sb, err := superblock.ReadCopies(m)
		if err != nil {
			t.Fatal(err)
		}
		sb.Epoch++
		sb.Events -= 2 // the new owner assembled from an older view
		b, err := sb.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.WriteAt(b, superblock.CopyAOffset); err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	epoch := v1.Status().Epoch
	if err := v1.FailMember(2); !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner fail member: %v, want %v", err, ErrFenced)
	}
	if _, err := v1.ReadAt(make([]byte, 4096), 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner read after a newer epoch in copy A: %v, want %v", err, ErrFenced)
	}
	for i, m := range mm {
		if sb, err := superblock.ReadCopies(m); err != nil || sb.Epoch != epoch+1 {
			t.Fatalf("member %d: the old owner overwrote the new owner's copy: %+v, %v", i, sb, err)
		}
	}
}
