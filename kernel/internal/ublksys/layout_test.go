package ublksys

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// This file checks the Go mirrors of the uapi structs and constants against
// the header text in testdata/, so no cgo and no kernel headers on the build
// machine are needed. A small C layout calculator (natural alignment, the
// x86-64/arm64 ABI for fixed-width types) parses the struct bodies.

type cField struct {
	off, size int
}

type cType struct {
	size, align int
	fields      map[string]cField // flattened: anonymous members merged, named aggregates as "a.b" too
}

type cParser struct {
	toks    []string
	pos     int
	structs map[string]*cType
}

var primitives = map[string]int{
	"__u8": 1, "__s8": 1, "__u16": 2, "__s16": 2, "__u32": 4, "__s32": 4,
	"__u64": 8, "__s64": 8, "__aligned_u64": 8,
}

func stripC(src string) string {
	src = regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(src, " ")
	src = regexp.MustCompile(`//[^\n]*`).ReplaceAllString(src, " ")
	// Preprocessor lines (with continuations).
	src = regexp.MustCompile(`(?m)^[ \t]*#([^\n]*\\\n)*[^\n]*`).ReplaceAllString(src, " ")
	src = strings.ReplaceAll(src, "__attribute__((packed))", " ")
	return src
}

func tokenize(src string) []string {
	re := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[{}\[\];,()*=]`)
	return re.FindAllString(src, -1)
}

func (p *cParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *cParser) next() string {
	t := p.peek()
	p.pos++
	return t
}

func (p *cParser) expect(t string) error {
	if got := p.next(); got != t {
		return fmt.Errorf("token %d: want %q, got %q", p.pos-1, t, got)
	}
	return nil
}

// parseAll walks the top level and records every "struct NAME { ... };".
func (p *cParser) parseAll() {
	for p.pos < len(p.toks) {
		if p.peek() == "struct" && p.pos+2 < len(p.toks) && p.toks[p.pos+2] == "{" {
			p.pos++
			name := p.next()
			start := p.pos
			ct, err := p.body(false)
			if err != nil {
				// Structs using types this calculator does not know are skipped;
				// the test fails only if a struct it needs is missing.
				p.pos = start
				p.skipBlock()
				continue
			}
			p.structs[name] = ct
			continue
		}
		p.pos++
	}
}

func (p *cParser) skipBlock() {
	depth := 0
	for p.pos < len(p.toks) {
		switch p.next() {
		case "{":
			depth++
		case "}":
			depth--
			if depth == 0 {
				return
			}
		}
	}
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// body parses "{ decl... }" and lays it out as a struct or union.
func (p *cParser) body(union bool) (*cType, error) {
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	ct := &cType{align: 1, fields: map[string]cField{}}
	off := 0
	for p.peek() != "}" {
		if p.peek() == "" {
			return nil, fmt.Errorf("unexpected end")
		}
		var (
			member *cType
			prim   int
		)
		switch t := p.next(); {
		case t == "union" || t == "struct":
			if p.peek() == "{" {
				m, err := p.body(t == "union")
				if err != nil {
					return nil, err
				}
				member = m
			} else {
				name := p.next()
				m, ok := p.structs[name]
				if !ok {
					return nil, fmt.Errorf("unknown struct %s", name)
				}
				member = m
			}
		case primitives[t] != 0:
			prim = primitives[t]
		default:
			return nil, fmt.Errorf("unknown type %q", t)
		}
		// Declarators: [name [ '[' N ']' ]] {, ...} ;
		decl := false
		for {
			if p.peek() == ";" {
				p.next()
				break
			}
			if p.peek() == "," {
				p.next()
				continue
			}
			name := p.next()
			count := 1
			if p.peek() == "[" {
				p.next()
				if p.peek() == "]" {
					count = 0 // flexible array member
				} else {
					n, err := strconv.Atoi(p.next())
					if err != nil {
						return nil, err
					}
					count = n
				}
				if err := p.expect("]"); err != nil {
					return nil, err
				}
			}
			decl = true
			size, align := prim, prim
			if member != nil {
				size, align = member.size, member.align
			}
			fo := off
			if !union {
				fo = alignUp(off, align)
				off = fo + size*count
			}
			ct.fields[name] = cField{fo, size * count}
			if member != nil {
				for n, f := range member.fields {
					ct.fields[name+"."+n] = cField{fo + f.off, f.size}
				}
			}
			ct.align = max(ct.align, align)
			if union {
				ct.size = max(ct.size, size*count)
			}
		}
		if !decl {
			if member == nil {
				return nil, fmt.Errorf("declaration without name")
			}
			// Anonymous struct/union member: merge its fields.
			fo := off
			if !union {
				fo = alignUp(off, member.align)
				off = fo + member.size
			} else {
				ct.size = max(ct.size, member.size)
			}
			for n, f := range member.fields {
				ct.fields[n] = cField{fo + f.off, f.size}
			}
			ct.align = max(ct.align, member.align)
		}
	}
	p.next() // }
	if !union {
		ct.size = off
	}
	ct.size = alignUp(ct.size, ct.align)
	return ct, nil
}

func parseHeader(t *testing.T, path string) (map[string]*cType, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := &cParser{toks: tokenize(stripC(string(b))), structs: map[string]*cType{}}
	p.parseAll()
	return p.structs, string(b)
}

// snake converts a Go field name to the kernel's spelling: NrHwQueues ->
// nr_hw_queues, MaxIOBufBytes -> max_io_buf_bytes.
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"NrHwQueues": "nr_hw_queues", "MaxIOBufBytes": "max_io_buf_bytes", "IOOptShift": "io_opt_shift",
		"SqThreadCPU": "sq_thread_cpu", "Resv1": "resv1", "OwnerUID": "owner_uid", "Addr3": "addr3",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLayout(t *testing.T) {
	uring, _ := parseHeader(t, "testdata/io_uring.h")
	ublk, _ := parseHeader(t, "testdata/ublk_cmd.h")
	tests := []struct {
		goType  any
		header  map[string]*cType
		cName   string
		renames map[string]string // Go field -> C field where snake() differs
	}{
		{SQE{}, uring, "io_uring_sqe", map[string]string{"OpFlags": "rw_flags", "Pad2": "__pad2"}},
		{CQE{}, uring, "io_uring_cqe", nil},
		{SQRingOffsets{}, uring, "io_sqring_offsets", nil},
		{CQRingOffsets{}, uring, "io_cqring_offsets", nil},
		{UringParams{}, uring, "io_uring_params", nil},
		{ProbeOp{}, uring, "io_uring_probe_op", nil},
		{Probe{}, uring, "io_uring_probe", nil},
		{CtrlCmd{}, ublk, "ublksrv_ctrl_cmd", nil},
		{DevInfo{}, ublk, "ublksrv_ctrl_dev_info", nil},
		{IODesc{}, ublk, "ublksrv_io_desc", nil},
		{IOCmd{}, ublk, "ublksrv_io_cmd", map[string]string{"QID": "q_id"}},
		{ParamBasic{}, ublk, "ublk_param_basic", nil},
		{ParamDiscard{}, ublk, "ublk_param_discard", nil},
		{ParamDevt{}, ublk, "ublk_param_devt", nil},
		{ParamZoned{}, ublk, "ublk_param_zoned", nil},
		{Params{}, ublk, "ublk_params", nil},
	}
	for _, tt := range tests {
		t.Run(tt.cName, func(t *testing.T) {
			ct, ok := tt.header[tt.cName]
			if !ok {
				t.Fatalf("struct %s not parsed from the header", tt.cName)
			}
			gt := reflect.TypeOf(tt.goType)
			if int(gt.Size()) != ct.size {
				t.Errorf("sizeof: Go %s %d, C %d", gt.Name(), gt.Size(), ct.size)
			}
			for i := range gt.NumField() {
				f := gt.Field(i)
				name := snake(f.Name)
				if r, ok := tt.renames[f.Name]; ok {
					name = r
				}
				cf, ok := ct.fields[name]
				if !ok {
					t.Errorf("Go field %s: no C field %q", f.Name, name)
					continue
				}
				if int(f.Offset) != cf.off || int(f.Type.Size()) != cf.size {
					t.Errorf("field %s: Go offset %d size %d, C offset %d size %d", f.Name, f.Offset, f.Type.Size(), cf.off, cf.size)
				}
			}
		})
	}
	// Offsets the uring code relies on without a struct field.
	sqe := uring["io_uring_sqe"]
	if got := sqe.fields["cmd_op"].off; got != SQECmdOpOffset {
		t.Errorf("cmd_op offset %d, want %d", got, SQECmdOpOffset)
	}
	if got := sqe.fields["cmd"].off; got != SQECmdOffset {
		t.Errorf("cmd offset %d, want %d", got, SQECmdOffset)
	}
	for name, want := range map[string]int{
		"ublksrv_ctrl_cmd": CtrlCmdSize, "ublksrv_io_cmd": IOCmdSize, "ublksrv_io_desc": IODescSize,
		"ublksrv_ctrl_dev_info": DevInfoSize, "ublk_params": ParamsSize,
	} {
		if got := ublk[name].size; got != want {
			t.Errorf("sizeof(struct %s) = %d, constant says %d", name, got, want)
		}
	}
}

// headerConstants evaluates the simple #defines (N, (1U << N), ...) and the
// enum members of a header.
func headerConstants(src string) map[string]int64 {
	out := map[string]int64{}
	clean := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(src, " ")
	shift := regexp.MustCompile(`^\(?\s*1U?L?L?\s*<<\s*([0-9]+|[A-Z_]+)\s*\)?$`)
	shiftOf := func(s string) int64 {
		if n, err := strconv.Atoi(s); err == nil {
			return 1 << n
		}
		return 1 << out[s]
	}
	enum := regexp.MustCompile(`(?s)enum\s+\w*\s*\{(.*?)\}`)
	for _, m := range enum.FindAllStringSubmatch(clean, -1) {
		next := int64(0)
		for _, item := range strings.Split(m[1], ",") {
			item = strings.TrimSpace(regexp.MustCompile(`//[^\n]*`).ReplaceAllString(item, ""))
			if item == "" {
				continue
			}
			name, val, hasVal := strings.Cut(item, "=")
			name = strings.TrimSpace(name)
			if hasVal {
				val = strings.TrimSpace(val)
				if s := shift.FindStringSubmatch(val); s != nil {
					next = shiftOf(s[1])
				} else if n, err := strconv.ParseInt(val, 0, 64); err == nil {
					next = n
				} else {
					continue
				}
			}
			out[name] = next
			next++
		}
	}
	def := regexp.MustCompile(`(?m)^#define\s+([A-Z][A-Z0-9_]*)\s+(.+?)\s*$`)
	for _, m := range def.FindAllStringSubmatch(clean, -1) {
		v := strings.TrimSpace(m[2])
		if s := shift.FindStringSubmatch(v); s != nil {
			out[m[1]] = shiftOf(s[1])
			continue
		}
		v = strings.TrimSuffix(strings.TrimSuffix(v, "ULL"), "U")
		if n, err := strconv.ParseInt(v, 0, 64); err == nil {
			out[m[1]] = n
		}
	}
	return out
}

// TestConstants type-checks this package's constant declarations and compares
// every uapi-named constant with the value the headers give it.
func TestConstants(t *testing.T) {
	_, uringSrc := parseHeader(t, "testdata/io_uring.h")
	_, ublkSrc := parseHeader(t, "testdata/ublk_cmd.h")
	want := headerConstants(uringSrc)
	for k, v := range headerConstants(ublkSrc) {
		want[k] = v
	}
	// Not in the 6.12 headers, or defined there by an expression this test does
	// not evaluate (checked by TestEncodedOpcodes instead).
	notInHeader := map[string]bool{
		"IORING_OP_LAST_6_12":          true,
		"UBLK_F_USER_RECOVERY_FAIL_IO": true,
		"UBLK_IO_RES_ABORT":            true,
		"UBLK_CMD_GET_FEATURES":        true,
		"UBLK_CMD_DEL_DEV_ASYNC":       true,
		"UBLK_TAG_OFF":                 true,
		"UBLK_QID_OFF":                 true,
		"UBLK_MAX_NR_QUEUES":           true,
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range []string{"uring.go", "ublk.go"} {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("ublksys", fset, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || strings.ToUpper(name) != name || strings.HasPrefix(name, "UBLK_U_") {
			continue
		}
		got, _ := constant.Int64Val(c.Val())
		w, ok := want[name]
		if !ok {
			if !notInHeader[name] {
				t.Errorf("%s = %d: not found in the headers", name, got)
			}
			continue
		}
		if got != w {
			t.Errorf("%s = %#x, header says %#x", name, got, w)
		}
		checked++
	}
	if checked < 80 {
		t.Errorf("only %d constants checked; header parsing broke?", checked)
	}
	if want["IORING_OP_URING_CMD"] != IORING_OP_URING_CMD || want["IORING_OP_LAST"] != IORING_OP_LAST_6_12 {
		t.Errorf("enum io_uring_op parse: URING_CMD=%d LAST=%d", want["IORING_OP_URING_CMD"], want["IORING_OP_LAST"])
	}
}

// TestEncodedOpcodes checks the ioctl encoding against the numbers measured on
// a 6.12 kernel (kernel-facts.md, section 4) and the header's _IOR/_IOWR use.
func TestEncodedOpcodes(t *testing.T) {
	tests := []struct {
		name    string
		got     uint32
		want    uint32
		nr      uint32
		io      bool
		iowrHdr bool
	}{
		{"GET_DEV_INFO", UBLK_U_CMD_GET_DEV_INFO, 0x80207502, UBLK_CMD_GET_DEV_INFO, false, false},
		{"ADD_DEV", UBLK_U_CMD_ADD_DEV, 0xC0207504, UBLK_CMD_ADD_DEV, false, true},
		{"DEL_DEV", UBLK_U_CMD_DEL_DEV, 0xC0207505, UBLK_CMD_DEL_DEV, false, true},
		{"START_DEV", UBLK_U_CMD_START_DEV, 0xC0207506, UBLK_CMD_START_DEV, false, true},
		{"STOP_DEV", UBLK_U_CMD_STOP_DEV, 0xC0207507, UBLK_CMD_STOP_DEV, false, true},
		{"SET_PARAMS", UBLK_U_CMD_SET_PARAMS, 0xC0207508, UBLK_CMD_SET_PARAMS, false, true},
		{"GET_PARAMS", UBLK_U_CMD_GET_PARAMS, 0x80207509, UBLK_CMD_GET_PARAMS, false, false},
		{"START_USER_RECOVERY", UBLK_U_CMD_START_USER_RECOVERY, 0xC0207510, UBLK_CMD_START_USER_RECOVERY, false, true},
		{"END_USER_RECOVERY", UBLK_U_CMD_END_USER_RECOVERY, 0xC0207511, UBLK_CMD_END_USER_RECOVERY, false, true},
		{"GET_DEV_INFO2", UBLK_U_CMD_GET_DEV_INFO2, 0x80207512, UBLK_CMD_GET_DEV_INFO2, false, false},
		{"GET_FEATURES", UBLK_U_CMD_GET_FEATURES, 0x80207513, UBLK_CMD_GET_FEATURES, false, false},
		{"FETCH_REQ", UBLK_U_IO_FETCH_REQ, 0xC0107520, UBLK_IO_FETCH_REQ, true, true},
		{"COMMIT_AND_FETCH_REQ", UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0xC0107521, UBLK_IO_COMMIT_AND_FETCH_REQ, true, true},
		{"NEED_GET_DATA", UBLK_U_IO_NEED_GET_DATA, 0xC0107522, UBLK_IO_NEED_GET_DATA, true, true},
	}
	_, ublkSrc := parseHeader(t, "testdata/ublk_cmd.h")
	flat := regexp.MustCompile(`\\\s*\n\s*`).ReplaceAllString(ublkSrc, " ")
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %#x, want %#x", tt.name, tt.got, tt.want)
		}
		enc := EncodeCtrl
		prefix := "UBLK_U_CMD_"
		if tt.io {
			enc = EncodeIO
			prefix = "UBLK_U_IO_"
		}
		if v, ok := enc(tt.nr, true); !ok || v != tt.want {
			t.Errorf("encode %s = %#x, %v; want %#x", tt.name, v, ok, tt.want)
		}
		if v, ok := enc(tt.nr, false); tt.nr < UBLK_CMD_GET_FEATURES && (!ok || v != tt.nr) {
			t.Errorf("legacy %s = %#x, %v; want %#x", tt.name, v, ok, tt.nr)
		}
		m := regexp.MustCompile(`#define\s+` + prefix + tt.name + `\s+(_IOW?R?)\(`).FindStringSubmatch(flat)
		if m == nil {
			t.Errorf("%s%s not in header", prefix, tt.name)
			continue
		}
		if (m[1] == "_IOWR") != tt.iowrHdr {
			t.Errorf("%s: header uses %s", tt.name, m[1])
		}
	}
	if _, ok := EncodeCtrl(UBLK_CMD_GET_FEATURES, false); ok {
		t.Error("GET_FEATURES has no legacy number")
	}
	if _, ok := EncodeCtrl(0x7f, true); ok {
		t.Error("unknown command encoded")
	}
}

func TestUserCopyOffset(t *testing.T) {
	if got, want := UserCopyOffset(1, 2, 512), int64(0x80000000+1<<41+2<<25+512); got != want {
		t.Errorf("UserCopyOffset = %#x, want %#x", got, want)
	}
	if got := DescAreaOffset(2, 4096); got != 2*98304 {
		t.Errorf("DescAreaOffset(2) = %d", got)
	}
	if got := DescAreaSize(128, 4096); got != 4096 {
		t.Errorf("DescAreaSize(128) = %d", got)
	}
}
