package vmtest

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"6.12.117+deb12", "6.12.99+deb12", 1},
		{"6.12.9", "6.12.10", -1},
		{"6.1.0-57", "6.1.0-9", 1},
		{"6.12.1", "6.12.1", 0},
	} {
		got := compareVersions(tc.a, tc.b)
		if (got > 0) != (tc.want > 0) || (got < 0) != (tc.want < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// The newest generic package wins by version, not by string order, and
// cloud/rt flavours are never picked.
func TestNewestPackage(t *testing.T) {
	names := []string{
		"linux-image-6.12.99+deb12-amd64-unsigned",
		"linux-image-6.12.117+deb12-amd64-unsigned",
		"linux-image-6.12.118+deb12-cloud-amd64-unsigned",
		"linux-image-6.12.119+deb12-rt-amd64-unsigned",
		"linux-image-6.1.0-9-amd64-unsigned",
		"linux-image-6.1.0-57-amd64-unsigned",
		"linux-image-6.1.0-58-cloud-amd64-unsigned",
	}
	for series, want := range map[string]string{
		Kernel612: "linux-image-6.12.117+deb12-amd64-unsigned",
		Kernel61:  "linux-image-6.1.0-57-amd64-unsigned",
	} {
		got, err := newestPackage(series, names)
		if err != nil || got != want {
			t.Errorf("newestPackage(%s) = %q, %v; want %q", series, got, err, want)
		}
	}
	if _, err := newestPackage(Kernel612, nil); err == nil || !strings.Contains(err.Error(), "apt-get update") {
		t.Errorf("no candidates: error %v should suggest apt-get update", err)
	}
	if _, err := newestPackage("5.10", names); err == nil {
		t.Error("unknown series accepted")
	}
}

// readCPIO parses a newc archive: just enough to check what we wrote.
func readCPIO(t *testing.T, b []byte) map[string]struct {
	mode uint64
	data string
} {
	t.Helper()
	out := map[string]struct {
		mode uint64
		data string
	}{}
	align := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; ; {
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic at %d: %q", off, h[:6])
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		mode, size, namesize := field(1), int(field(6)), int(field(11))
		name := string(b[off+110 : off+110+namesize-1])
		off = align(off + 110 + namesize)
		data := string(b[off : off+size])
		off = align(off + size)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		if _, dup := out[name]; dup {
			t.Errorf("entry %s written twice", name)
		}
		out[name] = struct {
			mode uint64
			data string
		}{mode, data}
	}
}

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	c.File("/bin/busybox", 0o755, []byte("ELF..."))
	c.Symlink("bin/sh", "busybox")
	c.File("etc/vmtest/guest.conf", 0o644, []byte("x=1\n"))
	c.File("odd", 0o600, []byte("abc")) // length not a multiple of 4
	c.Dir("mnt/host")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	want := map[string]struct {
		mode uint64
		data string
	}{
		"bin":                   {modeDir | 0o755, ""},
		"bin/busybox":           {modeFile | 0o755, "ELF..."},
		"bin/sh":                {modeLink | 0o777, "busybox"},
		"etc":                   {modeDir | 0o755, ""},
		"etc/vmtest":            {modeDir | 0o755, ""},
		"etc/vmtest/guest.conf": {modeFile | 0o644, "x=1\n"},
		"odd":                   {modeFile | 0o600, "abc"},
		"mnt":                   {modeDir | 0o755, ""},
		"mnt/host":              {modeDir | 0o755, ""},
	}
	if len(got) != len(want) {
		t.Errorf("%d entries, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s: got %+v (present %v), want %+v", name, g, ok, w)
		}
	}
}

func TestRunPattern(t *testing.T) {
	if got, want := runPattern("TestX/6.12/a+b"), `^TestX$/^6\.12$/^a\+b$`; got != want {
		t.Errorf("runPattern = %q, want %q", got, want)
	}
}

func TestSkipReason(t *testing.T) {
	console := []string{
		"=== RUN   TestX",
		"--- SKIP: TestX (0.00s)",
		"    x_test.go:12: needs ublk",
		"    x_test.go:13: really",
		"PASS",
	}
	if got := skipReason(console); got != "x_test.go:12: needs ublk; x_test.go:13: really" {
		t.Errorf("skipReason = %q", got)
	}
	streamed := []string{"=== RUN   TestX", "    x_test.go:9: before", "--- SKIP: TestX (0.00s)", "PASS"}
	if got := skipReason(streamed); got != "x_test.go:9: before" {
		t.Errorf("skipReason(streamed) = %q", got)
	}
	if got := skipReason([]string{"PASS"}); !strings.Contains(got, "no reason") {
		t.Errorf("skipReason without lines = %q", got)
	}
}

func TestShellQuote(t *testing.T) {
	if got := shellQuote(`it's "x" $y`); got != `'it'\''s "x" $y'` {
		t.Errorf("shellQuote = %s", got)
	}
}

// A guest only passes with the pass exit code AND the pass marker.
func TestGuestResultOK(t *testing.T) {
	pass := codePass<<1 | 1
	for _, tc := range []struct {
		r    guestResult
		want bool
	}{
		{guestResult{verdict: "pass", exit: pass}, true},
		{guestResult{verdict: "pass", exit: 0}, false},
		{guestResult{verdict: "", exit: pass}, false},
		{guestResult{verdict: "fail", exit: codeFail<<1 | 1}, false},
	} {
		if got := tc.r.ok(); got != tc.want {
			t.Errorf("%+v ok() = %v", tc.r, got)
		}
	}
}

func TestCrashedBeforeInit(t *testing.T) {
	oops := []string{"[    1.80] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI", "[    1.81] Kernel panic - not syncing: Fatal exception in interrupt"}
	afterInit := append([]string{"[    2.10] Run /init as init process", initMarker}, oops...)
	for _, tc := range []struct {
		name string
		r    guestResult
		want bool
	}{
		{"oops in early boot", guestResult{console: oops}, true},
		{"panic after /init started", guestResult{console: afterInit}, false},
		{"plain poweroff, no crash", guestResult{console: []string{"[    1.0] booting"}}, false},
		{"verdict seen", guestResult{console: oops, verdict: "fail"}, false},
		{"harness error (timeout)", guestResult{console: oops, err: context.DeadlineExceeded}, false},
	} {
		if got := tc.r.crashedBeforeInit(); got != tc.want {
			t.Errorf("%s: crashedBeforeInit() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
