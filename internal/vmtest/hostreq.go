package vmtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Host requests let a guest-side test ask the host for things only the
// host can do: pull a disk out of the running guest or put it back (qemu's
// QMP socket), cut another guest's power and boot it again, partition the
// hub's network. The guest writes "<guest>.hostreq.<boot>.<n>" into the
// share; the host carries it out and answers in "<guest>.hostresp.<boot>.<n>"
// ("ok" or the error). One request at a time per guest; requests are
// carried out one after the other, in the order the host finds them.

// RemoveDisk hot-unplugs the guest's disk i (Env.Disks[i]) as if it were
// pulled out: qemu's device_del of its virtio-blk PCI device. It returns
// once the guest's kernel has dropped the block device and its /dev node
// (devtmpfs removes the node a little after sysfs).
func (e *Env) RemoveDisk(t testing.TB, i int) {
	t.Helper()
	if i < 0 || i >= len(e.Disks) {
		t.Fatalf("vmtest: RemoveDisk(%d): guest has %d disks", i, len(e.Disks))
	}
	if err := e.hostRequest(fmt.Sprintf("device_del %d", i)); err != nil {
		t.Fatalf("vmtest: remove disk %d (%s): %v", i, e.Disks[i], err)
	}
	sysBlock := "/sys/block/" + filepath.Base(e.Disks[i])
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		_, errSys := os.Stat(sysBlock)
		_, errDev := os.Stat(e.Disks[i])
		if errors.Is(errSys, os.ErrNotExist) && errors.Is(errDev, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("vmtest: %s or %s still present 60 s after device_del", sysBlock, e.Disks[i])
}

// AddDisk plugs disk i back in after RemoveDisk: qemu's device_add of a
// virtio-blk PCI device with the same image, device id and serial. It
// returns the disk's device path once the guest's kernel has it, which
// may differ from the one before (the kernel picks the first free vdX);
// Env.Disks[i] is updated to it.
func (e *Env) AddDisk(t testing.TB, i int) string {
	t.Helper()
	if i < 0 || i >= len(e.Disks) {
		t.Fatalf("vmtest: AddDisk(%d): guest has %d disks", i, len(e.Disks))
	}
	if err := e.hostRequest(fmt.Sprintf("device_add %d", i)); err != nil {
		t.Fatalf("vmtest: add disk %d: %v", i, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if dev := blockBySerial(e.serials[i]); dev != "" {
			if _, err := os.Stat(dev); err == nil {
				e.Disks[i] = dev
				return dev
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("vmtest: no block device with serial %q 60 s after device_add", e.serials[i])
	return ""
}

// blockBySerial returns /dev/<name> of the virtio disk with that serial.
func blockBySerial(serial string) string {
	devs, _ := filepath.Glob("/sys/block/vd*/serial")
	for _, p := range devs {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == serial {
			return "/dev/" + filepath.Base(filepath.Dir(p))
		}
	}
	return ""
}

func (e *Env) hostRequest(req string) error {
	e.reqSeq++
	n := fmt.Sprintf("%d.%d", e.BootNum, e.reqSeq)
	tmp := filepath.Join(e.Shared, e.Name+".tmpreq."+n)
	if err := os.WriteFile(tmp, []byte(req), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(e.Shared, e.Name+".hostreq."+n)); err != nil {
		return err
	}
	resp := e.Name + ".hostresp." + n
	for {
		names, err := listDir(e.Shared)
		if err != nil {
			return err
		}
		if names[resp] {
			b, err := os.ReadFile(filepath.Join(e.Shared, resp))
			if err != nil {
				return err
			}
			if r := strings.TrimSpace(string(b)); r != "ok" {
				return errors.New(r)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveHostRequests polls the share for guests' requests until stopped.
func (f *fleet) serveHostRequests() func() {
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		done := map[string]bool{}
		for ctx.Err() == nil {
			reqs, _ := filepath.Glob(filepath.Join(f.shared, "*.hostreq.*"))
			for _, r := range reqs {
				if !done[r] {
					done[r] = true
					f.serveHostRequest(r)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// serveHostRequest carries out one request and answers it. A request of
// an earlier boot of its guest (written just before a power cut) is
// dropped unanswered: nobody waits for it any more.
func (f *fleet) serveHostRequest(path string) {
	name, seq, _ := strings.Cut(filepath.Base(path), ".hostreq.")
	bootStr, _, _ := strings.Cut(seq, ".")
	boot, _ := strconv.Atoi(bootStr)
	i, err := f.index(name)
	if err != nil || !f.current(i, boot) {
		os.Remove(path)
		return
	}
	answer := "ok"
	req, err := os.ReadFile(path)
	if err == nil {
		err = f.handleHostRequest(i, strings.TrimSpace(string(req)))
	}
	if err != nil {
		answer = err.Error()
	}
	if f.log != nil {
		f.log(name, fmt.Sprintf("vmtest: host request %q: %s", req, answer))
	}
	os.WriteFile(filepath.Join(f.shared, name+".hostresp."+seq), []byte(answer+"\n"), 0o644)
}

func (f *fleet) handleHostRequest(i int, req string) error {
	g := f.guests[i]
	verb, arg, _ := strings.Cut(req, " ")
	args := strings.Fields(arg)
	switch verb {
	case "device_del":
		d, err := g.diskIndex(arg)
		if err != nil {
			return err
		}
		return qmpCommand(g.qmp, "device_del", map[string]string{"id": fmt.Sprintf("disk%d", d)})
	case "device_add":
		d, err := g.diskIndex(arg)
		if err != nil {
			return err
		}
		return g.plugDisk(d)
	case "kill":
		return f.kill(g.name, arg)
	case "boot":
		return f.boot(arg)
	case "reboot":
		return f.requestReboot(i)
	case "partition", "heal":
		return f.partition(verb == "partition", args)
	case "partition_ports":
		return f.partitionPorts(args)
	case "isolate":
		return f.isolate(args)
	default:
		return fmt.Errorf("unknown host request %q", verb)
	}
}

// qmpCommand runs one QMP command on qemu's control socket.
func qmpCommand(sock, command string, args any) error {
	return qmpCommands(sock, qmpCall{command, args})
}

type qmpCall struct {
	command string
	args    any
}

// qmpCommands runs QMP commands one after the other on one connection and
// stops at the first error.
func qmpCommands(sock string, calls ...qmpCall) error {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", sock, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	enc := json.NewEncoder(c)
	// reply reads messages until a command's reply, skipping the greeting
	// and asynchronous events.
	reply := func() error {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return fmt.Errorf("qmp: %w", err)
			}
			var m struct {
				Return json.RawMessage        `json:"return"`
				Error  *struct{ Desc string } `json:"error"`
				QMP    json.RawMessage        `json:"QMP"`
				Event  string                 `json:"event"`
			}
			if err := json.Unmarshal(line, &m); err != nil {
				return fmt.Errorf("qmp: %q: %w", line, err)
			}
			switch {
			case m.Error != nil:
				return fmt.Errorf("qmp: %s", m.Error.Desc)
			case m.Return != nil:
				return nil
			}
		}
	}
	if err := enc.Encode(map[string]any{"execute": "qmp_capabilities"}); err != nil {
		return err
	}
	if err := reply(); err != nil {
		return err
	}
	for _, c := range calls {
		if err := enc.Encode(map[string]any{"execute": c.command, "arguments": c.args}); err != nil {
			return err
		}
		if err := reply(); err != nil {
			return fmt.Errorf("%s: %w", c.command, err)
		}
	}
	return nil
}

// diskIndex parses a disk number of a host request.
func (g *qemuGuest) diskIndex(arg string) (int, error) {
	d, err := strconv.Atoi(arg)
	if err != nil || d < 0 || d >= len(g.disks) {
		return 0, fmt.Errorf("no disk %q (guest %s has %d)", arg, g.name, len(g.disks))
	}
	return d, nil
}

// plugDisk puts disk d back after device_del: a new block node on the same
// image (qemu deleted the -drive backend with its device) and a virtio-blk
// device with the same id and serial. qemu finishes a device_del only
// after the guest released the device, a little after the guest's kernel
// dropped it; until then the id (and the image's lock) is taken, so
// device_add retries.
func (g *qemuGuest) plugDisk(d int) error {
	g.plugs++
	node := fmt.Sprintf("d%dp%d", d, g.plugs)
	err := qmpCommand(g.qmp, "blockdev-add", map[string]any{
		"driver": "raw", "node-name": node,
		"file":  map[string]any{"driver": "file", "filename": g.disks[d], "aio": "threads"},
		"cache": map[string]any{"direct": false, "no-flush": true}, // as -drive cache=unsafe
	})
	if err != nil {
		return err
	}
	dev := map[string]any{"driver": "virtio-blk-pci", "id": fmt.Sprintf("disk%d", d), "drive": node, "serial": g.serials[d]}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := qmpCommand(g.qmp, "device_add", dev)
		if err == nil {
			return nil
		}
		// The old device's id, or the image lock of its block node, is
		// still held until qemu has finished the device_del.
		busy := strings.Contains(err.Error(), "Duplicate") || strings.Contains(err.Error(), `Failed to get "write" lock`)
		if !busy || time.Now().After(deadline) {
			qmpCommand(g.qmp, "blockdev-del", map[string]string{"node-name": node})
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
