package placement

import (
	"fmt"
	"strconv"
	"strings"
)

// refusal explains why no placement exists: the shapes that would work
// (fewest domains with the most drives each, or one drive per group from
// K+M domains) and what the allowed nodes have.
func refusal(allowed []Node, req Request) error {
	w, g := req.K+req.M, req.Groups
	unit := "nodes"
	perDomain := map[string]int{}
	nodesIn := map[string]int{}
	for _, n := range allowed {
		nodesIn[n.domain()]++
	}
	for _, c := range nodesIn {
		if c != 1 {
			unit = "failure domains"
		}
	}
	var have []string
	for _, n := range allowed {
		free := 0
		for _, d := range n.Free {
			if d.Size >= req.MinMemberSize && d.Size > 0 {
				free++
			}
		}
		perDomain[n.domain()] += free
		if len(have) < 8 {
			h := fmt.Sprintf("%s: %d free", n.Name, free)
			if unit != "nodes" {
				h = fmt.Sprintf("%s (%s): %d free", n.Name, n.domain(), free)
			}
			have = append(have, h)
		}
	}
	if len(allowed) > 8 {
		have = append(have, "...")
	}
	shape := fmt.Sprintf("%d+%d needs", req.K, req.M)
	if g > 1 {
		shape = fmt.Sprintf("%d groups of %d+%d need", g, req.K, req.M)
	}
	drives := "free drives"
	if req.MinMemberSize > 0 {
		drives = fmt.Sprintf("free drives of at least %d bytes", req.MinMemberSize)
	}
	var need string
	q, r := w/req.M, w%req.M
	switch {
	case req.M == 1:
		need = fmt.Sprintf("%d %s with %d %s each", w, unit, g, plural(g, drives))
	case r == 0:
		need = fmt.Sprintf("%d %s with %d %s each, or %d %s with %d", q, unit, g*req.M, drives, w, unit, g)
	default:
		counts := make([]string, 0, q+1)
		for range q {
			counts = append(counts, strconv.Itoa(g*req.M))
		}
		list := strings.Join(counts, ", ") + " and " + strconv.Itoa(g*r)
		need = fmt.Sprintf("%d %s with %s %s, or %d %s with %d", q+1, unit, list, drives, w, unit, g)
	}
	return fmt.Errorf("%w: volume %q: %s %s (at most %d from one %s); have %d %s (%s)",
		ErrNoPlacement, req.Name, shape, need, g*req.M, strings.TrimSuffix(unit, "s"),
		len(perDomain), unit, strings.Join(have, ", "))
}

func plural(n int, s string) string {
	if n == 1 {
		return strings.Replace(s, "drives", "drive", 1)
	}
	return s
}
