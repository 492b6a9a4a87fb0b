package backend

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// serviceName is the gRPC service of interface version 1.
const serviceName = "fabraid.backend.v1.Backend"

// empty is the message of calls without arguments or results (gob needs
// an exported field).
type empty struct{ OK bool }

type listRequest struct{ Scope string }
type listResponse struct{ Exports []Export }
type removeRequest struct{ NQN string }

// GRPCPlugin is the go-plugin plugin of interface version 1. In a plugin
// binary set Impl; on the host leave it nil.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Backend
}

// GRPCServer registers the hand-written service on s.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&serviceDesc, p.Impl)
	return nil
}

// GRPCClient returns a Backend that calls the plugin over c.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &client{cc: c}, nil
}

func unary[Req, Resp any](name string, call func(Backend, context.Context, *Req) (*Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, toStatus(err)
			}
			resp, err := call(srv.(Backend), ctx, req)
			if err != nil {
				return nil, toStatus(err)
			}
			return resp, nil
		},
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*Backend)(nil),
	Methods: []grpc.MethodDesc{
		unary("Features", func(b Backend, ctx context.Context, _ *empty) (*Features, error) {
			f, err := b.Features(ctx)
			return &f, err
		}),
		unary("Apply", func(b Backend, ctx context.Context, r *ApplyRequest) (*ApplyResult, error) {
			res, err := b.Apply(ctx, *r)
			return &res, err
		}),
		unary("List", func(b Backend, ctx context.Context, r *listRequest) (*listResponse, error) {
			ex, err := b.List(ctx, r.Scope)
			return &listResponse{Exports: ex}, err
		}),
		unary("SetANAState", func(b Backend, ctx context.Context, r *ANARequest) (*empty, error) {
			return &empty{}, b.SetANAState(ctx, *r)
		}),
		unary("Remove", func(b Backend, ctx context.Context, r *removeRequest) (*empty, error) {
			return &empty{}, b.Remove(ctx, r.NQN)
		}),
	},
}

// client is the host side of the service.
type client struct{ cc *grpc.ClientConn }

func (c *client) call(ctx context.Context, method string, req, resp any) error {
	err := c.cc.Invoke(ctx, "/"+serviceName+"/"+method, req, resp, grpc.CallContentSubtype(codecName))
	return fromStatus(method, err)
}

func (c *client) Features(ctx context.Context) (Features, error) {
	var f Features
	err := c.call(ctx, "Features", &empty{}, &f)
	return f, err
}

func (c *client) Apply(ctx context.Context, req ApplyRequest) (ApplyResult, error) {
	var res ApplyResult
	err := c.call(ctx, "Apply", &req, &res)
	return res, err
}

func (c *client) List(ctx context.Context, scope string) ([]Export, error) {
	var resp listResponse
	err := c.call(ctx, "List", &listRequest{Scope: scope}, &resp)
	return resp.Exports, err
}

func (c *client) SetANAState(ctx context.Context, req ANARequest) error {
	return c.call(ctx, "SetANAState", &req, &empty{})
}

func (c *client) Remove(ctx context.Context, nqn string) error {
	return c.call(ctx, "Remove", &removeRequest{NQN: nqn}, &empty{})
}
