package vmtest

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// directIO writes (data != nil) or reads one 4 KiB block at off of dev
// with O_DIRECT; a write is followed by fsync.
func directIO(t *testing.T, dev string, off int64, data []byte) []byte {
	t.Helper()
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // page-aligned
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if data == nil {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatalf("read %s: %v", dev, err)
		}
		return buf
	}
	copy(buf, data)
	if _, err := f.WriteAt(buf, off); err != nil {
		t.Fatalf("write %s: %v", dev, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", dev, err)
	}
	return buf
}

// TestIntegrationPowerCut cuts the power of guest b (SIGKILL of its qemu)
// after it wrote a block with O_DIRECT and fsync, and boots it again: the
// second boot runs the test function again with BootNum 2, reads the
// block back from the same disk image, and is reachable at the same
// address; b's events of the killed boot are gone.
func TestIntegrationPowerCut(t *testing.T) {
	block := bytes.Repeat([]byte("fabraid power cut "), 4096/18+1)[:4096]
	Run(t, Options{Timeout: 2 * time.Minute, Guests: []GuestConfig{
		{Name: "a"},
		{Name: "b", Disks: []Disk{{Size: 8 << 20}}},
	}}, func(t *testing.T, g *Env) {
		switch {
		case g.Name == "a":
			if g.BootNum != 1 {
				t.Fatalf("a: BootNum %d, want 1", g.BootNum)
			}
			g.Wait(t, "b", "written")
			g.Kill(t, "b")
			if names, _ := listDir(g.Shared); names["b.event.written"] {
				t.Errorf("b's event of its killed boot is still there")
			}
			g.Boot(t, "b")
			g.Wait(t, "b", "up")
			c, err := net.DialTimeout("tcp", net.JoinHostPort(g.Addr("b"), "7000"), 30*time.Second)
			if err != nil {
				t.Fatalf("rebooted b unreachable: %v", err)
			}
			c.Write([]byte("hello"))
			c.Close()
			g.Wait(t, "b", "checked")
		case g.BootNum == 1:
			directIO(t, g.Disks[0], 1<<20, block)
			g.Signal(t, "written")
			g.Wait(t, "a", "never") // killed here; if not, fails when a ends
			t.Fatal("boot 1 of b was not killed")
		default:
			if g.BootNum != 2 {
				t.Fatalf("b: BootNum %d, want 2", g.BootNum)
			}
			if got := directIO(t, g.Disks[0], 1<<20, nil); !bytes.Equal(got, block) {
				t.Fatalf("block written before the power cut reads back as %q...", got[:32])
			}
			l, err := net.Listen("tcp", ":7000")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			g.Signal(t, "up")
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(c)
			c.Close()
			if string(got) != "hello" {
				t.Errorf("got %q from a, want hello", got)
			}
			g.Signal(t, "checked")
		}
	})
}
