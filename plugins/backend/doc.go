// Package backend is the interface between fabraidd and the NVMe-oF
// target backends (kernel nvmet, SPDK nvmf_tgt, a vendor's target), served
// by separate, crash-isolated plugin binaries through hashicorp/go-plugin
// over gRPC.
//
// # Interface
//
// Backend is declarative like kernel/nvmet's Spec → Diff → Apply: Apply
// takes every desired Export of one Scope (an NQN prefix the caller owns)
// and converges the target to it, reading the target's actual state first,
// so re-applying a converged state changes nothing and a run interrupted
// by a crash is finished by the next one. Exports of the scope not in the
// request are removed; objects outside the scope are never touched. List
// returns the actual state, SetANAState changes one listener's ANA group
// state, Remove drops one export.
//
// # Wire
//
// There is no protoc in the build, so the gRPC service is declared by hand
// (grpc.ServiceDesc) and its messages are the Go structs of this package in
// encoding/gob, through a codec registered under the content subtype
// "fabraid-gob" (so a backend is written in Go against this package). go-plugin's own services (health, stdio, controller)
// keep protobuf. Errors cross the wire typed: Kind maps to a gRPC status
// code and back (ErrNotFound, ErrConflict, ErrNotSupported, ErrTransient;
// a dead plugin is ErrTransient). Secret values travel in gob only and
// print as "<secret>" in every fmt verb and in JSON, so a plugin that logs a request (go-plugin
// forwards plugin stderr into the host's log) logs no key.
//
// # Versions
//
// Handshake is go-plugin's magic cookie; protocol versions are negotiated
// with VersionedPlugins (the highest both sides speak). Version 1 is the
// interface of this file. A plugin speaking another version, or one that
// is not a fabraid plugin, is refused with an error naming both.
//
// # Hosting
//
// Runner starts a plugin binary from Dir after checking it (regular file,
// owned by root or the daemon's user, not writable by group or others,
// and the SHA-256 checksum when configured), restarts it after a crash
// (the exports live in the target, not in the plugin, so a crash drops no
// path) and reports the failed call as ErrTransient.
package backend
