// Package nsd is the home of fabraid's IBM Storage Scale integration: the
// volumes become NSDs that every node opens through its local NVMe
// multipath head. The work is split into one package per job:
//
//   - nsd/name maps a fabraid volume name to a valid NSD name (IBM's
//     mmcrnsd rules: letters, digits and '_', not starting with "gpfs").
//   - nsd/discover lists the consumer devices for the nsddevices user exit
//     (lines "nvmeXnY generic", heads in /proc/partitions only).
//   - nsd/stanza writes the %nsd stanzas that mmcrnsd -F reads.
//
// The commands are `fabraid nsd devices|stanza|show` and `fabraid wait`;
// the scripts Scale runs are in packaging/scale; docs/storage-scale.md has
// the admin flow and what was tested (Scale itself cannot run here: the
// documented contracts are implemented and tested exactly as documented).
package nsd
