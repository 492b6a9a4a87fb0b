//go:build linux

package ublk

import (
	"bytes"
	"os"
	"testing"

	"github.com/fabraid/fabraid/internal/vmtest"
	"golang.org/x/sys/unix"
)

func TestIntegrationSmoke(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{{Name: "a", Kernel: vmtest.Kernel612, Modules: []string{"ublk_drv"}}}},
		func(t *testing.T, g *vmtest.Env) {
			ctl, err := OpenControl()
			if err != nil {
				t.Fatal(err)
			}
			defer ctl.Close()
			t.Logf("features %#x %s", uint64(ctl.Features()), ctl.Features())
			mem := NewMem(8 << 20)
			d, err := Create(ctl, mem, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("device %s flags %s", d.BlockPath(), d.Flags())
			f, err := os.OpenFile(d.BlockPath(), os.O_RDWR|unix.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			buf, _ := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			if _, err := f.WriteAt(buf, 4096*3); err != nil {
				t.Fatal(err)
			}
			got, _ := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if _, err := f.ReadAt(got, 4096*3); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, buf) {
				t.Fatal("mismatch")
			}
			if !bytes.Equal(mem.data[4096*3:4096*3+1<<16], buf) {
				t.Fatal("backend mismatch")
			}
			f.Close()
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			ids, _ := List()
			if len(ids) != 0 {
				t.Fatalf("left behind %v", ids)
			}
		})
}
