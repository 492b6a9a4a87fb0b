package engine_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"

	"github.com/fabraid/fabraid/engine"
)

// A 4+2 volume over six members in three failure domains survives the loss
// of a whole domain, and a fresh owner reassembles it from its members.
func Example() {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var mm []*engine.MemMember
	var devs []engine.Member
	for i := 0; i < 6; i++ {
		m := engine.NewMemMember(4 << 20)
		mm, devs = append(mm, m), append(devs, m)
	}
	v, err := engine.Create(engine.Config{
		Name: "vol0", K: 4, M: 2,
		Domains:      []string{"node0", "node0", "node1", "node1", "node2", "node2"},
		AssumeZeroed: true, // MemMembers start zeroed
	}, devs, nil, engine.Options{Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	data := bytes.Repeat([]byte("fabraid "), 512) // 4 KiB
	if _, err := v.WriteAt(data, 1<<20); err != nil {
		fmt.Println(err)
		return
	}
	if err := v.Flush(); err != nil {
		fmt.Println(err)
		return
	}
	v.Abandon() // the owner dies with node1's drives
	mm[2].SetFailed(true)
	mm[3].SetFailed(true)
	for _, m := range mm {
		m.Reopen()
	}
	v, err = engine.Assemble([]engine.Member{mm[0], mm[1], mm[4], mm[5]}, nil, engine.Options{Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make([]byte, len(data))
	if _, err := v.ReadAt(got, 1<<20); err != nil {
		fmt.Println(err)
		return
	}
	st := v.Status()
	fmt.Println(bytes.Equal(got, data), st.Degraded, st.Members[2].Role, st.Members[3].Role)
	// Output: true true failed failed
}
