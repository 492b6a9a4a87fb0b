// Command demo is fabraid's main job for now (make demo): it boots a qemu
// guest on Debian's 6.12 kernel with the kernel modules fabraid uses, and
// runs `fabraid doctor` in it, so anyone can see on a stock machine what a
// node needs and that the real kernel provides it. Later issues grow it
// into a virtual cluster of several guests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
)

// guestScript sets up the node identity and runs doctor; it is the guest's
// payload, run by busybox sh.
const guestScript = `#!/bin/sh
set -e
mkdir -p /etc/nvme
id=$(cat /proc/sys/kernel/random/uuid)
echo "nqn.2014-08.org.nvmexpress:uuid:$id" > /etc/nvme/hostnqn
echo "$id" > /etc/nvme/hostid
echo "== fabraid version"
fabraid version
echo "== fabraid doctor (Debian $(uname -r))"
fabraid doctor
`

func main() {
	fabraid := flag.String("fabraid", "bin/fabraid", "static fabraid binary to run in the guest")
	kernel := flag.String("kernel", vmtest.Kernel612, "guest kernel series (6.12 or 6.1)")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*fabraid, *kernel, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(fabraid, kernel string, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abs, err := filepath.Abs(fabraid)
	if err != nil {
		return err
	}
	script, err := os.CreateTemp("", "fabraid-demo-*.sh")
	if err != nil {
		return err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString(guestScript); err != nil {
		return err
	}
	script.Close()

	modules := []string{"configfs", "nvmet", "nvmet_tcp", "nvme_tcp"}
	if kernel == vmtest.Kernel612 {
		modules = append(modules, "ublk_drv")
	}
	fmt.Printf("demo: booting one guest on Debian's %s kernel (qemu, software emulation: ~10 s)\n", kernel)
	start := time.Now()
	outcomes, err := vmtest.Boot(ctx, vmtest.BootConfig{
		Guests: []vmtest.GuestConfig{{
			Name: "node1", Kernel: kernel, Modules: modules,
			Disks: []vmtest.Disk{{Size: 256 << 20, Serial: "demo-nvme0"}},
			Files: map[string]string{"/usr/bin/fabraid": abs, "/vmtest/demo.sh": script.Name()},
		}},
		Timeout: timeout,
		Command: []string{"/bin/sh", "/vmtest/demo.sh"},
		Log:     func(guest, line string) { printGuestLine(guest, line) },
	})
	if err != nil {
		return err
	}
	o := outcomes[0]
	fmt.Printf("demo: guest %s finished in %v\n", o.Name, time.Since(start).Round(100*time.Millisecond))
	if !o.Passed {
		return fmt.Errorf("%s", o.Reason)
	}
	fmt.Println("demo: ok — the guest kernel has every piece fabraid needs (see the doctor report above)")
	return nil
}

// printGuestLine shows the guest's own output and hides firmware noise.
func printGuestLine(guest, line string) {
	if strings.Contains(line, "\x1b") || strings.HasPrefix(line, "FABRAID-VMTEST-VERDICT") || strings.HasPrefix(line, "SeaBIOS") || strings.HasPrefix(line, "Booting from") || strings.TrimSpace(line) == "" {
		return
	}
	fmt.Printf("[%s] %s\n", guest, line)
}
