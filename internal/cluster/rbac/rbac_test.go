package rbac

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
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

// TestEveryPrefixInTable: every key and prefix package keys declares
// (its string constants, read from keys.go) has a row in Table, so a new
// prefix cannot be added without deciding who may write it (a prefix
// that is in no role is refused to every client-only node).
func TestEveryPrefixInTable(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../keys/keys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != len(vs.Names) {
			return true
		}
		for i, v := range vs.Values {
			// "lit" or Prefix + "lit"
			var lit *ast.BasicLit
			switch e := v.(type) {
			case *ast.BasicLit:
				lit = e
			case *ast.BinaryExpr:
				lit, _ = e.Y.(*ast.BasicLit)
			}
			if lit == nil || lit.Kind != token.STRING {
				continue
			}
			s, _ := strconv.Unquote(lit.Value)
			if _, ok := v.(*ast.BinaryExpr); ok {
				s = keys.Prefix + s
			}
			consts[vs.Names[i].Name] = s
		}
		return true
	})
	if len(consts) < 10 {
		t.Fatalf("read %d constants from keys.go: %v", len(consts), consts)
	}
	for name, k := range consts {
		if k == keys.Prefix {
			continue
		}
		found := false
		for _, w := range Table {
			if strings.HasPrefix(w.Key, k) {
				found = true
			}
		}
		if !found {
			t.Errorf("keys.%s (%s) has no row in rbac.Table: decide who may write it", name, k)
		}
	}
}
