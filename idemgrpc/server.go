package idemgrpc

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
)

// Config configures a [Server]; see [idemrpc.Config].
type Config = idemrpc.Config

// MethodOpts are the settings of one method; see [idemrpc.MethodOpts].
type MethodOpts = idemrpc.MethodOpts

// Server is idem's unary server interceptor for grpc-go.
type Server struct {
	rpc *idemrpc.Server
	log *slog.Logger
}

// NewServer returns the interceptor that runs calls behind mw. Build mw
// with [idem.New] and a [idem.Config.ClientID] that reads the client from
// the request's context, which is the call's.
func NewServer(mw *idem.Middleware, cfg *Config) (*Server, error) {
	rpc, err := idemrpc.NewServer(mw, cfg)
	if err != nil {
		return nil, err
	}
	return &Server{rpc: rpc, log: slog.Default()}, nil
}

// UnaryInterceptor returns the interceptor, for grpc.ChainUnaryInterceptor
// after the service's auth interceptor.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor { return s.Intercept }

// Intercept is the unary server interceptor.
func (s *Server) Intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the request of %s is no protobuf message", info.FullMethod)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	ans, err := s.rpc.Call(ctx, idemrpc.CallParams{
		Method:  info.FullMethod,
		Keys:    md.Get(idemrpc.HeaderKey),
		Request: msg,
		Handler: func(ctx context.Context) (proto.Message, *spb.Status) {
			resp, err := handler(ctx, req)
			if err != nil {
				return nil, status.Convert(err).Proto()
			}
			m, ok := resp.(proto.Message)
			if !ok {
				return nil, status.New(codes.Internal, "The response is no protobuf message.").Proto()
			}
			return m, nil
		},
	})
	if err != nil {
		s.log.ErrorContext(ctx, "idemgrpc: the call could not be run", "method", info.FullMethod, "err", err)
		return nil, status.Error(codes.Internal, "The idempotency layer could not run this method; nothing was done.")
	}
	return answer(ctx, ans)
}

// answer sends ans: its metadata, then its message or status.
func answer(ctx context.Context, ans idemrpc.Answer) (any, error) {
	if ans.Replayed {
		grpc.SetHeader(ctx, metadata.Pairs(idemrpc.HeaderReplayed, "true"))
	}
	if ans.RetryAfter > 0 {
		grpc.SetTrailer(ctx, metadata.Pairs(idemrpc.HeaderPushback, strconv.FormatInt(ans.RetryAfter.Milliseconds(), 10)))
	}
	if ans.Status != nil {
		return nil, status.ErrorProto(ans.Status)
	}
	return ans.Message, nil
}

// RunPhases runs the phases of an operation for the call whose context
// ctx is, behind a Server whose middleware is in [idem.ModeTwoPhase]:
// see [idemrpc.RunPhases]. It returns nil with the response in out, or the
// call's error status. The final phase writes its answer with
// [idemrpc.WriteMessage] or [WriteError].
func RunPhases(ctx context.Context, ph idem.Phases, out proto.Message) error {
	if st := idemrpc.RunPhases(ctx, ph, out); st != nil {
		return status.ErrorProto(st)
	}
	return nil
}

// WriteError records err, a gRPC status error, as a final phase's answer:
// see [idemrpc.WriteStatus].
func WriteError(w http.ResponseWriter, err error) {
	idemrpc.WriteStatus(w, status.Convert(err).Proto())
}
