// Package layout is the pure stripe mathematics of the fabraid parity engine.
//
// It maps logical volume addresses to member chunks and plans, for one stripe
// and one request, which chunk ranges must be read, computed and written. It
// performs no I/O, holds no state and allocates only the plans it returns, so
// every function here is exhaustively testable.
//
// # Geometry
//
// A volume stripes over Groups groups of K data + M parity members (RAID-x0).
// The logical address space is cut into stripes of K*ChunkSize data bytes.
// Stripe s lives in group s % Groups at row s / Groups; a row is one chunk on
// each of the group's K+M members, at member data offset row*ChunkSize.
//
// Within a row, stripe position p (0..K-1 data, K..K+M-1 parity) lives on
// group member (p + row) % (K+M): parity rotates by one member per row, so
// parity work and sequential reads spread evenly over all members.
//
// # Failure domains
//
// Every member carries a failure domain (its node). CheckDomains refuses a
// placement that puts more than M members of one group in one domain, because
// losing that domain would then lose more than M chunks of some stripe.
package layout
