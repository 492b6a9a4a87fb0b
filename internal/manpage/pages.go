package manpage

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// roff escapes text for a man page line: backslashes, and a leading '.'
// or apostrophe that roff would take for a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func header(b *bytes.Buffer, name, section string, date time.Time, source string) {
	fmt.Fprintf(b, ".TH %q %q %q %q %q\n", strings.ToUpper(name), section, date.UTC().Format("Jan 2006"), source, "fabraid manual")
	b.WriteString(".nh\n.ad l\n")
}

// confEntry is one block of the configuration file: its keys (with the
// default or example shown) and the comment above them.
type confEntry struct {
	keys []string // "key = value"
	text []string
}

var confKeyLine = regexp.MustCompile(`^#([a-z_]+) =\s?(.*)$`)

// parseConf reads the shipped fabraid.conf: the first comment block is the
// file's description, then each comment paragraph followed by commented
// "#key = value" lines describes those keys.
func parseConf(conf []byte) (intro []string, entries []confEntry) {
	sc := bufio.NewScanner(bytes.NewReader(conf))
	var pending []string
	inIntro, first := true, true
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), " \t")
		switch m := confKeyLine.FindStringSubmatch(l); {
		case l == "":
			if inIntro && !first {
				for len(pending) > 0 && pending[0] == "" {
					pending = pending[1:]
				}
				intro, inIntro = pending, false
			}
			pending = nil
		case m != nil:
			kv := m[1] + " = " + m[2]
			if len(pending) > 0 || len(entries) == 0 {
				entries = append(entries, confEntry{text: pending})
				pending = nil
			}
			e := &entries[len(entries)-1]
			e.keys = append(e.keys, strings.TrimSpace(kv))
		case strings.HasPrefix(l, "#"):
			if first { // the title line
				first = false
				continue
			}
			pending = append(pending, strings.TrimSpace(strings.TrimPrefix(l, "#")))
		}
	}
	return intro, entries
}

// ConfPage writes fabraid.conf(5) from the shipped configuration file
// (package packaging's DefaultConfig), so that the page says what the file
// says, key for key.
func ConfPage(conf []byte, date time.Time, source string) []byte {
	var b bytes.Buffer
	header(&b, "fabraid.conf", "5", date, source)
	b.WriteString(".SH NAME\nfabraid.conf \\- fabraid node configuration\n")
	b.WriteString(".SH SYNOPSIS\n.B /etc/fabraid/fabraid.conf\n")
	intro, entries := parseConf(conf)
	b.WriteString(".SH DESCRIPTION\nThe configuration of \\fBfabraidd\\fR(8) and \\fBfabraid\\fR(1) on one node.\n")
	for _, l := range intro {
		if l == "" {
			l = ".PP" // an empty comment line: a new paragraph
		} else {
			l = roff(l)
		}
		b.WriteString(l + "\n")
	}
	b.WriteString(".PP\nA key this version does not know (one of a newer release after a downgrade, or one an upgrade removed) " +
		"is not an error: fabraidd logs a warning naming the file, the line and the key, and starts. " +
		"A repeated key, a line that is not \\fIkey\\fR = \\fIvalue\\fR, or an invalid value of a known key is an error, " +
		"and fabraidd exits with status 2.\n")
	b.WriteString(".SH KEYS\nEach entry shows the default, or an example where the text says so.\n")
	for _, e := range entries {
		b.WriteString(".TP\n")
		for i, k := range e.keys {
			if i > 0 {
				b.WriteString(".TQ\n")
			}
			fmt.Fprintf(&b, ".B %s\n", roff(k))
		}
		for _, l := range e.text {
			b.WriteString(roff(l) + "\n")
		}
	}
	b.WriteString(".SH FILES\n.TP\n.I /etc/fabraid/fabraid.conf\n" +
		"Installed commented out (every line a default); the package never replaces an edited file " +
		"(a new default lands next to it as \\fIfabraid.conf.rpmnew\\fR).\n")
	b.WriteString(".SH SEE ALSO\n\\fBfabraidd\\fR(8), \\fBfabraid\\fR(1), \\fI/usr/share/doc/fabraid/admin-guide.md\\fR\n")
	return b.Bytes()
}

// daemonSections are the parts of fabraidd(8) that no command help holds:
// inserted into the generated page before SEE ALSO.
const daemonSections = `.SH OPERATION
fabraidd is the fabraid node daemon. At start and then every 10 seconds it
reconciles: it scans the claimed drives, assembles every volume found on them
(a volume with members missing waits \fBassembly_timeout\fR seconds after its
first member appeared, then starts degraded if every group keeps at least K
members, never with fewer), runs each volume's engine, exports the volume over
NVMe/TCP and connects this node to it, so that its consumer device is the NVMe
multipath head /dev/nvmeXnY. It answers \fBfabraid\fR(1) on a root-only unix
socket and serves Prometheus metrics. In a cluster it also runs the etcd
control plane (an embedded etcd member on the first nodes) and the owner
leases of the volumes.
.PP
Each volume's engine (the Reed\-Solomon parity engine behind a ublk device) runs
as the systemd unit \fBfabraid\-engine@\fIvolume\fB.service\fR when systemd is
PID 1 and the template is installed, else as a child process
(\fBengine_mode\fR). Engines outlive a daemon restart or upgrade and are adopted
by the next daemon; a crashed engine is restarted and re\-attaches with ublk user
recovery.
.SH SYSTEMD
\fBfabraidd.service\fR is Type=notify: "systemctl start fabraidd" returns once the
first reconcile has adopted or started every engine and the API answers. It
sends watchdog pings (WatchdogSec=30s) and uses KillMode=process, so stopping or
restarting the daemon never stops an engine. A member device appearing (udev,
\fI69\-fabraid.rules\fR) pulls the unit in through SYSTEMD_WANTS.
.SH SIGNALS
.TP
.B SIGTERM, SIGINT
Stop the daemon; engines keep serving their volumes.
.SH EXIT STATUS
.TP
.B 0
Stopped by SIGTERM or SIGINT.
.TP
.B 1
Failed (the error is logged).
.TP
.B 2
Bad usage or configuration (an invalid value, a repeated key; an unknown key
is only a warning, see \fBfabraid.conf\fR(5)).
.SH FILES
.TP
.I /etc/fabraid/fabraid.conf
The configuration, \fBfabraid.conf\fR(5).
.TP
.I /var/lib/fabraid
Drive claims and volume records (0700).
.TP
.I /run/fabraid/api.sock
The API socket (root only); engine sockets and specs under \fI/run/fabraid/engines\fR.
.TP
.I /usr/libexec/fabraid/plugins
The only directory target backend plugins are run from.
.SH ENVIRONMENT
.TP
.B NOTIFY_SOCKET, WATCHDOG_USEC
Set by systemd: readiness and watchdog.
.TP
.B JOURNAL_STREAM
Set by systemd: log journald\-native entries instead of logfmt text.
`

// withDaemonSections inserts daemonSections into the page of the root
// command fabraidd, before its SEE ALSO, and names fabraid.conf(5) there.
func withDaemonSections(page []byte) []byte {
	s := string(page)
	i := strings.Index(s, ".SH SEE ALSO\n")
	if i < 0 {
		return append(page, daemonSections+".SH SEE ALSO\n\\fBfabraid.conf\\fR(5), \\fBfabraid\\fR(1)\n"...)
	}
	return []byte(s[:i] + daemonSections + ".SH SEE ALSO\n\\fBfabraid.conf\\fR(5), \\fBfabraid\\fR(1), " + s[i+len(".SH SEE ALSO\n"):])
}
