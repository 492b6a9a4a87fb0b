// Package api is the fabraidd API: the versioned paths, the request and
// reply bodies, and a Client for the CLI.
//
// # Transport
//
// HTTP/1.1 with JSON bodies over a unix socket (default
// /run/fabraid/api.sock, mode 0600 in a 0700 directory: root only). Paths
// start with /v1/. Errors are {"error": "..."} with status 400 (bad request),
// 404 (no such volume), 409 (in use, busy) or 500.
//
//	GET    /v1/node                         -> Node
//	GET    /v1/volumes                      -> []Volume
//	POST   /v1/volumes                      CreateRequest -> Volume
//	GET    /v1/volumes/{ref}                -> Volume   (ref: name or UUID)
//	DELETE /v1/volumes/{ref}
//	POST   /v1/volumes/{ref}/fail           {"slot": N}
//	POST   /v1/volumes/{ref}/replace        {"slot": N, "drive": DEV, "rate": B/s}
//	POST   /v1/volumes/{ref}/rebuild        {"rate": B/s}
//	POST   /v1/volumes/{ref}/scrub          {"repair": bool, "rate": B/s}
//	GET    /v1/volumes/{ref}/requests/{id}  -> OpReply (cluster: a request
//	                                           an operation answered 202 for)
package api
