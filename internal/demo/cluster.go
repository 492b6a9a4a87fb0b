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
// use it from every node through its NVMe multipath head. node3 creates
// the volume, so node3 is its owner (it runs the parity engine). Then node3
// loses power under I/O: another node takes the volume over (failover: a
// larger owner epoch, the storage fence, a degraded assembly, the same NQN
// exported from the new owner), node2's write pauses and completes without
// an I/O error, node3 boots again with the same disks and comes back as a
// non-owner, only what was written meanwhile is resynced; a scrub checks
// every stripe and every node reads the data back.
//
// Each guest runs clusterScript under busybox sh. They coordinate through
// the host-shared directory: "<guest>.event.<name>" files (what
// vmtest.Env.Signal writes) and host requests for the power cut and the
// boot ("<guest>.hostreq.<boot>.<n>", see internal/vmtest/hostreq.go).

// clusterScript is the payload of every guest; it branches on the guest
// name and on the boot number.
const clusterScript = `#!/bin/sh
set -e
me=$FABRAID_VMTEST_GUEST
boot=$(sed -n 's/.*fabraid\.boot=\([0-9]*\).*/\1/p' /proc/cmdline)
boot=${boot:-1}
sh=/mnt/host
addr() { echo "$FABRAID_VMTEST_ADDRS" | tr , '\n' | sed -n "s/^$1=//p"; }
say() { echo "== $*"; }
signal() { : > "$sh/$me.event.$1"; }
# waitfor GUEST EVENT: list the directory (a 9p client may cache a negative
# dentry for a file another guest created).
waitfor() {
	i=0
	until ls "$sh" 2>/dev/null | grep -qx "$1.event.$2"; do
		i=$((i+1)); [ $i -lt 4000 ] || { echo "timed out waiting for $1 to $2"; exit 1; }
		sleep 0.2
	done
}
req=0
# hostreq TEXT: ask the host (qemu) for what a guest cannot do itself.
hostreq() {
	req=$((req+1))
	echo "$*" > "$sh/$me.tmpreq.$boot.$req"
	mv "$sh/$me.tmpreq.$boot.$req" "$sh/$me.hostreq.$boot.$req"
	until ls "$sh" 2>/dev/null | grep -qx "$me.hostresp.$boot.$req"; do sleep 0.2; done
	r=$(cat "$sh/$me.hostresp.$boot.$req")
	[ "$r" = ok ] || { echo "host request '$*': $r"; exit 1; }
}
fab() {
	echo "\$ fabraid $*"
	fabraid "$@" || { echo "-- fabraidd log:"; tail -40 /tmp/fabraidd.log; exit 1; }
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
		*"deadline exceeded"*|*"timed out"*) i=$((i+1)); [ $i -lt 30 ] || { echo "$out"; exit 1; }
			echo "   etcd was slow ($out); again"; sleep 2 ;;
		*) echo "$out"; echo "-- fabraidd log:"; tail -40 /tmp/fabraidd.log; exit 1 ;;
		esac
	done
	echo "$out"
}
# field NAME: the first string field NAME of "fabraid volume show vol0 --json"
# (the volume's own fields come before its members').
field() { fabraid volume show vol0 --json 2>/dev/null | grep -o "\"$1\": *\"[^\"]*\"" | head -1 | sed 's/.*"\([^"]*\)"$/\1/'; }
# waitstate STATE: poll the volume until it is in STATE, printing changes.
waitstate() {
	i=0; last=
	while :; do
		st=$(field state)
		[ "$st" = "$last" ] || { echo "   volume vol0: ${st:-?}"; last=$st; }
		[ "$st" = "$1" ] && return 0
		i=$((i+1)); [ $i -lt 600 ] || { fabraid volume show vol0; exit 1; }
		sleep 1
	done
}
head_dev() {
	i=0
	while :; do
		d=$(field device)
		[ -n "$d" ] && [ -b "$d" ] && { echo "$d"; return 0; }
		i=$((i+1)); [ $i -lt 300 ] || { fabraid volume show vol0 >&2; exit 1; }
		sleep 1
	done
}
# check OFFSET_MB COUNT_MB NAME: read through this node's head and compare.
check() {
	want=$(cat "$sh/md5-$3")
	got=$(dd if=$dev bs=1M skip=$1 count=$2 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
	if [ "$got" = "$want" ]; then echo "   $3 ($2 MiB at $1 MiB): intact"; else echo "   $3: DATA DIFFERS"; exit 1; fi
}
# put OFFSET_MB COUNT_MB NAME: write random data through this node's head.
put() {
	dd if=/dev/urandom of=/tmp/$3 bs=1M count=$2 2>/dev/null
	dd if=/tmp/$3 of=$dev bs=1M seek=$1 oflag=direct conv=fsync 2>/dev/null
	md5sum < /tmp/$3 | cut -d' ' -f1 > "$sh/md5-$3"
	echo "   wrote $3: $2 MiB at $1 MiB through $dev, no I/O error"
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
		i=$((i+1)); [ $i -lt 300 ] || { tail -50 /tmp/fabraidd.log; exit 1; }
		sleep 0.2
	done
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

case $me.$boot in
node1.1)
	say "node1: fabraid doctor (what this kernel offers)"
	fabraid doctor || true
	say "node1: make the cluster (embedded etcd, TLS with client certificates)"
	fab cluster init --name demo
	fabraid cluster token --ttl 10m > "$sh/token-node2"
	fabraid cluster token --ttl 10m > "$sh/token-node3"
	signal init
	waitfor node3 joined
	fab cluster status
	waitfor node3 created
	fab volume show vol0
	waitfor node3 verified
	say "node1: cut the power of node3, the volume's owner (qemu killed), while node2 writes"
	signal cutting
	hostreq kill node3
	waitfor node2 written2
	waitstate degraded
	say "node1: $(field owner) took vol0 over from node3 (a larger owner epoch; node3's members are missing)"
	fab volume list
	say "node1: power node3 on again, same disks"
	hostreq boot node3
	waitfor node3 up
	waitstate optimal
	fab volume show vol0
	say "node1: scrub (parity checked against the data of every stripe)"
	fab volume scrub vol0 --wait
	signal scrubbed
	waitfor node2 done
	waitfor node3 done
	fab cluster status
	signal finished
	;;
node2.1|node3.1)
	waitfor node1 init
	[ $me = node2 ] || waitfor node2 joined
	fab cluster join "$(addr node1)" --token "$(cat $sh/token-$me)"
	signal joined
	if [ $me = node3 ]; then
		say "node3: a 4+2 volume over the three nodes (two members each: losing a node costs 2 of 6); node3 owns it"
		create_vol0
		signal created
	fi
	waitfor node3 created
	dev=$(head_dev)
	say "$me: the volume's NVMe multipath head here is $dev"
	if [ $me = node2 ]; then
		say "node2: write 16 MiB"
		put 0 16 before
		signal written
		waitfor node1 cutting
		say "node2: write 8 MiB more while node3, the owner, loses power (the write pauses until another node owns the volume)"
		t0=$(date +%s)
		put 16 8 during
		say "node2: that write took $(( $(date +%s) - t0 )) s, through the failover"
		signal written2
		waitfor node1 scrubbed
		say "node2: read everything back"
		check 0 16 before
		check 16 8 during
		signal done
		waitfor node1 finished
	else
		say "node3: read what node2 wrote"
		waitfor node2 written
		check 0 16 before
		signal verified
		sleep 3600 # the power cut ends this boot
	fi
	;;
node3.*)
	waitfor node1 scrubbed
	dev=$(head_dev)
	say "node3: back as a non-owner: the owner is $(field owner); read everything back through $dev"
	[ "$(field owner)" != node3 ] || { echo "node3 owns vol0 again after its return"; exit 1; }
	check 0 16 before
	check 16 8 during
	signal done
	waitfor node1 finished
	;;
esac
say "$me: done"
`

// runCluster boots the three nodes and runs clusterScript in each.
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
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	fmt.Println("demo: ok — three nodes made one cluster; a 4+2 volume over their drives kept every byte through its owner's power cut under I/O (another node took it over; the write paused, no I/O error), resynced only what was written while the node was away, and scrubbed clean")
	return nil
}
