// Package placement picks the drives of a new volume across the nodes of a
// cluster and the node that owns it. It is pure: it reads plain inputs
// (nodes with their failure domain and free drives, a request) and returns
// a Placement or an error that says what is missing; the caller (the
// volume create path of the daemon) reads the node registry, calls Place
// and creates the volume from the result.
//
// # The rule
//
// A volume is Groups groups of K data + M parity members; member slot
// g*(K+M)+i is member i of group g, the order engine.Create takes. The
// engine refuses a group that puts more than M members in one failure
// domain (engine/layout CheckDomains): losing that domain would lose more
// than M chunks of a stripe. Place never returns such a placement, so the
// engine's AllowDomainViolation is never needed.
//
// A placement exists exactly when, counting at most Groups*M free drives
// per domain, the domains together have Groups*(K+M) drives: each group
// takes at most M from a domain (a max-flow argument; the brute-force test
// checks it on small inputs). Place fills one group after the other, each
// slot from the domain with the most drives left that has fewer than M in
// the group, which keeps that condition true until the last slot.
//
// # Preferences
//
//   - Size: the engine uses the smallest member's size on every member, so
//     Place picks the largest member size S for which a placement exists
//     and, within a domain, the smallest drives of at least S (bigger ones
//     stay free for other volumes). Drives of one size give S = that size.
//   - Spread: among equally good domains the one with fewer members of this
//     volume so far, then the name; within a domain the node with fewer
//     members of this volume, then the drive ID. The result is
//     deterministic: the same inputs give the same placement.
//   - Owner: the allowed node (the request's Nodes, or every node) that
//     owns the fewest volumes (Node.Owned), then holds the most members of
//     this volume (fewer remote members), then sorts first by name.
//
// # Refusals
//
// Every error wraps ErrNoPlacement and names the shortfall in the
// cluster's terms, e.g. "4+2 needs 3 nodes with 2 free drives each, or 6
// nodes with 1; have 2 nodes (a: 2 free, b: 2 free)". Domains are spoken
// of as nodes when every domain is one node.
package placement
