// Package ublksys holds the kernel ABI that fabraid's io_uring and ublk
// packages speak: the uapi structs and constants of
// include/uapi/linux/io_uring.h and include/uapi/linux/ublk_cmd.h, the ioctl
// encoding of ublk commands, and the raw io_uring_setup(2),
// io_uring_enter(2) and io_uring_register(2) system calls.
//
// It is the only place below kernel/ that spells uapi names; kernel/uring and
// kernel/ublk expose Go names on top of it. Nothing here allocates, locks or
// keeps state.
//
// # Layout checks
//
// testdata/ holds the two headers as shipped by Linux 6.12 (Debian's
// linux-source-6.12). layout_test.go computes every struct's size and field
// offsets from that header text with a small C layout calculator and compares
// them with the Go structs here, so the check runs without cgo. When updating
// to a newer kernel, copy the new headers into testdata/ and run the test.
package ublksys
