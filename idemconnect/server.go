package idemconnect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
)

// MethodOpts are the settings of one procedure; see [idemrpc.MethodOpts].
type MethodOpts = idemrpc.MethodOpts

// Procedure is a procedure that the interceptor handles, with its
// response type; make one with [NewProcedure].
type Procedure struct {
	name        string
	opts        MethodOpts
	newResponse func(proto.Message) connect.AnyResponse
}

// NewProcedure returns the procedure of the given name
// ("/payments.v1.PaymentService/CreatePayment", the generated
// ...Procedure constant), whose response is a Res:
//
//	idemconnect.NewProcedure[paymentsv1.Payment](paymentsv1connect.PaymentServiceCreatePaymentProcedure, nil)
//
// opts may be nil.
func NewProcedure[Res any, PRes interface {
	*Res
	proto.Message
}](name string, opts *MethodOpts) Procedure {
	p := Procedure{name: name, newResponse: func(m proto.Message) connect.AnyResponse {
		return connect.NewResponse[Res](m.(PRes))
	}}
	if opts != nil {
		p.opts = *opts
	}
	return p
}

// Config configures a [Server].
type Config struct {
	// Procedures are the procedures the interceptor handles. Whether a call
	// without a key is refused is the middleware's [idem.Config.Require],
	// which sees a POST to the procedure's name. Required.
	Procedures []Procedure
}

// Server is idem's interceptor for connect-go handlers. Pass it to
// connect.WithInterceptors after the service's auth interceptor.
type Server struct {
	rpc   *idemrpc.Server
	procs map[string]Procedure
	log   *slog.Logger
}

var _ connect.Interceptor = (*Server)(nil)

// NewServer returns the interceptor that runs the calls of
// cfg.Procedures behind mw. Build mw with [idem.New] and a
// [idem.Config.ClientID] that reads the client from the request's
// context, which is the call's.
func NewServer(mw *idem.Middleware, cfg *Config) (*Server, error) {
	if cfg == nil || len(cfg.Procedures) == 0 {
		return nil, errors.New("idemconnect: Config.Procedures is required")
	}
	rc := &idemrpc.Config{Methods: map[string]idemrpc.MethodOpts{}}
	procs := map[string]Procedure{}
	for _, p := range cfg.Procedures {
		if p.newResponse == nil {
			return nil, fmt.Errorf("idemconnect: procedure %q was not made by NewProcedure", p.name)
		}
		rc.Methods[p.name] = p.opts
		procs[p.name] = p
	}
	rpc, err := idemrpc.NewServer(mw, rc)
	if err != nil {
		return nil, err
	}
	return &Server{rpc: rpc, procs: procs, log: slog.Default()}, nil
}

// WrapUnary implements connect.Interceptor.
func (s *Server) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		p, ok := s.procs[spec.Procedure]
		if spec.IsClient || !ok || exempt(spec.IdempotencyLevel) {
			return next(ctx, req)
		}
		msg, ok := req.Any().(proto.Message)
		if !ok {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("idemconnect: the request of %s is no protobuf message", spec.Procedure))
		}
		ans, err := s.rpc.Call(ctx, idemrpc.CallParams{
			Method:  spec.Procedure,
			Keys:    req.Header().Values(idemrpc.HeaderKey),
			Request: msg,
			Handler: func(ctx context.Context) (proto.Message, *spb.Status) {
				resp, err := next(ctx, req)
				if err != nil {
					return nil, statusOf(err)
				}
				m, ok := resp.Any().(proto.Message)
				if !ok {
					return nil, &spb.Status{Code: int32(connect.CodeInternal), Message: "The response is no protobuf message."}
				}
				return m, nil
			},
		})
		if err != nil {
			s.log.ErrorContext(ctx, "idemconnect: the call could not be run", "procedure", spec.Procedure, "err", err)
			return nil, connect.NewError(connect.CodeInternal, errors.New("the idempotency layer could not run this procedure; nothing was done"))
		}
		if ans.Status != nil {
			cerr := errorOf(ans.Status)
			setMeta(cerr.Meta(), ans)
			return nil, cerr
		}
		res := p.newResponse(ans.Message)
		setMeta(res.Header(), ans)
		return res, nil
	}
}

// WrapStreamingClient implements connect.Interceptor: streams pass through.
func (s *Server) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: streams pass
// through.
func (s *Server) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// exempt reports whether a procedure of this idempotency level passes
// through, as GET and PUT do on HTTP.
func exempt(l connect.IdempotencyLevel) bool {
	return l == connect.IdempotencyNoSideEffects || l == connect.IdempotencyIdempotent
}

// setMeta sets the metadata of an answer.
func setMeta(h interface{ Set(string, string) }, ans idemrpc.Answer) {
	if ans.Replayed {
		h.Set(idemrpc.HeaderReplayed, "true")
	}
	if ans.RetryAfter > 0 {
		h.Set(idemrpc.HeaderPushback, strconv.FormatInt(ans.RetryAfter.Milliseconds(), 10))
	}
}

// statusOf is the status of a handler's error.
func statusOf(err error) *spb.Status {
	st := &spb.Status{Code: int32(connect.CodeOf(err)), Message: err.Error()}
	var ce *connect.Error
	if errors.As(err, &ce) {
		st.Message = ce.Message()
		for _, d := range ce.Details() {
			st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
		}
	}
	return st
}

// errorOf is the Connect error of a status.
func errorOf(st *spb.Status) *connect.Error {
	cerr := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage()))
	for _, a := range st.GetDetails() {
		if d, err := connect.NewErrorDetail(a); err == nil {
			cerr.AddDetail(d)
		}
	}
	return cerr
}

// RunPhases runs the phases of an operation for the call whose context
// ctx is, behind a Server whose middleware is in [idem.ModeTwoPhase]:
// see [idemrpc.RunPhases]. It returns nil with the response in out, or the
// call's error. The final phase writes its answer with
// [idemrpc.WriteMessage] or [idemrpc.WriteStatus].
func RunPhases(ctx context.Context, ph idem.Phases, out proto.Message) error {
	if st := idemrpc.RunPhases(ctx, ph, out); st != nil {
		return errorOf(st)
	}
	return nil
}
