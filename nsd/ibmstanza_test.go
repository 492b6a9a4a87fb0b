package nsd_test

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// This file is a reader of IBM Storage Scale stanza files written from
// IBM's documentation, independently of nsd/stanza's writer, so the tests
// check what mmcrnsd -F would read, not what the writer meant to write.
//
// Grammar ("Stanza files", IBM Storage Scale administration): a stanza is a
// series of whitespace-separated tokens that may span lines; it begins with
// a stanza identifier "%keyword:" as the first token on a line, followed by
// clauses Attribute=value. Lines starting with '#' are comments, and all
// text after a '#' following a clause is a comment. A stanza ends at a line
// that begins a new stanza, a blank line, or a non-comment line without '='.
//
// NSD stanza (mmcrnsd): %nsd: device=DiskName nsd=NsdName servers=ServerList
// usage={dataAndMetadata|dataOnly|metadataOnly|descOnly|localCache}
// failureGroup=FailureGroup pool=StoragePool. NsdName: only 'A'-'Z', 'a'-'z',
// '0'-'9' and '_', not beginning with "gpfs".

type ibmStanza struct {
	Kind    string
	Clauses map[string]string
	Line    int // where it starts
}

func parseIBMStanzas(text string) ([]ibmStanza, error) {
	var out []ibmStanza
	var cur *ibmStanza
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		if strings.HasPrefix(strings.TrimLeft(raw, " \t"), "#") {
			continue // comment line: neither content nor end of stanza
		}
		if strings.TrimSpace(raw) == "" {
			cur = nil // a blank line ends the stanza
			continue
		}
		body, _, _ := strings.Cut(raw, "#")
		tok := strings.Fields(body)
		if len(tok) == 0 {
			continue
		}
		if strings.HasPrefix(tok[0], "%") {
			if !strings.HasSuffix(tok[0], ":") || len(tok[0]) < 3 {
				return nil, fmt.Errorf("line %d: bad stanza identifier %q", n, tok[0])
			}
			out = append(out, ibmStanza{Kind: strings.TrimSuffix(tok[0][1:], ":"), Clauses: map[string]string{}, Line: n})
			cur = &out[len(out)-1]
			tok = tok[1:]
		} else if !strings.Contains(body, "=") {
			// Ends the stanza; outside one it would be an old-style disk
			// descriptor, which the writer must never produce.
			return nil, fmt.Errorf("line %d: %q is neither a clause nor a stanza", n, raw)
		}
		if cur == nil {
			return nil, fmt.Errorf("line %d: clauses outside a stanza: %q", n, raw)
		}
		for _, t := range tok {
			k, v, ok := strings.Cut(t, "=")
			if !ok || k == "" || v == "" {
				return nil, fmt.Errorf("line %d: %q is not Attribute=value", n, t)
			}
			if _, dup := cur.Clauses[k]; dup {
				return nil, fmt.Errorf("line %d: %s given twice", n, k)
			}
			cur.Clauses[k] = v
		}
	}
	return out, sc.Err()
}

var (
	ibmNSDName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
	ibmUsages  = map[string]bool{"dataAndMetadata": true, "dataOnly": true, "metadataOnly": true, "descOnly": true, "localCache": true}
	ibmNode    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// checkIBMName applies IBM's NSD name rules.
func checkIBMName(s string) error {
	if !ibmNSDName.MatchString(s) {
		return fmt.Errorf("NSD name %q: characters outside A-Z a-z 0-9 _", s)
	}
	if strings.HasPrefix(strings.ToLower(s), "gpfs") {
		return fmt.Errorf("NSD name %q begins with the reserved gpfs", s)
	}
	return nil
}

// checkIBMNSD checks one %nsd stanza the way mmcrnsd documents its clauses.
func checkIBMNSD(s ibmStanza) error {
	if s.Kind != "nsd" {
		return fmt.Errorf("stanza at line %d: kind %q, want nsd", s.Line, s.Kind)
	}
	for k, v := range s.Clauses {
		switch k {
		case "device":
			if !strings.HasPrefix(v, "/dev/") {
				return fmt.Errorf("device=%s: want a /dev block device", v)
			}
		case "nsd":
			if err := checkIBMName(v); err != nil {
				return err
			}
		case "usage":
			if !ibmUsages[v] {
				return fmt.Errorf("usage=%s", v)
			}
		case "failureGroup":
			n, err := strconv.Atoi(v)
			if err != nil || n < -1 || n > 4000 {
				return fmt.Errorf("failureGroup=%s", v)
			}
		case "servers":
			// mmcrnsd: up to eight NSD servers; the first writes the
			// descriptor, and device= is its name for the disk.
			if strings.Count(v, ",") >= 8 {
				return fmt.Errorf("servers=%s: more than 8", v)
			}
			for _, srv := range strings.Split(v, ",") {
				if !ibmNode.MatchString(srv) {
					return fmt.Errorf("servers=%s", v)
				}
			}
		case "pool":
			if !ibmNSDName.MatchString(v) {
				return fmt.Errorf("pool=%s", v)
			}
		default:
			return fmt.Errorf("unknown clause %s=%s", k, v)
		}
	}
	if s.Clauses["device"] == "" {
		return fmt.Errorf("stanza at line %d: no device=", s.Line)
	}
	return nil
}
