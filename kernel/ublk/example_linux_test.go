//go:build linux

package ublk_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/fabraid/fabraid/kernel/ublk"
)

// Serve a 1 GiB in-memory device until SIGTERM, then remove it.
func ExampleCreate() {
	ctl, err := ublk.OpenControl()
	if err != nil {
		log.Fatal(err) // errors.Is(err, ublk.ErrNotSupported): no ublk_drv
	}
	defer ctl.Close()
	dev, err := ublk.Create(ctl, ublk.NewMem(1<<30), &ublk.Config{ID: ublk.AnyID, Queues: 2})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving %s", dev.BlockPath())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := dev.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Re-attach to device 0 after its server died (SIGKILL, crash): the I/O
// the kernel held meanwhile is reissued to this process.
func ExampleRecover() {
	ctl, err := ublk.OpenControl()
	if err != nil {
		log.Fatal(err)
	}
	defer ctl.Close()
	backend, err := ublk.OpenFile("/var/tmp/ublk0.img", 0) // the same data the old server had
	if err != nil {
		log.Fatal(err)
	}
	dev, err := ublk.Recover(ctl, 0, backend, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
}
