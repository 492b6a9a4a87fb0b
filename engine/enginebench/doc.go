// Package enginebench measures the parity engine against the raw speed of
// its own members, in one run, with the same I/O sizes and parallelism, and
// reports ratios (the numbers that transfer between machines) next to the
// absolute rates (which do not).
//
// It backs `fabraid bench engine`. Members are files in a directory
// (tmpfs such as /dev/shm by default, so the test measures the engine's CPU
// and memory cost rather than a disk). Method and results are recorded in
// docs/performance.md, section "Parity engine".
package enginebench
