package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/api/payments/v1/paymentsv1connect"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemrpc"
	"github.com/idemkit/idem/internal/bearer"
)

// rpcOperation is CreatePayment as the middleware records it, and as the
// resumer's operations name it.
const rpcOperation = "POST " + paymentsv1.PaymentService_CreatePayment_FullMethodName

// rpcMethods are the RPC API's idempotency settings: CreatePayment takes
// its key from the idempotency-key metadata, or from request_id (AIP-155).
var rpcMethods = map[string]idemrpc.MethodOpts{
	paymentsv1.PaymentService_CreatePayment_FullMethodName: {KeyField: "request_id"},
}

// RPC is the payments API over gRPC and Connect: the same payments,
// store, processor and idempotency middleware as the HTTP API, with the
// client's bearer token in the authorization metadata.
type RPC struct {
	svc     *Service
	grpc    *idemgrpc.Server
	connect *idemconnect.Server
}

// RPC returns the service's RPC API.
func (s *Service) RPC() (*RPC, error) {
	g, err := idemgrpc.NewServer(s.mw, &idemgrpc.Config{Methods: rpcMethods})
	if err != nil {
		return nil, err
	}
	c, err := idemconnect.NewServer(s.mw, &idemconnect.Config{Procedures: []idemconnect.Procedure{
		idemconnect.NewProcedure[paymentsv1.Payment](paymentsv1connect.PaymentServiceCreatePaymentProcedure, &idemconnect.MethodOpts{KeyField: "request_id"}),
	}})
	if err != nil {
		return nil, err
	}
	return &RPC{svc: s, grpc: g, connect: c}, nil
}

// NewGRPCServer returns a gRPC server of PaymentService: the token check,
// then idem's interceptor.
func (r *RPC) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.ChainUnaryInterceptor(r.authGRPC, r.grpc.UnaryInterceptor()))
	srv := grpc.NewServer(opts...)
	paymentsv1.RegisterPaymentServiceServer(srv, grpcPayments{s: r.svc})
	return srv
}

// ConnectHandler returns the pattern and handler of PaymentService over
// Connect (and gRPC-Web, and gRPC over HTTP/2), to mount on the HTTP API's
// server.
func (r *RPC) ConnectHandler() (string, http.Handler) {
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			client, ok := r.authenticate(req.Header())
			if !ok {
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(unauthenticated))
			}
			return next(context.WithValue(ctx, clientKey{}, client), req)
		}
	})
	return paymentsv1connect.NewPaymentServiceHandler(connectPayments{r.svc}, connect.WithInterceptors(auth, r.connect))
}

const unauthenticated = "send authorization: Bearer <secret key>, with a valid key"

// authenticate returns the client of the bearer token in h, the
// authorization metadata.
func (r *RPC) authenticate(h http.Header) (string, bool) {
	token, err := bearer.FromHeader(h)
	if err != nil {
		return "", false
	}
	return r.svc.cfg.Tokens.Client(token)
}

// authGRPC is the token check of the gRPC server.
func (r *RPC) authGRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	client, ok := r.authenticate(http.Header{"Authorization": md.Get("authorization")})
	if !ok {
		return nil, status.Error(codes.Unauthenticated, unauthenticated)
	}
	return handler(context.WithValue(ctx, clientKey{}, client), req)
}

// rpcResumePhases are the phases of CreatePayment after its first, for
// the resumer: their answer is the RPC's.
func (s *Service) rpcResumePhases() idem.Phases { return s.resumePhasesAnswering(answerRPC) }

// answerRPC is the RPC API's answer of a settled payment: the payment,
// whatever its status. A declined or failed payment is an outcome, stored
// and replayed like a success.
func answerRPC(w http.ResponseWriter, p *Payment, _ string) {
	if err := idemrpc.WriteMessage(w, paymentMessage(p)); err != nil {
		idemrpc.WriteStatus(w, &spb.Status{Code: int32(codes.Internal), Message: "The payment could not be encoded."})
	}
}

func paymentMessage(p *Payment) *paymentsv1.Payment {
	return &paymentsv1.Payment{Id: p.ID, Amount: p.Amount, Currency: p.Currency, Customer: p.Customer,
		Description: p.Description, Status: p.Status, Created: p.Created}
}

// createRPC is CreatePayment: it validates every parameter as POST
// /v1/payments does, then runs the payment by phases (with a processor)
// or records it as succeeded.
func (s *Service) createRPC(ctx context.Context, req *paymentsv1.CreatePaymentRequest) (*paymentsv1.Payment, *spb.Status) {
	fields := formSource{
		"amount": strconv.FormatInt(req.GetAmount(), 10), "currency": req.GetCurrency(), "customer": req.GetCustomer(),
	}
	if req.GetDescription() != "" {
		fields["description"] = req.GetDescription()
	}
	params, err := validate(fields)
	if err != nil {
		return nil, invalidParam(err)
	}
	if s.cfg.Processor != nil {
		out := &paymentsv1.Payment{}
		if st := idemrpc.RunPhases(ctx, s.createPhasesAnswering(params, answerRPC), out); st != nil {
			s.cfg.Logger.WarnContext(ctx, "payments: the payment is unfinished; a retry or the resumer resumes it", "code", codes.Code(st.GetCode()))
			return nil, st
		}
		return out, nil
	}
	client, _ := ClientFromContext(ctx)
	scope, _ := idem.ScopeFromContext(ctx)
	p := &Payment{
		ID: NewID(), Object: "payment", Amount: params.Amount, Currency: params.Currency,
		Customer: params.Customer, Description: params.Description, Status: StatusSucceeded,
		Created: s.cfg.Now().Unix(), ClientID: client, IdempotencyKey: scope.Key,
	}
	err = s.cfg.Repo.Insert(ctx, p)
	if err == nil {
		err = s.enqueuePaymentEvent(ctx, p)
	}
	switch {
	case claimRefused(err):
		return nil, &spb.Status{Code: int32(codes.Aborted), Message: "The key is taken."} // the middleware answers from the key
	case err != nil:
		s.cfg.Logger.ErrorContext(ctx, "payments: insert failed", "client_id", client, "err", err)
		return nil, &spb.Status{Code: int32(codes.Unavailable), Message: "The payment could not be recorded, and no card was charged. Retry with the same idempotency key."}
	}
	return paymentMessage(p), nil
}

// invalidParam is the INVALID_ARGUMENT of a *ParamError, naming the field.
func invalidParam(err error) *spb.Status {
	var pe *ParamError
	if !errors.As(err, &pe) {
		pe = &ParamError{Param: "request", Reason: "is invalid"}
	}
	br, _ := anypb.New(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: pe.Param, Description: pe.Reason}}})
	return &spb.Status{Code: int32(codes.InvalidArgument), Message: fmt.Sprintf("%s %s.", pe.Param, pe.Reason), Details: []*anypb.Any{br}}
}

// getRPC is GetPayment.
func (s *Service) getRPC(ctx context.Context, req *paymentsv1.GetPaymentRequest) (*paymentsv1.Payment, *spb.Status) {
	client, _ := ClientFromContext(ctx)
	p, err := s.cfg.Repo.Get(ctx, client, req.GetId())
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, &spb.Status{Code: int32(codes.NotFound), Message: "You have no payment with this id."}
	case err != nil:
		s.cfg.Logger.ErrorContext(ctx, "payments: read failed", "client_id", client, "err", err)
		return nil, &spb.Status{Code: int32(codes.Unavailable), Message: "The payment could not be read; retry."}
	}
	return paymentMessage(p), nil
}

// grpcPayments is PaymentService for grpc-go.
type grpcPayments struct {
	paymentsv1.UnimplementedPaymentServiceServer
	s *Service
}

var _ paymentsv1.PaymentServiceServer = grpcPayments{}

// CreatePayment implements paymentsv1.PaymentServiceServer.
func (g grpcPayments) CreatePayment(ctx context.Context, req *paymentsv1.CreatePaymentRequest) (*paymentsv1.Payment, error) {
	p, st := g.s.createRPC(ctx, req)
	if st != nil {
		return nil, status.ErrorProto(st)
	}
	return p, nil
}

// GetPayment implements paymentsv1.PaymentServiceServer.
func (g grpcPayments) GetPayment(ctx context.Context, req *paymentsv1.GetPaymentRequest) (*paymentsv1.Payment, error) {
	p, st := g.s.getRPC(ctx, req)
	if st != nil {
		return nil, status.ErrorProto(st)
	}
	return p, nil
}

// connectPayments is PaymentService for connect-go.
type connectPayments struct{ s *Service }

var _ paymentsv1connect.PaymentServiceHandler = connectPayments{}

// CreatePayment implements paymentsv1connect.PaymentServiceHandler.
func (c connectPayments) CreatePayment(ctx context.Context, req *connect.Request[paymentsv1.CreatePaymentRequest]) (*connect.Response[paymentsv1.Payment], error) {
	p, st := c.s.createRPC(ctx, req.Msg)
	if st != nil {
		return nil, connectError(st)
	}
	return connect.NewResponse(p), nil
}

// GetPayment implements paymentsv1connect.PaymentServiceHandler.
func (c connectPayments) GetPayment(ctx context.Context, req *connect.Request[paymentsv1.GetPaymentRequest]) (*connect.Response[paymentsv1.Payment], error) {
	p, st := c.s.getRPC(ctx, req.Msg)
	if st != nil {
		return nil, connectError(st)
	}
	return connect.NewResponse(p), nil
}

// connectError is the Connect error of a status.
func connectError(st *spb.Status) *connect.Error {
	err := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage()))
	for _, a := range st.GetDetails() {
		if d, derr := connect.NewErrorDetail(a); derr == nil {
			err.AddDetail(d)
		}
	}
	return err
}
