package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
)

const tb = int64(1) << 40

// uniform returns n nodes "a", "b", ... with per drives of size each.
func uniform(n, per int, size int64) []Node {
	var out []Node
	for i := range n {
		name := string(rune('a' + i))
		node := Node{Name: name}
		for j := range per {
			id := fmt.Sprintf("%s%d", name, j)
			node.Free = append(node.Free, Drive{ID: id, Serial: "S" + id, Size: size})
		}
		out = append(out, node)
	}
	return out
}

func TestPlace(t *testing.T) {
	mixed := uniform(3, 2, tb)
	mixed[0].Free = append(mixed[0].Free, Drive{ID: "a-big", Size: 2 * tb})
	mixed[1].Free = append(mixed[1].Free, Drive{ID: "b-big", Size: 2 * tb})
	allBig := uniform(3, 2, tb)
	for i := range allBig {
		allBig[i].Free = append(allBig[i].Free, Drive{ID: allBig[i].Name + "-big", Size: 2 * tb})
	}
	loaded := uniform(3, 2, tb)
	loaded[0].Owned, loaded[1].Owned, loaded[2].Owned = 2, 1, 1
	drainedA := uniform(3, 2, tb)
	drainedA[0].NoOwner = true
	allDrained := uniform(3, 2, tb)
	for i := range allDrained {
		allDrained[i].NoOwner = true
	}
	racks := []Node{
		{Name: "n1", Domain: "rack1", Free: []Drive{{ID: "x1", Size: tb}, {ID: "x2", Size: tb}}},
		{Name: "n2", Domain: "rack1", Free: []Drive{{ID: "y1", Size: tb}, {ID: "y2", Size: tb}}},
		{Name: "n3", Domain: "rack2", Free: []Drive{{ID: "z1", Size: tb}, {ID: "z2", Size: tb}}},
	}
	tests := []struct {
		name    string
		nodes   []Node
		req     Request
		members string // node:drive per slot
		owner   string
		size    int64
		err     string // substring of the refusal
	}{
		{name: "4+2 over 3 nodes x 2", nodes: uniform(3, 2, tb), req: Request{Name: "v", K: 4, M: 2},
			members: "a:a0 b:b0 c:c0 a:a1 b:b1 c:c1", owner: "a", size: tb},
		{name: "a drained node holds members but does not own", nodes: drainedA, req: Request{Name: "v", K: 4, M: 2},
			members: "a:a0 b:b0 c:c0 a:a1 b:b1 c:c1", owner: "b", size: tb},
		{name: "every node drained: no owner", nodes: allDrained, req: Request{Name: "v", K: 4, M: 2},
			err: "drained"},
		{name: "4+2 over 6 nodes spreads one per node", nodes: uniform(6, 2, tb), req: Request{Name: "v", K: 4, M: 2},
			members: "a:a0 b:b0 c:c0 d:d0 e:e0 f:f0", owner: "a", size: tb},
		{name: "4+2 refused on 2 nodes", nodes: uniform(2, 3, tb), req: Request{Name: "v", K: 4, M: 2},
			err: `volume "v": 4+2 needs 3 nodes with 2 free drives each, or 6 nodes with 1 (at most 2 from one node); have 2 nodes (a: 3 free, b: 3 free)`},
		{name: "4+2 refused: 3 nodes but one has 1 drive", nodes: func() []Node {
			n := uniform(3, 2, tb)
			n[2].Free = n[2].Free[:1]
			return n
		}(), req: Request{Name: "v", K: 4, M: 2}, err: "have 3 nodes (a: 2 free, b: 2 free, c: 1 free)"},
		{name: "2 groups of 4+2 over 3 nodes x 4", nodes: uniform(3, 4, tb), req: Request{Name: "v", K: 4, M: 2, Groups: 2},
			members: "a:a0 b:b0 c:c0 a:a1 b:b1 c:c1 a:a2 b:b2 c:c2 a:a3 b:b3 c:c3", owner: "a", size: tb},
		{name: "2 groups refused", nodes: uniform(3, 3, tb), req: Request{Name: "v", K: 4, M: 2, Groups: 2},
			err: "2 groups of 4+2 need 3 nodes with 4 free drives each, or 6 nodes with 2"},
		{name: "4+3 refusal lists the uneven shape", nodes: uniform(2, 4, tb), req: Request{Name: "v", K: 4, M: 3},
			err: "4+3 needs 3 nodes with 3, 3 and 1 free drives, or 7 nodes with 1"},
		{name: "m=1 refusal", nodes: uniform(2, 4, tb), req: Request{Name: "v", K: 2, M: 1},
			err: "2+1 needs 3 nodes with 1 free drive each"},
		{name: "nodes flag limits members and owner", nodes: uniform(6, 1, tb), req: Request{Name: "v", K: 2, M: 1, Nodes: []string{"f", "d", "e"}},
			members: "d:d0 e:e0 f:f0", owner: "d", size: tb},
		{name: "unknown node in --nodes", nodes: uniform(3, 1, tb), req: Request{Name: "v", K: 2, M: 1, Nodes: []string{"a", "zz"}},
			err: "node zz is not in the cluster"},
		{name: "largest equal size wins", nodes: mixed, req: Request{Name: "v", K: 2, M: 2},
			members: "a:a0 b:b0 c:c0 a:a1", owner: "a", size: tb},
		{name: "big drives when enough domains have them", nodes: allBig, req: Request{Name: "v", K: 2, M: 1},
			members: "a:a-big b:b-big c:c-big", owner: "a", size: 2 * tb},
		{name: "too few nodes in --nodes", nodes: mixed, req: Request{Name: "v", K: 2, M: 1, Nodes: []string{"a", "b"}},
			err: "2+1 needs 3 nodes with 1 free drive each (at most 1 from one node); have 2 nodes (a: 3 free, b: 3 free)"},
		{name: "min member size filters", nodes: mixed, req: Request{Name: "v", K: 2, M: 2, MinMemberSize: 2 * tb},
			err: "free drives of at least 2199023255552 bytes"},
		{name: "owner is the least loaded", nodes: loaded, req: Request{Name: "v", K: 4, M: 2},
			members: "a:a0 b:b0 c:c0 a:a1 b:b1 c:c1", owner: "b", size: tb},
		{name: "domains group nodes", nodes: racks, req: Request{Name: "v", K: 2, M: 2},
			members: "n1:x1 n3:z1 n2:y1 n3:z2", owner: "n3", size: tb},
		{name: "domain refusal speaks of domains", nodes: racks, req: Request{Name: "v", K: 4, M: 1},
			err: "4+1 needs 5 failure domains with 1 free drive each (at most 1 from one failure domain); have 2 failure domains (n1 (rack1): 2 free"},
		{name: "k too small", nodes: uniform(3, 1, tb), req: Request{Name: "v", K: 1, M: 1}, err: "k=1, need k >= 2"},
		{name: "m too large", nodes: uniform(3, 1, tb), req: Request{Name: "v", K: 2, M: 5}, err: "m=5"},
		{name: "duplicate drive id", nodes: []Node{{Name: "a", Free: []Drive{{ID: "x", Size: 1}}}, {Name: "b", Free: []Drive{{ID: "x", Size: 1}}}},
			req: Request{Name: "v", K: 2, M: 1}, err: "drive id x on nodes a and b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Place(tt.nodes, tt.req)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.err)
				}
				if !errors.Is(err, ErrNoPlacement) && !errors.Is(err, ErrInvalid) {
					t.Errorf("error wraps neither sentinel: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range p.Members {
				got = append(got, m.Node+":"+m.DriveID)
			}
			if g := strings.Join(got, " "); g != tt.members {
				t.Errorf("members\n got %s\nwant %s", g, tt.members)
			}
			if p.Owner != tt.owner || p.MemberSize != tt.size {
				t.Errorf("owner %s size %d, want %s %d", p.Owner, p.MemberSize, tt.owner, tt.size)
			}
			checkValid(t, tt.nodes, tt.req, p)
		})
	}
}

// checkValid asserts what every accepted placement must satisfy: the
// engine's domain rule, distinct free drives of allowed nodes, the right
// shape, MemberSize the smallest member, an allowed owner.
func checkValid(t *testing.T, nodes []Node, req Request, p Placement) {
	t.Helper()
	groups := max(req.Groups, 1)
	g := layout.Geometry{K: req.K, M: req.M, Groups: groups, ChunkSize: layout.MinChunkSize, Rows: 1}
	if len(p.Members) != g.Members() {
		t.Fatalf("%d members, want %d", len(p.Members), g.Members())
	}
	if err := layout.CheckDomains(g, p.Domains()); err != nil {
		t.Fatalf("placement breaks the engine's domain rule: %v", err)
	}
	allowed := map[string]bool{}
	for _, n := range req.Nodes {
		allowed[n] = true
	}
	free := map[string]Node{}
	for _, n := range nodes {
		for _, d := range n.Free {
			free[d.ID] = n
		}
	}
	used := map[string]bool{}
	minSize := int64(-1)
	for _, m := range p.Members {
		n, ok := free[m.DriveID]
		switch {
		case !ok || n.Name != m.Node:
			t.Fatalf("member %+v is not a free drive of its node", m)
		case used[m.DriveID]:
			t.Fatalf("drive %s used twice", m.DriveID)
		case len(allowed) > 0 && !allowed[m.Node]:
			t.Fatalf("member on node %s outside --nodes %v", m.Node, req.Nodes)
		case m.Domain != n.domain():
			t.Fatalf("member %+v: domain of node %s is %s", m, n.Name, n.domain())
		case m.Size < req.MinMemberSize:
			t.Fatalf("member %+v smaller than %d", m, req.MinMemberSize)
		}
		used[m.DriveID] = true
		if minSize < 0 || m.Size < minSize {
			minSize = m.Size
		}
	}
	if p.MemberSize != minSize {
		t.Fatalf("MemberSize %d, smallest member %d", p.MemberSize, minSize)
	}
	if len(allowed) > 0 && !allowed[p.Owner] {
		t.Fatalf("owner %s outside --nodes", p.Owner)
	}
}

// bruteBest returns the largest member size any valid placement reaches,
// or -1 when none exists: an exhaustive search over drives, independent of
// Place's counting argument.
func bruteBest(nodes []Node, req Request) int64 {
	groups := max(req.Groups, 1)
	w := req.K + req.M
	allowed := map[string]bool{}
	for _, n := range req.Nodes {
		allowed[n] = true
	}
	type drv struct {
		domain string
		size   int64
	}
	var ds []drv
	for _, n := range nodes {
		if len(allowed) > 0 && !allowed[n.Name] {
			continue
		}
		for _, d := range n.Free {
			if d.Size >= req.MinMemberSize && d.Size > 0 {
				ds = append(ds, drv{n.domain(), d.Size})
			}
		}
	}
	best := int64(-1)
	used := make([]bool, len(ds))
	var rec func(group, slot, from int, count map[string]int, minSize int64)
	rec = func(group, slot, from int, count map[string]int, minSize int64) {
		if minSize <= best {
			return // cannot improve
		}
		if group == groups {
			best = minSize
			return
		}
		if slot == w {
			rec(group+1, 0, 0, map[string]int{}, minSize)
			return
		}
		// Within a group, drives in increasing index order (a group is a set).
		for i := from; i < len(ds); i++ {
			if used[i] || count[ds[i].domain] >= req.M {
				continue
			}
			used[i] = true
			count[ds[i].domain]++
			rec(group, slot+1, i+1, count, min(minSize, ds[i].size))
			count[ds[i].domain]--
			used[i] = false
		}
	}
	rec(0, 0, 0, map[string]int{}, 1<<62)
	return best
}

// randomCase draws a small cluster and request.
func randomCase(r *rand.Rand) ([]Node, Request) {
	nNodes := 2 + r.IntN(4)
	var nodes []Node
	for i := range nNodes {
		name := string(rune('a' + i))
		n := Node{Name: name, Owned: r.IntN(3)}
		if r.IntN(3) == 0 {
			n.Domain = "d" + strconv.Itoa(r.IntN(3))
		}
		for j := range r.IntN(4) {
			n.Free = append(n.Free, Drive{ID: fmt.Sprintf("%s%d", name, j), Size: int64(1 + r.IntN(3))})
		}
		nodes = append(nodes, n)
	}
	req := Request{Name: "v", K: 2 + r.IntN(2), M: 1 + r.IntN(3), Groups: 1 + r.IntN(2)}
	if r.IntN(4) == 0 {
		req.MinMemberSize = int64(r.IntN(3))
	}
	if r.IntN(4) == 0 {
		for _, n := range nodes {
			if r.IntN(2) == 0 {
				req.Nodes = append(req.Nodes, n.Name)
			}
		}
	}
	return nodes, req
}

// checkAgainstBrute: an accepted placement is valid and reaches the best
// member size; a refusal is right (the brute force finds nothing).
func checkAgainstBrute(t *testing.T, nodes []Node, req Request) {
	t.Helper()
	p, err := Place(nodes, req)
	if errors.Is(err, ErrInvalid) {
		return
	}
	best := bruteBest(nodes, req)
	if err != nil {
		if !errors.Is(err, ErrNoPlacement) {
			t.Fatalf("unexpected error: %v", err)
		}
		if best >= 0 {
			t.Fatalf("refused, but a placement with member size %d exists: %v\nnodes %+v\nreq %+v", best, err, nodes, req)
		}
		return
	}
	checkValid(t, nodes, req, p)
	if p.MemberSize != best {
		t.Fatalf("member size %d, best possible %d\nnodes %+v\nreq %+v", p.MemberSize, best, nodes, req)
	}
}

// TestPlaceBruteForce checks Place against exhaustive search on random
// small clusters. TEST_SEED replays a run.
func TestPlaceBruteForce(t *testing.T) {
	seed := rand.Uint64()
	if s, err := strconv.ParseUint(os.Getenv("TEST_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("TEST_SEED=%d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	n := 3000
	if testing.Short() {
		n = 300
	}
	accepted := 0
	for range n {
		nodes, req := randomCase(r)
		checkAgainstBrute(t, nodes, req)
		if _, err := Place(nodes, req); err == nil {
			accepted++
		}
	}
	t.Logf("%d of %d cases placed", accepted, n)
	if accepted < n/10 || accepted > n*9/10 {
		t.Errorf("generator unbalanced: %d of %d placed", accepted, n)
	}
}

// FuzzPlace drives the same check from fuzzer bytes.
func FuzzPlace(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(42), uint64(7))
	f.Add(uint64(0xdeadbeef), uint64(0))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		nodes, req := randomCase(rand.New(rand.NewPCG(a, b)))
		checkAgainstBrute(t, nodes, req)
	})
}

func TestPlaceDeterministic(t *testing.T) {
	nodes := uniform(5, 3, tb)
	req := Request{Name: "v", K: 3, M: 2, Groups: 2}
	p1, err := Place(nodes, req)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p2, _ := Place(nodes, req)
		if fmt.Sprint(p1) != fmt.Sprint(p2) {
			t.Fatalf("placements differ:\n%v\n%v", p1, p2)
		}
	}
	// Nothing in the input changed.
	if fmt.Sprint(nodes) != fmt.Sprint(uniform(5, 3, tb)) {
		t.Fatal("Place modified its input")
	}
}
