package daemon

import (
	"strings"
	"testing"
)

func TestOwnStacks(t *testing.T) {
	dump := "goroutine 1 [select]:\nmain.main()\n\t/x/main.go:1\n\n" +
		"goroutine 7 [syscall]:\nsyscall.Syscall()\ngithub.com/fabraid/fabraid/kernel/nvmf.(*Host).Connect()\n\n" +
		"goroutine 9 [chan receive]:\ngo.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).run()\n\n" +
		"goroutine 12 [IO wait]:\ngithub.com/fabraid/fabraid/internal/daemon.(*Daemon).reconcile()\n"
	got := ownStacks(dump, 1<<10)
	if !strings.Contains(got, "goroutine 7 ") || !strings.Contains(got, "goroutine 12 ") {
		t.Errorf("own goroutines missing:\n%s", got)
	}
	if strings.Contains(got, "goroutine 1 ") || strings.Contains(got, "etcdserver") {
		t.Errorf("foreign goroutines kept:\n%s", got)
	}
	if got := ownStacks(dump, 130); !strings.Contains(got, "goroutine 7 ") || strings.Contains(got, "goroutine 12 ") || !strings.Contains(got, "left out") {
		t.Errorf("bound not kept:\n%s", got)
	}
}
