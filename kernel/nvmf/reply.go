package nvmf

import (
	"fmt"
	"strconv"
	"strings"
)

func parseSupportedOptions(s string) map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Split(strings.TrimSpace(s), ",") {
		k, _, _ := strings.Cut(f, "=")
		if k != "" && k != "instance" && k != "cntlid" {
			m[k] = true
		}
	}
	return m
}

// parseConnectReply parses "instance=N,cntlid=M".
func parseConnectReply(s string) (instance, cntlid int, err error) {
	instance, cntlid = -1, -1
	for _, kv := range strings.Split(strings.TrimSpace(s), ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, cerr := strconv.Atoi(v)
		switch k {
		case "instance":
			if cerr == nil {
				instance = n
			}
		case "cntlid":
			if cerr == nil {
				cntlid = n
			}
		}
	}
	if instance < 0 {
		return -1, -1, fmt.Errorf("unexpected reply %q from nvme-fabrics", s)
	}
	return instance, cntlid, nil
}
