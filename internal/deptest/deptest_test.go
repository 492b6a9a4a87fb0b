package deptest

import (
	"slices"
	"testing"
)

func TestForbidden(t *testing.T) {
	deps := []string{"fmt", "go.etcd.io/etcd/client/v3", "google.golang.org/grpcx", "github.com/a/b"}
	bad := map[string]string{
		"go.etcd.io/etcd":        "etcd",
		"google.golang.org/grpc": "grpc", // grpcx is another module
		"github.com/a/b":         "exact",
		"github.com/a":           "parent",
	}
	got := Forbidden(deps, bad)
	want := []string{"github.com/a", "github.com/a/b", "go.etcd.io/etcd"}
	if !slices.Equal(got, want) {
		t.Fatalf("Forbidden = %v, want %v", got, want)
	}
}

func TestChain(t *testing.T) {
	g := Graph{Order: []string{"x", "y/z", "b", "a", "main"}, Imports: map[string][]string{
		"main": {"a", "b"}, "a": {"x"}, "b": {"y/z"}, "y/z": {"x"}, "x": nil,
	}}
	if got := g.Chain("y"); !slices.Equal(got, []string{"main", "b", "y/z"}) {
		t.Errorf("Chain(y) = %v", got)
	}
	if got := g.Chain("x"); !slices.Equal(got, []string{"main", "a", "x"}) {
		t.Errorf("Chain(x) = %v", got)
	}
	if got := g.Chain("q"); got != nil {
		t.Errorf("Chain(q) = %v", got)
	}
}

func TestDepsOfThisPackage(t *testing.T) {
	g := Checker{}.Deps(t)
	if g.Order[len(g.Order)-1] != "github.com/fabraid/fabraid/internal/deptest" || !slices.Contains(g.Order, "os/exec") {
		t.Fatalf("deps of deptest = %v: want os/exec, itself last", g.Order)
	}
	if c := g.Chain("os/exec"); len(c) != 2 {
		t.Fatalf("Chain(os/exec) = %v", c)
	}
}
