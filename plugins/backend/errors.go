package backend

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Typed errors. Backends wrap them (fmt.Errorf("...: %w", ErrNotFound));
// they survive the gRPC wire: the host side's error wraps the same value.
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrNotSupported = errors.New("not supported by this target")
	// ErrTransient: retry later (the plugin or the target is restarting,
	// a timeout, a dead plugin).
	ErrTransient = errors.New("transient failure")
	// ErrInvalid: the request itself is wrong; retrying will not help.
	ErrInvalid = errors.New("invalid request")
)

var kinds = []struct {
	err  error
	code codes.Code
}{
	{ErrNotFound, codes.NotFound},
	{ErrConflict, codes.AlreadyExists},
	{ErrNotSupported, codes.Unimplemented},
	{ErrTransient, codes.Aborted}, // Unavailable is the connection's own
	{ErrInvalid, codes.InvalidArgument},
}

// toStatus turns a backend error into a gRPC status error for the wire.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return status.Error(k.code, err.Error())
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.Error(codes.Aborted, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// errConnection marks a call that failed because the plugin connection
// broke (the plugin died): the Runner then starts a new plugin.
var errConnection = errors.New("plugin connection lost")

// wireError is an error that came back from a plugin.
type wireError struct {
	kind error // one of the typed errors, or nil
	conn bool  // the connection broke
	msg  string
}

func (e *wireError) Error() string { return e.msg }

func (e *wireError) Unwrap() []error {
	out := []error{}
	if e.kind != nil {
		out = append(out, e.kind)
	}
	if e.conn {
		out = append(out, errConnection)
	}
	return out
}

// fromStatus turns a gRPC error into a typed error. A broken connection
// (the plugin died) is codes.Unavailable, hence ErrTransient.
func fromStatus(op string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("backend %s: %w", op, &wireError{kind: ErrTransient, conn: true, msg: err.Error()})
	}
	var kind error
	for _, k := range kinds {
		if st.Code() == k.code {
			kind = k.err
		}
	}
	conn := st.Code() == codes.Unavailable
	if conn || st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded {
		kind = ErrTransient
	}
	return fmt.Errorf("backend %s: %w", op, &wireError{kind: kind, conn: conn, msg: st.Message()})
}
