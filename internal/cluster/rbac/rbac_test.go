package rbac

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// covers says whether one of perms lets a writer put key.
func covers(perms []Perm, key string) bool {
	for _, p := range perms {
		if p.Type != clientv3.PermissionType(clientv3.PermReadWrite) && p.Type != clientv3.PermissionType(clientv3.PermWrite) {
			continue
		}
		if (p.End == "" && key == p.Key) || (p.End != "" && key >= p.Key && key < p.End) {
			return true
		}
	}
	return false
}

// TestTable: the permissions say what Table (and docs/cluster.md) says:
// a client-only node "x" writes its own keys, not node "y"'s, the shared
// prefixes, and nothing of a members-only row.
func TestTable(t *testing.T) {
	client := append(NodePerms(), OwnPerms("x")...)
	for _, w := range Table {
		if !strings.HasPrefix(w.Key, keys.Prefix) {
			if !w.Member {
				t.Errorf("%s: not a key, but clients may", w.Key)
			}
			continue
		}
		p, _, _ := strings.Cut(w.Key, "<")
		switch {
		case w.Member:
			if covers(client, p+"x") || covers(client, p) {
				t.Errorf("%s: members only, but a client may write it", w.Key)
			}
		case strings.HasPrefix(w.Client, "its own key only"):
			if !covers(client, p+"x") || covers(client, p+"y") || covers(client, p+"xy") {
				t.Errorf("%s: a client writes %sx %v, %sy %v, %sxy %v; want only its own", w.Key,
					p, covers(client, p+"x"), p, covers(client, p+"y"), p, covers(client, p+"xy"))
			}
		default:
			if !covers(NodePerms(), p+"y/z") {
				t.Errorf("%s: shared, but the node role does not write it", w.Key)
			}
		}
	}
	for _, k := range []string{keys.Cluster, keys.Token("t"), "/other", keys.Prefix + "new/x"} {
		if covers(client, k) {
			t.Errorf("a client writes %s", k)
		}
	}
	if r := NodePerms()[0]; r.Key != keys.Prefix || r.End != clientv3.GetPrefixRangeEnd(keys.Prefix) || r.Type != clientv3.PermissionType(clientv3.PermRead) {
		t.Errorf("the node role's read is %+v, want all of %s", r, keys.Prefix)
	}
	if err := CheckName(RootUser); err == nil {
		t.Error("node name root accepted")
	}
}
