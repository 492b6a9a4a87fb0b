package rpmbuild

import (
	"fmt"
	"strings"
)

// updateHelper is where systemd (248 and later: el9's 252, el10's 256)
// installs the helper its rpm macros call.
const updateHelper = "/usr/lib/systemd/systemd-update-helper"

// Scripts are the RPM scriptlets as shell text; empty means none.
type Scripts struct {
	Post, Preun, Postun, Posttrans string
}

// helperCall is the shape every systemd scriptlet macro expands to:
// "if [ $1 <test> ] && [ -x helper ]; then helper <verb> units || : fi".
func helperCall(test, comment, verb string, units []string) string {
	if len(units) == 0 {
		return ""
	}
	return fmt.Sprintf("if [ $1 %s ] && [ -x %q ]; then\n    # %s\n    %s %s %s || :\nfi\n",
		test, updateHelper, comment, updateHelper, verb, strings.Join(units, " "))
}

// SystemdPost is the expansion of "%systemd_post units": on first
// install ($1 == 1) apply the preset policy ("systemctl --no-reload
// preset"), which enables what the preset file says.
func SystemdPost(units []string) string {
	return helperCall("-eq 1", "Initial installation", "install-system-units", units)
}

// SystemdPreun is the expansion of "%systemd_preun units": on erase
// ($1 == 0, not an upgrade) "systemctl --no-reload disable --now".
func SystemdPreun(units []string) string {
	return helperCall("-eq 0", "Package removal, not upgrade", "remove-system-units", units)
}

// SystemdPostunWithRestart is the expansion of
// "%systemd_postun_with_restart units": on upgrade ($1 >= 1) mark the
// units needs-restart; systemd's own file trigger restarts the marked
// units at the end of the transaction, after its daemon-reload.
func SystemdPostunWithRestart(units []string) string {
	return helperCall("-ge 1", "Package upgrade, not uninstall", "mark-restart-system-units", units)
}

// UdevTag is the udev tag 69-fabraid.rules gives every member and every
// volume head (TAG+="fabraid"); %posttrans replays only devices with it.
const UdevTag = "fabraid"

// udevTrigger runs after every install and upgrade when rules are shipped.
// systemd's own udev file trigger reloads the rules only after %posttrans,
// so it reloads first itself; then a "change" event for the block devices
// udev already tagged fabraid (members and volume heads the previous rules
// recognized) lets the new rules see them. Not every block device: a
// change event replays every rule of every package for each device it
// reaches (dm, md, LVM and multipath rules included). On a first install
// no device has the tag yet, so nothing is replayed (fabraidd is not
// started by SYSTEMD_WANTS either): drives already holding members are
// seen at the next boot, or by hand (docs/install.md). Not in a chroot or
// image build (no /run/systemd/system), and never fatal.
const udevTrigger = `if [ -d /run/systemd/system ] && command -v udevadm >/dev/null 2>&1; then
    # Members and volume heads (tag ` + UdevTag + `): replay them through the new rules
    udevadm control --reload || :
    udevadm trigger --subsystem-match=block --tag-match=` + UdevTag + ` --action=change || :
fi
`

// engineNote tells an administrator who erases the package that volume
// engines still run: the scriptlets never stop them, since stopping one
// removes its volume's block device under its consumers.
const engineNote = `if [ $1 -eq 0 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    if systemctl --quiet is-active 'fabraid-engine@*.service' 2>/dev/null; then
        echo "fabraid: volume engines (fabraid-engine@*.service) keep running; delete or stop the volumes with fabraid before removing the package" >&2
    fi
fi
`

// MakeScripts returns the scriptlets of p, written out as the macros
// expand (the RPM writer does not expand macros).
func MakeScripts(p *Package) Scripts {
	s := Scripts{
		Post:   SystemdPost(p.Units.Managed),
		Preun:  SystemdPreun(p.Units.Managed),
		Postun: SystemdPostunWithRestart(p.Units.Restart),
	}
	for _, u := range p.Units.All {
		if strings.HasPrefix(u, "fabraid-engine@") {
			s.Preun += engineNote
			break
		}
	}
	if p.UdevRules {
		s.Posttrans = udevTrigger
	}
	return s
}
