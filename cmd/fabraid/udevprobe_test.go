package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
)

func probeSample(name, domain string) *superblock.Superblock {
	g := layout.Geometry{K: 2, M: 1, Groups: 1, ChunkSize: 64 << 10, Rows: 100}
	sb := &superblock.Superblock{
		VolumeUUID: [16]byte{0xab, 1, 2, 3}, Name: name, Geometry: g, Codec: superblock.CodecRS,
		DataOffset: 1 << 20, BitmapOffset: 32768, BitmapBytes: 4096, RegionRows: 16,
		Events: 7, Epoch: 1, Clean: true, Slot: 1,
	}
	for i := 0; i < g.Members(); i++ {
		sb.Members = append(sb.Members, superblock.Member{UUID: [16]byte{9, byte(i)}, Domain: domain, Role: superblock.RoleActive})
	}
	sb.MemberUUID = sb.Members[1].UUID
	return sb
}

// writeMember writes copy A and copy B (which may be nil: left zero) into a
// file of size bytes.
func writeMember(t *testing.T, a, b *superblock.Superblock, size int) string {
	t.Helper()
	img := make([]byte, size)
	for _, c := range []struct {
		sb  *superblock.Superblock
		off int
	}{{a, superblock.CopyAOffset}, {b, superblock.CopyBOffset}} {
		if c.sb == nil {
			continue
		}
		buf, err := c.sb.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		copy(img[c.off:], buf)
	}
	p := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(p, img, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runProbe(t *testing.T, dev string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"udev-probe", dev})
	err := cmd.Execute()
	return out.String(), err
}

func TestUdevProbeMember(t *testing.T) {
	a := probeSample("vol0", "node-a")
	b := probeSample("vol0", "node-a")
	b.Events = 9 // copy B is newer: its events are printed
	out, err := runProbe(t, writeMember(t, a, b, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	want := `FABRAID_MEMBER=1
FABRAID_VOLUME_UUID=ab010203-0000-0000-0000-000000000000
FABRAID_VOLUME_NAME=vol0
FABRAID_SLOT=1
FABRAID_MEMBER_UUID=09010000-0000-0000-0000-000000000000
FABRAID_DOMAIN=node-a
FABRAID_EVENTS=9
`
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

// A torn copy A does not hide the member: copy B answers.
func TestUdevProbeOneCopyValid(t *testing.T) {
	p := writeMember(t, probeSample("vol0", "n"), probeSample("vol0", "n"), 1<<20)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("garbage"), superblock.CopyAOffset+100)
	f.Close()
	out, err := runProbe(t, p)
	if err != nil || !strings.Contains(out, "FABRAID_MEMBER=1\n") {
		t.Fatalf("out %q err %v", out, err)
	}
}

// Non-members: exit 1 and nothing on stdout (udev imports nothing).
func TestUdevProbeNonMembers(t *testing.T) {
	dir := t.TempDir()
	ext4 := make([]byte, 1<<20)
	copy(ext4[1024+0x38:], []byte{0x53, 0xef}) // ext4 superblock magic
	short := probeSample("vol0", "n")
	shortBuf, _ := short.Marshal()
	truncated := make([]byte, superblock.CopyAOffset+len(shortBuf)/2)
	copy(truncated[superblock.CopyAOffset:], shortBuf)
	cases := map[string][]byte{
		"blank":     make([]byte, 1<<20),
		"ext4":      ext4,
		"empty":     nil,
		"truncated": truncated,
	}
	for name, img := range cases {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, img, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := runProbe(t, p)
		if err == nil || out != "" {
			t.Errorf("%s: out %q err %v, want no output and an error", name, out, err)
		}
		if ee, ok := err.(*exitError); !ok || ee.code != 1 {
			t.Errorf("%s: err %v, want exit code 1", name, err)
		}
	}
	if out, err := runProbe(t, filepath.Join(dir, "missing")); err == nil || out != "" {
		t.Errorf("missing device: out %q err %v", out, err)
	}
}

var probeLine = regexp.MustCompile(`^FABRAID_[A-Z_]+=[A-Za-z0-9._+-]+$`)

// checkProbeLines is the output contract: every line KEY=VALUE with a safe,
// non-empty value that is never "." or ".." (it becomes a symlink name).
func checkProbeLines(t *testing.T, lines []string) {
	t.Helper()
	for _, l := range lines {
		if !probeLine.MatchString(l) {
			t.Fatalf("unsafe line %q", l)
		}
		if _, v, _ := strings.Cut(l, "="); v == "." || v == ".." {
			t.Fatalf("dot value %q", l)
		}
	}
}

func TestUdevProbeEscaping(t *testing.T) {
	for _, c := range []struct{ name, domain, wantName, wantDomain string }{
		{"a b", "x/y", "FABRAID_VOLUME_NAME=a_b", "FABRAID_DOMAIN=x_y"},
		{"$(rm -rf)\"'`", "\n=", "FABRAID_VOLUME_NAME=__rm_-rf____", "FABRAID_DOMAIN=__"},
		{"..", ".", "", ""},
		{"é", "ok", "FABRAID_VOLUME_NAME=__", "FABRAID_DOMAIN=ok"},
	} {
		lines := probeLines(probeSample(c.name, c.domain))
		checkProbeLines(t, lines)
		got := strings.Join(lines, "\n") + "\n"
		for key, want := range map[string]string{"FABRAID_VOLUME_NAME=": c.wantName, "FABRAID_DOMAIN=": c.wantDomain} {
			if want == "" {
				if strings.Contains(got, key) {
					t.Errorf("%q/%q: %s present in\n%s", c.name, c.domain, key, got)
				}
			} else if !strings.Contains(got, want+"\n") {
				t.Errorf("%q/%q: want %s in\n%s", c.name, c.domain, want, got)
			}
		}
	}
}

func FuzzUdevProbeLines(f *testing.F) {
	for _, s := range []string{"vol0", "a b", "..", "$(x)", "\x00", "ü\n=\"'"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, name, domain string) {
		sb := probeSample(name, domain)
		if err := sb.Validate(); err != nil {
			return // not representable on disk
		}
		lines := probeLines(sb)
		checkProbeLines(t, lines)
		if len(lines) < 5 || lines[0] != "FABRAID_MEMBER=1" {
			t.Fatalf("lines %q", lines)
		}
	})
}

// --volume asks the daemon for the name; an unknown volume prints nothing.
func TestUdevProbeHead(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	const u = "ab010203-0000-0000-0000-000000000000"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/volumes/"+u {
			http.Error(w, `{"error":"no such volume"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(api.Volume{Name: "vol 0", UUID: u})
	})}
	go srv.Serve(l)
	defer srv.Close()
	run := func(args ...string) (string, error) {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append([]string{"udev-probe", "--socket", sock}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run("--volume", u)
	if want := "FABRAID_VOLUME_UUID=" + u + "\nFABRAID_VOLUME_NAME=vol_0\n"; err != nil || out != want {
		t.Fatalf("out %q err %v, want %q", out, err, want)
	}
	if out, err := run("--volume", "ab010203-0000-0000-0000-000000000001"); err == nil || out != "" {
		t.Fatalf("unknown volume: out %q err %v", out, err)
	}
	if out, err := run("--volume", "nonsense"); err == nil || out != "" {
		t.Fatalf("bad uuid: out %q err %v", out, err)
	}
}
