package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/pki"
)

func TestNeedSpace(t *testing.T) {
	const need = 80_000_000
	for _, c := range []struct {
		name     string
		dir, at  string
		free     uint64
		want     []string // in the error; nil: no error
		wantNone bool
	}{
		{name: "plenty", dir: "/var/lib/fabraid/etcd", at: "/var/lib/fabraid/etcd", free: 10 * need, wantNone: true},
		{name: "exactly", dir: "/d", at: "/d", free: need, wantNone: true},
		{name: "one byte short", dir: "/d", at: "/d", free: need - 1,
			want: []string{"/d has 80.0 MB free; a new etcd member needs 80.0 MB there (64.0 MB preallocated for its write-ahead log, 16.0 MB for its database)"}},
		{name: "full", dir: "/d", at: "/d", free: 0, want: []string{"/d has 0.0 MB free", "needs 80.0 MB"}},
		{name: "not made yet", dir: "/var/lib/fabraid/etcd", at: "/var/lib/fabraid", free: 33_554_432,
			want: []string{"/var/lib/fabraid/etcd (on the file system of /var/lib/fabraid) has 33.6 MB free", "needs 80.0 MB"}},
	} {
		err := needSpace(c.dir, c.at, c.free, need)
		if c.wantNone {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrNoSpace) {
			t.Errorf("%s: %v, want ErrNoSpace", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
	if got := newMemberBytes(); got != 80_000_000 {
		t.Errorf("newMemberBytes = %d, want etcd's 64 MB WAL segment and 16 MB", got)
	}
}

// freeBytes of a directory that does not exist yet is its nearest
// existing parent's.
func TestFreeBytesNearestParent(t *testing.T) {
	dir := t.TempDir()
	free, at, err := freeBytes(filepath.Join(dir, "etcd", "member"))
	if err != nil || at != dir || free == 0 {
		t.Errorf("freeBytes = %d, %q, %v; want >0 at %s", free, at, err, dir)
	}
}

// smallFS mounts a tmpfs of size bytes on a new temporary directory (as
// root; the test is skipped otherwise) and detaches it when the test ends.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs (no CAP_SYS_ADMIN here?): %v", err)
	}
	// Detached, not unmounted: etcd files left open after a recovered
	// panic keep the file system busy until the test process ends.
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// testTLS writes a cluster CA and node certificate for member name.
func testTLS(t *testing.T, name string) pki.Files {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("space-test", now)
	if err != nil {
		t.Fatal(err)
	}
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(key.Public(), name, []net.IP{net.ParseIP("127.0.0.1")}, now)
	if err != nil {
		t.Fatal(err)
	}
	f := pki.Files{Dir: filepath.Join(t.TempDir(), "tls")}
	if err := f.Write(ca.CertPEM, cert, keyPEM, ca.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return f
}

// A new member (cluster init, or a join) in a state directory with less
// free space than etcd preallocates for its WAL is refused with an error
// naming the directory, the space needed and the space free; etcd, which
// would panic there ("failed to create WAL"), is not started.
func TestStartRefusesSmallFileSystem(t *testing.T) {
	fs := smallFS(t, "32m")
	dir := filepath.Join(fs, "etcd")
	for _, join := range []bool{false, true} {
		peer, client := etcdtest.FreePort(t), etcdtest.FreePort(t)
		initial := ""
		if join {
			initial = fmt.Sprintf("m0=https://127.0.0.1:%d,m1=https://127.0.0.1:%d", etcdtest.FreePort(t), peer)
		}
		_, err := Start(context.Background(), Config{
			Name: "m1", Dir: dir, TLS: testTLS(t, "m1"), InitialCluster: initial,
			PeerURL: fmt.Sprintf("https://127.0.0.1:%d", peer), ClientURL: fmt.Sprintf("https://127.0.0.1:%d", client),
			ReadyTimeout: 20 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("join %v: Start = %v, want ErrNoSpace", join, err)
		}
		for _, w := range []string{dir, "needs 80.0 MB", "33.6 MB free"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q lacks %q", err, w)
			}
		}
	}
}

// A member that restarts has its WAL: it preallocates nothing to start
// and is not refused for a full disk.
func TestCheckSpaceRestart(t *testing.T) {
	fs := smallFS(t, "1m")
	w := filepath.Join(fs, "etcd", "member", "wal")
	if err := os.MkdirAll(w, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkSpace(filepath.Join(fs, "etcd")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("no WAL yet: %v, want ErrNoSpace", err)
	}
	if err := os.WriteFile(filepath.Join(w, "0000000000000000-0000000000000000.wal"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkSpace(filepath.Join(fs, "etcd")); err != nil {
		t.Errorf("with a WAL: %v", err)
	}
}

// A new member on a file system that allocates nothing on fallocate
// (ramfs here: it reports no free space at all) is not refused: etcd makes
// its WAL segment a sparse file there.
func TestCheckSpaceSparse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a ramfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("ramfs", dir, "ramfs", 0, ""); err != nil {
		t.Skipf("cannot mount a ramfs (no CAP_SYS_ADMIN here?): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if free, _, err := freeBytes(dir); err != nil || free != 0 {
		t.Logf("ramfs free = %d, %v", free, err)
	}
	if err := checkSpace(filepath.Join(dir, "etcd")); err != nil {
		t.Errorf("ramfs: %v", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("the probe left %v behind", names)
	}
}

// etcd panics in the goroutine that calls embed.StartEtcd when it cannot
// create its WAL; startEtcd returns that as an error, so the daemon
// survives it.
func TestStartEtcdPanicIsAnError(t *testing.T) {
	fs := smallFS(t, "32m")
	cfg := embed.NewConfig()
	cfg.Name = "m1"
	cfg.Dir = filepath.Join(fs, "etcd")
	u := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{u}, []url.URL{u}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{u}, []url.URL{u}
	cfg.InitialCluster = cfg.Name + "=" + u.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.Logger = "zap"
	e, err := startEtcd(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if e != nil {
		e.Close()
	}
	if !errors.Is(err, ErrPanicked) || !strings.Contains(err.Error(), "failed to create WAL") {
		t.Fatalf("startEtcd on a 32 MB file system = %v, want ErrPanicked (failed to create WAL)", err)
	}
}
