package placement_test

import (
	"fmt"

	"github.com/fabraid/fabraid/internal/placement"
)

// A 4+2 volume over three nodes with two free drives each: two members per
// node, so losing any node costs each stripe two chunks (= M). With two
// nodes it is refused, saying what would work.
func ExamplePlace() {
	node := func(name string, owned int) placement.Node {
		return placement.Node{Name: name, Owned: owned, Free: []placement.Drive{
			{ID: name + "-nvme0", Size: 4 << 40}, {ID: name + "-nvme1", Size: 4 << 40}}}
	}
	nodes := []placement.Node{node("n1", 1), node("n2", 0), node("n3", 1)}
	p, err := placement.Place(nodes, placement.Request{Name: "scratch", K: 4, M: 2})
	if err != nil {
		panic(err)
	}
	for i, m := range p.Members {
		fmt.Printf("slot %d: %s %s\n", i, m.Node, m.DriveID)
	}
	fmt.Println("owner:", p.Owner)
	_, err = placement.Place(nodes[:2], placement.Request{Name: "scratch", K: 4, M: 2})
	fmt.Println(err)
	// Output:
	// slot 0: n1 n1-nvme0
	// slot 1: n2 n2-nvme0
	// slot 2: n3 n3-nvme0
	// slot 3: n1 n1-nvme1
	// slot 4: n2 n2-nvme1
	// slot 5: n3 n3-nvme1
	// owner: n2
	// no placement: volume "scratch": 4+2 needs 3 nodes with 2 free drives each, or 6 nodes with 1 (at most 2 from one node); have 2 nodes (n1: 2 free, n2: 2 free)
}
