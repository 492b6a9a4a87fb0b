package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
)

// The cluster demo: three guests (node1, node2, node3) with two drives each
// make one cluster on etcd, one 4+2 volume whose members sit on all three
// nodes (two per node, so losing a node costs every stripe two chunks), and
// use it through their NVMe multipath heads. node3 creates the volume; the
// cluster picks its owner (the node running the parity engine), which the
// demo reads from "volume show --json" and publishes to the other guests.
// The roles follow from it: the owner loses power under I/O, the first
// other node (by name) writes, the second reads and is the one that asks
// the host for the power cut and the boot. Another node takes the volume
// over (failover: a larger owner epoch, the storage fence, a degraded
// assembly, the same NQN exported from the new owner), the writer's write
// pauses and completes without an I/O error, the old owner boots again
// with the same disks and comes back as a non-owner, only what was
// written meanwhile is resynced; a scrub checks every stripe and every
// node reads the data back.
//
// Each guest runs clusterScript under busybox sh. They coordinate through
// the host-shared directory: "<guest>.event.<name>" files (what
// vmtest.Env.Signal writes; a power cut removes its guest's), host requests
// for the power cut and the boot ("<guest>.hostreq.<boot>.<n>", see
// internal/vmtest/hostreq.go), and "fact-<name>" files: one value each that
// a guest observed (the owner, the pause, the resync), which survive a
// power cut, tell the other guests their roles, and are what runCluster
// checks and summarises after the run (facts.go).

// clusterHelpers are clusterScript's shell functions. They have no side
// effects until called; script_test.go runs some of them on the host.
const clusterHelpers = `
say() { echo "== $*"; }
signal() { : > "$sh/$me.event.$1"; }
# seen NAME: NAME is in the share (listing the directory: a 9p client may
# cache a negative dentry for a file another guest created).
seen() { ls "$sh" 2>/dev/null | grep -qx "$1"; }
# await NAME: wait until NAME is in the share; end this guest too when
# another one failed.
await() {
	i=0
	while l=$(ls "$sh" 2>/dev/null); ! echo "$l" | grep -qx "$1"; do
		if echo "$l" | grep -qx fact-failure; then echo "DEMO FAILED elsewhere: $(cat "$sh/fact-failure")"; exit 1; fi
		i=$((i+1)); [ $i -lt 4000 ] || fail "timed out waiting for $1"
		sleep 0.2
	done
}
# waitfor GUEST EVENT
waitfor() { await "$1.event.$2"; }
# fact NAME VALUE: publish an observed value as "fact-NAME".
fact() {
	printf '%s\n' "$2" > "$sh/.fact-$1.$me"
	mv "$sh/.fact-$1.$me" "$sh/fact-$1"
}
# factof NAME: wait for fact NAME and print it.
factof() { await "fact-$1"; cat "$sh/fact-$1"; }
# fail REASON: end the demo with REASON (kept as the fact "failure").
fail() {
	echo "DEMO FAILED: $me: $*"
	seen fact-failure || fact failure "$me: $*" 2>/dev/null || true
	exit 1
}
# roles OWNER: the writer and the reader, the two other nodes in name order.
roles() {
	case $1 in node1|node2|node3) ;; *) fail "no such node as owner: \"$1\"" ;; esac
	for n in node1 node2 node3; do [ "$n" = "$1" ] || printf '%s ' "$n"; done
	echo
}
# jstr/jnum/jbool NAME: the first string/number/boolean field NAME of the
# JSON on stdin; jobj NAME: the first object NAME (without nested objects).
jstr() { grep -o "\"$1\": *\"[^\"]*\"" | head -1 | sed 's/.*"\([^"]*\)"$/\1/'; }
jnum() { grep -o "\"$1\": *-\{0,1\}[0-9][0-9.]*" | head -1 | sed 's/.*: *//'; }
jbool() { grep -o "\"$1\": *[a-z]*" | head -1 | sed 's/.*: *//'; }
jobj() { grep -o "\"$1\": *{[^{}]*}" | head -1; }
show() { fabraid volume show vol0 --json 2>/dev/null; }
# field NAME: the string field NAME of vol0 (the volume's own fields come
# before its members').
field() { show | jstr "$1"; }
# logattr KEY LINE: the value of KEY=value in a logfmt line.
logattr() { printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }
# cs: this guest's uptime in centiseconds; secs CS: CS as seconds (0.1 s).
cs() { awk '{printf "%d\n", $1*100}' /proc/uptime; }
secs() { echo "$(($1 / 100)).$(($1 % 100 / 10))"; }
# mib BYTES: BYTES in MiB (0.1 MiB).
mib() { awk -v b="$1" 'BEGIN{printf "%.1f\n", b/1048576}'; }
`

// clusterScript is the payload of every guest; it branches on the guest
// name, on the boot number and on the roles the observed owner decides.
const clusterScript = `#!/bin/sh
set -e
me=$FABRAID_VMTEST_GUEST
boot=$(sed -n 's/.*fabraid\.boot=\([0-9]*\).*/\1/p' /proc/cmdline)
boot=${boot:-1}
sh=/mnt/host
addr() { echo "$FABRAID_VMTEST_ADDRS" | tr , '\n' | sed -n "s/^$1=//p"; }
` + clusterHelpers + `
req=0
# hostreq TEXT: ask the host (qemu) for what a guest cannot do itself.
hostreq() {
	req=$((req+1))
	echo "$*" > "$sh/$me.tmpreq.$boot.$req"
	mv "$sh/$me.tmpreq.$boot.$req" "$sh/$me.hostreq.$boot.$req"
	until seen "$me.hostresp.$boot.$req"; do sleep 0.2; done
	r=$(cat "$sh/$me.hostresp.$boot.$req")
	[ "$r" = ok ] || fail "host request '$*': $r"
}
fab() {
	echo "\$ fabraid $*"
	fabraid "$@" || { echo "-- fabraidd log:"; tail -40 /tmp/fabraidd.log; fail "fabraid $* failed"; }
}
# create_vol0: "fabraid volume create vol0 --data 4 --parity 2", repeated
# when it failed only on an etcd deadline (software-emulated guests right
# after a join); a repeat that finds the volume made by the first is fine.
create_vol0() {
	i=0
	echo "\$ fabraid volume create vol0 --data 4 --parity 2"
	until out=$(fabraid volume create vol0 --data 4 --parity 2 2>&1); do
		case $out in
		*exists*) echo "   (the first attempt made it)"; waitstate optimal; return 0 ;;
		*"deadline exceeded"*|*"timed out"*) i=$((i+1)); [ $i -lt 30 ] || fail "volume create: $out"
			echo "   etcd was slow ($out); again"; sleep 2 ;;
		*) echo "$out"; echo "-- fabraidd log:"; tail -40 /tmp/fabraidd.log; fail "volume create: $out" ;;
		esac
	done
	echo "$out"
}
# waitstate STATE: poll the volume until it is in STATE, printing changes.
waitstate() {
	i=0; last=
	while :; do
		st=$(field state)
		[ "$st" = "$last" ] || { echo "   volume vol0: ${st:-?}"; last=$st; }
		[ "$st" = "$1" ] && return 0
		i=$((i+1)); [ $i -lt 600 ] || { fabraid volume show vol0; fail "vol0 not $1 after 600 s (it is ${st:-?})"; }
		sleep 1
	done
}
head_dev() {
	i=0
	while :; do
		d=$(field device)
		[ -n "$d" ] && [ -b "$d" ] && { echo "$d"; return 0; }
		i=$((i+1)); [ $i -lt 300 ] || { fabraid volume show vol0 >&2; fail "no NVMe head for vol0 after 300 s"; }
		sleep 1
	done
}
# check OFFSET_MB COUNT_MB NAME: read through this node's head and compare.
check() {
	want=$(cat "$sh/md5-$3")
	got=$(dd if=$dev bs=1M skip=$1 count=$2 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
	[ "$got" = "$want" ] || fail "$3 ($2 MiB at $1 MiB) read through $dev: DATA DIFFERS"
	echo "   $3 ($2 MiB at $1 MiB): intact"
}
# put OFFSET_MB COUNT_MB NAME: write random data through this node's head.
put() {
	dd if=/dev/urandom of=/tmp/$3 bs=1M count=$2 2>/dev/null
	dd if=/tmp/$3 of=$dev bs=1M seek=$1 oflag=direct conv=fsync 2>/tmp/dd.err || fail "the write of $3 failed: $(cat /tmp/dd.err)"
	md5sum < /tmp/$3 | cut -d' ' -f1 > "$sh/md5-$3"
	echo "   wrote $3: $2 MiB at $1 MiB through $dev, no I/O error"
}
# put_through_cut OFFSET_MB COUNT_MB NAME: like put, in pieces of 256 KiB
# (each O_DIRECT and flushed), the second half only once the reader has
# cut the owner's power: a piece sent to a dead owner waits until another
# node exports the volume, so the longest piece is the write's pause.
put_through_cut() {
	dd if=/dev/urandom of=/tmp/$3 bs=1M count=$2 2>/dev/null
	n=$(($2 * 4)); k=0; max=0; maxk=0; t0=$(cs)
	while [ $k -lt $n ]; do
		[ $k != 1 ] || signal writing
		[ $k != $((n / 2)) ] || waitfor $reader cut
		a=$(cs)
		dd if=/tmp/$3 of=$dev bs=256K skip=$k seek=$(($1 * 4 + k)) count=1 oflag=direct conv=fsync 2>/tmp/dd.err ||
			fail "piece $k of $3 ($2 MiB at $1 MiB): the write failed: $(cat /tmp/dd.err)"
		d=$(($(cs) - a))
		[ $d -le $max ] || { max=$d; maxk=$k; }
		k=$((k+1))
	done
	total=$(($(cs) - t0))
	md5sum < /tmp/$3 | cut -d' ' -f1 > "$sh/md5-$3"
	fact write_pause_s "$(secs $max)"
	fact write_total_s "$(secs $total)"
	echo "   wrote $3: $2 MiB at $1 MiB through $dev in $(secs $total) s, no I/O error"
	say "$me: the write paused $(secs $max) s (its longest piece, piece $maxk of $n; the other $((n - 1)) took $(secs $((total - max))) s together)"
}
# takeover_facts: once this node sees another owner than the one that lost
# power, publish what the new owner's log says of the takeover (on the new
# owner only).
takeover_facts() {
	i=0
	while now=$(field owner); [ -z "$now" ] || [ "$now" = "$owner" ]; do
		i=$((i+1)); [ $i -lt 300 ] || fail "vol0's owner is still ${now:-none} 300 s after the power cut of $owner"
		sleep 1
	done
	[ "$now" = "$me" ] || return 0
	line=$(grep 'msg="took the volume over"' /tmp/fabraidd.log | grep ' volume=vol0 ' | tail -1)
	[ -n "$line" ] || fail "$me owns vol0 but its log has no takeover of it"
	fact takeover_epoch "$(logattr epoch "$line")"
	fact takeover_previous "$(logattr previous_owner "$line")"
	fact takeover_s "$(awk -v s="$(logattr seconds "$line")" 'BEGIN{printf "%.1f\n", s}')"
}
# resync_facts: on the owner, once the returning members are back in sync,
# publish the resync's size (volume show's rebuild_bytes: the engine's).
resync_facts() {
	[ "$(field owner)" = "$me" ] || return 0
	i=0
	while rb=$(show | jobj rebuild_bytes); [ -z "$rb" ] || [ "$(echo "$rb" | jbool running)" != false ]; do
		i=$((i+1)); [ $i -lt 300 ] || fail "vol0's owner $me shows no finished resync after 300 s"
		sleep 1
	done
	fact resync_partial "$(echo "$rb" | jbool partial)"
	fact resync_regions "$(echo "$rb" | jnum regions)"
	fact resync_bytes "$(echo "$rb" | jnum bytes)"
	fact resync_cover_bytes "$(echo "$rb" | jnum cover_bytes)"
	fact member_bytes "$(echo "$rb" | jnum member_bytes)"
}
# scrub_facts: the last scrub's report (volume show's last_task).
scrub_facts() {
	sr=$(show | jobj scrub)
	[ -n "$sr" ] || fail "volume show has no scrub report after the scrub"
	fact scrub_stripes "$(echo "$sr" | jnum Stripes)"
	fact scrub_skipped "$(echo "$sr" | jnum Skipped)"
	fact scrub_mismatches "$(echo "$sr" | jnum Mismatches)"
	[ "$(echo "$sr" | jnum Mismatches)" = 0 ] || fail "the scrub found $(echo "$sr" | jnum Mismatches) mismatching stripes"
}

# The node's identity and state survive a reboot: the guest's root is an
# initramfs, so /var/lib/fabraid (state_dir) and /etc/nvme (host NQN) live
# on the node's third disk, formatted on the first boot.
mkdir -p /var/lib/fabraid /etc/fabraid
[ "$boot" != 1 ] || mke2fs -q /dev/vdc >/dev/null 2>&1
mount -t ext4 /dev/vdc /var/lib/fabraid
mkdir -p /var/lib/fabraid/nvme
rm -rf /etc/nvme
ln -s /var/lib/fabraid/nvme /etc/nvme
if [ ! -s /etc/nvme/hostnqn ]; then
	id=$(cat /proc/sys/kernel/random/uuid)
	echo "nqn.2014-08.org.nvmexpress:uuid:$id" > /etc/nvme/hostnqn
	echo "$id" > /etc/nvme/hostid
fi
{
	echo "node_name = $me"
	echo "cluster_address = $(addr $me)"
	echo "storage_cidrs = 169.254.77.0/24"
	echo "engine_mode = process"
	echo "metrics_address ="
	# Three software-emulated guests on a shared host: etcd gets slower
	# heartbeats and the owner lease more time than the defaults.
	echo "owner_lease_ttl = 15"
	echo "etcd_heartbeat_ms = 200"
	echo "etcd_election_ms = 2000"
} > /etc/fabraid/fabraid.conf

startd() {
	fabraidd 2>>/tmp/fabraidd.log &
	i=0
	until fabraid volume list >/dev/null 2>&1; do
		i=$((i+1)); [ $i -lt 300 ] || { tail -50 /tmp/fabraidd.log; fail "fabraidd does not answer"; }
		sleep 0.2
	done
}

# owner_first_boot: the owner until its power cut.
owner_first_boot() {
	say "$me: vol0's engine runs here; this node loses power while $writer writes"
	# The power cut ends this boot, or another guest's failure.
	until seen fact-failure; do sleep 1; done
	exit 1
}

writer_run() {
	say "$me: write 16 MiB"
	put 0 16 before
	signal written
	waitfor $reader verified
	say "$me: write 8 MiB more while $owner, the volume's owner, loses power (32 pieces of 256 KiB; a piece sent to a dead owner waits until another node owns the volume)"
	put_through_cut 16 8 during
	signal written2
	takeover_facts
	waitfor $reader optimal
	resync_facts
	waitfor $reader scrubbed
	say "$me: read everything back"
	check 0 16 before
	check 16 8 during
	signal done
	waitfor $reader finished
}

reader_run() {
	say "$me: read what $writer wrote"
	waitfor $writer written
	check 0 16 before
	signal verified
	waitfor $writer writing
	now=$(field owner)
	[ "$now" = "$owner" ] || fail "vol0's owner is ${now:-none} just before the power cut, not $owner"
	say "$me: cut the power of $owner, the volume's owner (qemu killed), while $writer writes"
	hostreq kill $owner
	fact killed $owner
	signal cut
	waitfor $writer written2
	i=0
	while after=$(field owner); { [ -z "$after" ] || [ "$after" = "$owner" ]; } && [ $i -lt 60 ]; do i=$((i+1)); sleep 1; done
	# The failover's point: the owner after the cut differs from the owner before it.
	if [ -z "$after" ] || [ "$after" = "$owner" ]; then fail "the owner after the cut (${after:-none}) is the owner before it ($owner): no failover"; fi
	fact owner_after "$after"
	takeover_facts
	say "$me: $after took vol0 over from $(factof takeover_previous) at owner epoch $(factof takeover_epoch) ($(factof takeover_s) s from its decision to the epoch, by its log); $owner's members are missing"
	waitstate degraded
	fab volume list
	say "$me: power $owner on again, same disks"
	hostreq boot $owner
	waitfor $owner up
	waitstate optimal
	signal optimal
	resync_facts
	fab volume show vol0
	[ "$(factof resync_partial)" = true ] || fail "$owner's members came back with a full rebuild, not a resync of the write-intent bitmap's regions"
	say "$me: $owner's members are back: a partial resync of $(factof resync_regions) write-intent bitmap regions wrote $(mib "$(factof resync_bytes)") MiB to them (one member holds $(mib "$(factof member_bytes)") MiB of data)"
	say "$me: scrub (parity checked against the data of every stripe)"
	fab volume scrub vol0 --wait
	scrub_facts
	say "$me: the scrub checked $(factof scrub_stripes) stripes: $(factof scrub_mismatches) mismatches, $(factof scrub_skipped) skipped"
	signal scrubbed
	say "$me: read what $writer wrote during the power cut"
	check 16 8 during
	waitfor $writer done
	waitfor $owner done
	fab cluster status
	signal finished
}

# owner_returns: the old owner's later boot, with its state and disks.
owner_returns() {
	[ "$(factof owner_before)" = "$me" ] || fail "boot $boot of a node that was not vol0's owner"
	owner=$me
	set -- $(roles "$owner"); writer=$1; reader=$2
	waitfor $reader scrubbed
	dev=$(head_dev)
	i=0
	while now=$(field owner); [ -z "$now" ] && [ $i -lt 60 ]; do i=$((i+1)); sleep 1; done
	fact returned_sees_owner "${now:-none}"
	[ "$now" != "$me" ] || fail "$me owns vol0 again after its return"
	say "$me: back as a non-owner (the owner is $now); read everything back through $dev"
	check 0 16 before
	check 16 8 during
	signal done
	waitfor $reader finished
}

if [ "$boot" = 1 ]; then
	say "$me: fabraidd started, both drives claimed"
	startd
	fabraid drive claim /dev/vda /dev/vdb >/dev/null
else
	say "$me: power is back (boot $boot): fabraidd starts from its state; nothing else is typed"
	startd
	signal up
fi

if [ "$boot" = 1 ]; then
	case $me in
	node1)
		say "node1: fabraid doctor (what this kernel offers)"
		fabraid doctor || true
		say "node1: make the cluster (embedded etcd, TLS with client certificates)"
		fab cluster init --name demo
		fabraid cluster token --ttl 10m > "$sh/token-node2"
		fabraid cluster token --ttl 10m > "$sh/token-node3"
		signal init
		waitfor node3 joined
		fab cluster status
		;;
	*)
		waitfor node1 init
		[ $me = node2 ] || waitfor node2 joined
		fab cluster join "$(addr node1)" --token - < "$sh/token-$me"
		signal joined
		;;
	esac
	if [ $me = node3 ]; then
		say "node3: a 4+2 volume over the three nodes (two members each: losing a node costs 2 of 6)"
		create_vol0
		echo "\$ fabraid volume show vol0 --json   (its owner field)"
		owner=$(field owner)
		echo "   \"owner\": \"$owner\""
		case $owner in node1|node2|node3) ;; *) fail "volume show names no owner of vol0 after its creation (\"$owner\")" ;; esac
		fact owner_before "$owner"
		signal created
	fi
	waitfor node3 created
	owner=$(factof owner_before)
	set -- $(roles "$owner"); writer=$1; reader=$2
	if [ $me = node3 ]; then say "node3: vol0's owner is $owner: $owner will lose power; $writer writes, $reader reads and cuts the power"; fi
	if [ $me = node1 ]; then fab volume show vol0; fi
	dev=$(head_dev)
	say "$me: the volume's NVMe multipath head here is $dev"
	case $me in
	"$owner") owner_first_boot ;;
	"$writer") writer_run ;;
	*) reader_run ;;
	esac
else
	owner_returns
fi
say "$me: done"
`

// runCluster boots the three nodes, runs clusterScript in each and checks
// and summarises the facts they observed.
func runCluster(fabraid, fabraidd string, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	script, err := os.CreateTemp("", "fabraid-demo-*.sh")
	if err != nil {
		return err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString(clusterScript); err != nil {
		return err
	}
	script.Close()
	shared, err := os.MkdirTemp("", "fabraid-demo-share-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(shared)
	if err := os.Chmod(shared, 0o777); err != nil {
		return err
	}
	files := map[string]string{"/vmtest/demo.sh": script.Name()}
	for guest, host := range map[string]string{"/usr/bin/fabraid": fabraid, "/usr/bin/fabraidd": fabraidd} {
		abs, err := filepath.Abs(host)
		if err != nil {
			return err
		}
		files[guest] = abs
	}
	var guests []vmtest.GuestConfig
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("node%d", i)
		guests = append(guests, vmtest.GuestConfig{
			Name: name, Kernel: vmtest.Kernel612, MemoryMB: 768,
			Modules: []string{"configfs", "nvmet", "nvmet_tcp", "nvme_tcp", "ublk_drv", "crc32c_generic", "ext4"},
			Disks: []vmtest.Disk{{Size: 64 << 20, Serial: name + "-nvme0"}, {Size: 64 << 20, Serial: name + "-nvme1"},
				{Size: 32 << 20, Serial: name + "-state"}},
			Files: files,
		})
	}
	fmt.Println("demo: booting three guests on Debian's 6.12 kernel (qemu, software emulation: a few minutes)")
	start := time.Now()
	outcomes, err := vmtest.Boot(ctx, vmtest.BootConfig{
		Guests:  guests,
		Timeout: timeout,
		Command: []string{"/bin/sh", "/vmtest/demo.sh"},
		Log:     printGuestLine,
		Shared:  shared,
	})
	if err != nil {
		return err
	}
	var failed []string
	for _, o := range outcomes {
		if !o.Passed {
			failed = append(failed, fmt.Sprintf("%s: %s", o.Name, o.Reason))
		}
	}
	fmt.Printf("demo: the cluster finished in %v\n", time.Since(start).Round(time.Second))
	f, err := readFacts(shared)
	if err != nil {
		return err
	}
	if r, ok := f["failure"]; ok {
		failed = append([]string{r}, failed...)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	sum, err := summary(f)
	if err != nil {
		return fmt.Errorf("the guests passed but their facts do not add up: %w", err)
	}
	fmt.Println("demo: ok — " + sum)
	return nil
}
