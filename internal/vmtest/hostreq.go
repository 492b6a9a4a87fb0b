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

// Host requests let a guest-side test ask the host for things only qemu
// can do, such as pulling a disk out of the running guest. The guest writes
// "<guest>.hostreq.<n>" into the share; the host carries it out through
// qemu's QMP socket and answers in "<guest>.hostresp.<n>" ("ok" or the
// error). One request at a time per guest.

// RemoveDisk hot-unplugs the guest's disk i (Env.Disks[i]) as if it were
// pulled out: qemu's device_del of its virtio-blk PCI device. It returns
// once the guest's kernel has dropped the block device.
func (e *Env) RemoveDisk(t testing.TB, i int) {
	t.Helper()
	if i < 0 || i >= len(e.Disks) {
		t.Fatalf("vmtest: RemoveDisk(%d): guest has %d disks", i, len(e.Disks))
	}
	if err := e.hostRequest(fmt.Sprintf("device_del disk%d", i)); err != nil {
		t.Fatalf("vmtest: remove disk %d (%s): %v", i, e.Disks[i], err)
	}
	sysBlock := "/sys/block/" + filepath.Base(e.Disks[i])
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(sysBlock); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("vmtest: %s still present 60 s after device_del", sysBlock)
}

func (e *Env) hostRequest(req string) error {
	e.reqSeq++
	n := strconv.Itoa(e.reqSeq)
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
func serveHostRequests(ctx context.Context, shared string, guests []*qemuGuest, log func(string, string)) func() {
	byName := map[string]*qemuGuest{}
	for _, g := range guests {
		byName[g.name] = g
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		done := map[string]bool{}
		for ctx.Err() == nil {
			reqs, _ := filepath.Glob(filepath.Join(shared, "*.hostreq.*"))
			for _, r := range reqs {
				if done[r] {
					continue
				}
				done[r] = true
				name, seq, _ := strings.Cut(filepath.Base(r), ".hostreq.")
				answer := "ok"
				if err := handleHostRequest(byName[name], r); err != nil {
					answer = err.Error()
				}
				if log != nil {
					log(name, fmt.Sprintf("vmtest: host request %s: %s", filepath.Base(r), answer))
				}
				os.WriteFile(filepath.Join(shared, name+".hostresp."+seq), []byte(answer+"\n"), 0o644)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func handleHostRequest(g *qemuGuest, path string) error {
	if g == nil {
		return errors.New("request from an unknown guest")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	verb, arg, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	switch verb {
	case "device_del":
		return qmpCommand(g.qmp, "device_del", map[string]string{"id": arg})
	default:
		return fmt.Errorf("unknown host request %q", verb)
	}
}

// qmpCommand runs one QMP command on qemu's control socket.
func qmpCommand(sock, command string, args any) error {
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
	if err := enc.Encode(map[string]any{"execute": command, "arguments": args}); err != nil {
		return err
	}
	return reply()
}
