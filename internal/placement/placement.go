package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// Drive is one free (claimed, in no volume) drive of a node.
type Drive struct {
	ID     string // stable drive id, unique in the cluster (internal/drive: serial, else wwid)
	Serial string
	Size   int64 // bytes
	// Spare: kept for replacements (plan.Replacement); plan never passes
	// one to Place.
	Spare bool
}

// Node is one node of the cluster as placement sees it.
type Node struct {
	Name string
	// Domain is the node's failure domain; empty means the node's name.
	Domain string
	Free   []Drive
	// Owned is the number of volumes the node owns now (their engines run
	// there); the new volume goes to the least-loaded allowed node.
	Owned int
	// NoOwner: the node may hold members but not own the volume (a
	// drained node).
	NoOwner bool
}

func (n Node) domain() string {
	if n.Domain == "" {
		return n.Name
	}
	return n.Domain
}

// Request is what `fabraid volume create` asks for.
type Request struct {
	Name   string
	K, M   int
	Groups int // groups of K+M members; 0 means 1
	// Nodes, when not empty, limits the members and the owner to these
	// nodes (--nodes a,b,c).
	Nodes []string
	// MinMemberSize refuses drives smaller than this many bytes; 0 takes
	// any size.
	MinMemberSize int64
}

// Member is one member slot of a placement.
type Member struct {
	Node    string
	Domain  string
	DriveID string
	Serial  string
	Size    int64
}

// Placement is the result of Place.
type Placement struct {
	Name    string
	K, M    int
	Groups  int
	Owner   string   // node that runs the volume's engine
	Members []Member // in slot order: member i of group g at g*(K+M)+i
	// MemberSize is the smallest member's size: what the engine uses of
	// every member.
	MemberSize int64
}

// Domains returns the failure domain of every slot, as engine.Config
// Domains wants it.
func (p Placement) Domains() []string {
	out := make([]string, len(p.Members))
	for i, m := range p.Members {
		out[i] = m.Domain
	}
	return out
}

// ErrNoPlacement is wrapped by every refusal of Place.
var ErrNoPlacement = errors.New("no placement")

// ErrInvalid is wrapped when the request or the node list is malformed.
var ErrInvalid = errors.New("invalid placement input")

// Place picks the members and the owner of a new volume; see the package
// documentation for the rule and the preferences. It does not modify
// nodes.
func Place(nodes []Node, req Request) (Placement, error) {
	if req.Groups == 0 {
		req.Groups = 1
	}
	allowed, err := check(nodes, req)
	if err != nil {
		return Placement{}, err
	}
	var cands []cand
	for _, n := range allowed {
		for _, d := range n.Free {
			if d.Size >= req.MinMemberSize && d.Size > 0 {
				cands = append(cands, cand{node: n.Name, domain: n.domain(), drive: d})
			}
		}
	}
	sizes := make([]int64, 0, len(cands))
	for _, c := range cands {
		sizes = append(sizes, c.drive.Size)
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	for i := len(sizes) - 1; i >= 0; i-- {
		s := newState(cands, sizes[i], req)
		if !s.feasible() {
			continue
		}
		members, err := s.fill()
		if err != nil {
			return Placement{}, err
		}
		p := Placement{Name: req.Name, K: req.K, M: req.M, Groups: req.Groups, Members: members, MemberSize: sizes[i]}
		if p.Owner = owner(allowed, members); p.Owner == "" {
			return Placement{}, fmt.Errorf("%w: volume %q: every allowed node is drained: none may own it", ErrNoPlacement, req.Name)
		}
		return p, nil
	}
	return Placement{}, refusal(allowed, req)
}

// check validates the request and the nodes and returns the allowed nodes
// sorted by name.
func check(nodes []Node, req Request) ([]Node, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: volume %q: "+format, append([]any{ErrInvalid, req.Name}, a...)...)
	}
	switch {
	case req.K < 2:
		return nil, bad("k=%d, need k >= 2", req.K)
	case req.M < 1 || req.M > layout.MaxParity:
		return nil, bad("m=%d, need 1 <= m <= %d", req.M, layout.MaxParity)
	case req.K+req.M > layout.MaxWidth:
		return nil, bad("k+m=%d exceeds %d", req.K+req.M, layout.MaxWidth)
	case req.Groups < 1:
		return nil, bad("groups=%d, need >= 1", req.Groups)
	case req.Groups*(req.K+req.M) > superblock.MaxMembers:
		return nil, bad("%d members exceed the %d a superblock holds", req.Groups*(req.K+req.M), superblock.MaxMembers)
	}
	byName := map[string]Node{}
	driveAt := map[string]string{}
	for _, n := range nodes {
		if n.Name == "" {
			return nil, bad("a node has no name")
		}
		if _, dup := byName[n.Name]; dup {
			return nil, bad("node %s listed twice", n.Name)
		}
		if len(n.domain()) > superblock.DomainMax {
			return nil, bad("node %s: failure domain %q longer than %d bytes", n.Name, n.domain(), superblock.DomainMax)
		}
		byName[n.Name] = n
		for _, d := range n.Free {
			if d.ID == "" {
				return nil, bad("node %s: a drive has no id", n.Name)
			}
			if at, dup := driveAt[d.ID]; dup {
				return nil, bad("drive id %s on nodes %s and %s: drive ids must be unique in the cluster", d.ID, at, n.Name)
			}
			driveAt[d.ID] = n.Name
		}
	}
	var allowed []Node
	if len(req.Nodes) == 0 {
		allowed = slices.Clone(nodes)
	} else {
		seen := map[string]bool{}
		for _, name := range req.Nodes {
			n, ok := byName[name]
			if !ok {
				return nil, fmt.Errorf("%w: volume %q: node %s is not in the cluster", ErrNoPlacement, req.Name, name)
			}
			if !seen[name] {
				seen[name] = true
				allowed = append(allowed, n)
			}
		}
	}
	if len(allowed) == 0 {
		return nil, fmt.Errorf("%w: volume %q: the cluster has no nodes", ErrNoPlacement, req.Name)
	}
	slices.SortFunc(allowed, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return allowed, nil
}

type cand struct {
	node, domain string
	drive        Drive
}

// state is the greedy fill in progress at one member size.
type state struct {
	k, m, groups int
	domains      []string          // sorted
	left         map[string][]cand // per domain, drives not yet taken
	n            map[string]int    // len(left[d]), minus a tentative pick
	inGroup      map[string]int    // members of the current group per domain
	inVolume     map[string]int    // members of the volume per domain
	perNode      map[string]int    // members of the volume per node
	group        int               // current group
	filled       int               // members of the current group so far
}

func newState(cands []cand, size int64, req Request) *state {
	s := &state{k: req.K, m: req.M, groups: req.Groups, left: map[string][]cand{}, n: map[string]int{},
		inGroup: map[string]int{}, inVolume: map[string]int{}, perNode: map[string]int{}}
	for _, c := range cands {
		if c.drive.Size >= size {
			if s.left[c.domain] == nil {
				s.domains = append(s.domains, c.domain)
			}
			s.left[c.domain] = append(s.left[c.domain], c)
			s.n[c.domain]++
		}
	}
	slices.Sort(s.domains)
	return s
}

func (s *state) width() int { return s.k + s.m }

// feasible reports whether the current state can be completed: the rest
// of the current group (r slots, at most m-inGroup[d] from domain d) and
// g full groups after it (at most m per domain each). It is a transport
// problem with two sinks. Full groups are symmetric, so together they take
// at most g*m from a domain and need g*width; the current group takes y_d
// from domain d. Taking y_d costs the full groups nothing while domain d
// keeps g*m drives for them (its surplus), one drive each beyond that. So
// the state is feasible iff the current group's caps reach r and
// sum_d min(n_d, g*m) - max(0, r - sum_d min(cap_d, surplus_d)) >= g*width.
func (s *state) feasible() bool {
	r := s.width() - s.filled
	g := s.groups - s.group - 1
	capSum, free, future := 0, 0, 0
	for _, d := range s.domains {
		n := s.n[d]
		c := min(s.m-s.inGroup[d], n)
		capSum += c
		free += min(c, max(0, n-g*s.m))
		future += min(n, g*s.m)
	}
	return capSum >= r && future-max(0, r-free) >= g*s.width()
}

// fill takes the members slot by slot: for each slot, the most preferred
// domain whose pick keeps the state feasible. The state is feasible when
// fill starts, and a feasible state always has such a domain (any domain
// the current group uses in a solution), so fill never gets stuck.
func (s *state) fill() ([]Member, error) {
	var out []Member
	for s.group < s.groups {
		best := ""
		for _, d := range s.domains {
			if s.n[d] == 0 || s.inGroup[d] >= s.m {
				continue
			}
			if best != "" && !s.prefer(d, best) {
				continue
			}
			s.tentative(d)
			ok := s.feasible()
			s.undo(d)
			if ok {
				best = d
			}
		}
		if best == "" {
			return nil, fmt.Errorf("placement: internal error: no domain for group %d slot %d", s.group, s.filled)
		}
		out = append(out, s.take(best))
		if s.filled == s.width() {
			s.group, s.filled = s.group+1, 0
			clear(s.inGroup)
		}
	}
	return out, nil
}

// prefer reports whether domain a is preferred to b for the next slot:
// fewer members in this group, then in the volume, then more drives left,
// then the name.
func (s *state) prefer(a, b string) bool {
	if c := cmp.Compare(s.inGroup[a], s.inGroup[b]); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(s.inVolume[a], s.inVolume[b]); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(s.n[a], s.n[b]); c != 0 {
		return c > 0
	}
	return a < b
}

// tentative counts one more member of domain d in the current group, for
// feasible; undo reverts it.
func (s *state) tentative(d string) { s.n[d]--; s.inGroup[d]++; s.filled++ }
func (s *state) undo(d string)      { s.n[d]++; s.inGroup[d]--; s.filled-- }

// take removes the preferred drive of domain d (on the node with fewer
// members of the volume, then the smaller drive, then node and id) and
// counts it.
func (s *state) take(d string) Member {
	s.tentative(d)
	list := s.left[d]
	best := 0
	for i, c := range list {
		b := list[best]
		if k := cmp.Or(cmp.Compare(s.perNode[c.node], s.perNode[b.node]), cmp.Compare(c.drive.Size, b.drive.Size),
			strings.Compare(c.node, b.node), strings.Compare(c.drive.ID, b.drive.ID)); k < 0 {
			best = i
		}
	}
	c := list[best]
	s.left[d] = slices.Delete(list, best, best+1)
	s.inVolume[d]++
	s.perNode[c.node]++
	return Member{Node: c.node, Domain: d, DriveID: c.drive.ID, Serial: c.drive.Serial, Size: c.drive.Size}
}

// owner picks the allowed node that may own (not NoOwner) with the fewest
// owned volumes, then the most members of this volume, then the first
// name; "" when every allowed node is NoOwner.
func owner(allowed []Node, members []Member) string {
	local := map[string]int{}
	for _, m := range members {
		local[m.Node]++
	}
	var best *Node
	for i := range allowed {
		n := &allowed[i]
		if n.NoOwner {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(n.Owned, best.Owned), cmp.Compare(local[best.Name], local[n.Name])) < 0 {
			best = n
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}
