package idemrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/keyspec"
)

// Config configures a [Server].
type Config struct {
	// Methods sets, by full method name ("/payments.v1.PaymentService/CreatePayment"),
	// where a method's key comes from. A method not named takes it from the
	// "idempotency-key" metadata. Whether a call without a key is refused
	// is the middleware's [idem.Config.Require], which sees a POST to the
	// method's full name: the default requires a key on every method, and
	// a policy exempts methods as it exempts routes. Defaults to none.
	Methods map[string]MethodOpts
}

// MethodOpts are the settings of one method.
type MethodOpts struct {
	// KeyField names, by its proto name, a field of the request that
	// carries the key: a string (AIP-155's request_id), or a message whose
	// string field "key" does (AEP-155's IdempotencyKey{key, first_sent}).
	// When the field is empty the "idempotency-key" metadata is used; a
	// call that sends both, with different keys, is refused as malformed.
	// The key in a field may hold any printable ASCII character, as a
	// quoted Idempotency-Key header may. Defaults to "": the metadata only.
	KeyField string
}

// Server runs unary RPCs behind the idem middleware. It is safe for
// concurrent use. The gRPC and Connect interceptors are built on it.
type Server struct {
	h       http.Handler // the middleware in front of run
	fields  map[string]string
	methods sync.Map // full method name -> *method
}

// NewServer returns a Server that runs calls behind mw, built by
// [idem.New] with its [idem.Config.ClientID] reading the client from the
// context that the service's auth interceptor fills (the request's
// context is the call's).
func NewServer(mw *idem.Middleware, cfg *Config) (*Server, error) {
	if mw == nil {
		return nil, errors.New("idemrpc: a Middleware is required")
	}
	s := &Server{fields: map[string]string{}}
	if cfg != nil {
		for name, opts := range cfg.Methods {
			s.fields[name] = opts.KeyField
			if _, err := s.method(name); err != nil {
				return nil, err
			}
		}
	}
	s.h = mw.Wrap(http.HandlerFunc(s.run))
	return s, nil
}

// method is what a Server knows of a method, from its descriptor.
type method struct {
	// exempt is set for a method whose idempotency_level is
	// NO_SIDE_EFFECTS or IDEMPOTENT: as GET and PUT on HTTP, its calls
	// pass through.
	exempt   bool
	keyField protoreflect.FieldDescriptor // nil: the metadata only
	keySub   protoreflect.FieldDescriptor // the "key" of an AEP-155 message field
	output   protoreflect.MessageType
	// missingKey is the message of a call that needs a key and has none.
	missingKey string
}

// method returns what the server knows of a method, from the descriptor
// that its generated code registered.
func (s *Server) method(name string) (*method, error) {
	if m, ok := s.methods.Load(name); ok {
		return m.(*method), nil
	}
	svc, mname, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	if !ok || !strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("idemrpc: %q is no full method name such as /pkg.Service/Method", name)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("idemrpc: method %s: its service is not in the protobuf registry: %w", name, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("idemrpc: method %s: %s is no service", name, svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(mname))
	if md == nil {
		return nil, fmt.Errorf("idemrpc: method %s: service %s has no such method", name, svc)
	}
	m := &method{}
	if opts, ok := md.Options().(*descriptorpb.MethodOptions); ok {
		switch opts.GetIdempotencyLevel() {
		case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
			m.exempt = true
		}
	}
	if m.output, err = protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName()); err != nil {
		return nil, fmt.Errorf("idemrpc: method %s: its response type is not in the protobuf registry: %w", name, err)
	}
	if f := s.fields[name]; f != "" {
		fd := md.Input().Fields().ByName(protoreflect.Name(f))
		switch {
		case fd == nil:
			return nil, fmt.Errorf("idemrpc: method %s: its request %s has no field %q", name, md.Input().FullName(), f)
		case fd.IsList() || fd.IsMap():
			return nil, fmt.Errorf("idemrpc: method %s: key field %q is repeated", name, f)
		case fd.Kind() == protoreflect.StringKind:
		case fd.Kind() == protoreflect.MessageKind:
			sub := fd.Message().Fields().ByName("key")
			if sub == nil || sub.Kind() != protoreflect.StringKind || sub.IsList() {
				return nil, fmt.Errorf("idemrpc: method %s: key field %q is a message without a string field \"key\"", name, f)
			}
			m.keySub = sub
		default:
			return nil, fmt.Errorf("idemrpc: method %s: key field %q is neither a string nor a message with a string \"key\"", name, f)
		}
		m.keyField = fd
	}
	m.missingKey = m.missing(name)
	actual, _ := s.methods.LoadOrStore(name, m)
	return actual.(*method), nil
}

// CallParams describe a unary call to [Server.Call].
type CallParams struct {
	// Method is the full method name, "/payments.v1.PaymentService/CreatePayment".
	Method string
	// Keys are the values of the "idempotency-key" metadata.
	Keys []string
	// Request is the request message.
	Request proto.Message
	// Handler runs the call with ctx, the context an HTTP handler behind
	// the middleware gets: it answers with the response, or with an error
	// status. It may run more than once in ModeAtomic (see
	// [idem.Config.MaxConflictRetries]); exactly one run commits.
	Handler func(ctx context.Context) (proto.Message, *spb.Status)
}

// callKey carries the *call of the request in the context of its runs.
type callKey struct{}

// call is one call through the middleware.
type call struct {
	p CallParams
	// direct: the middleware passed the call through (no key, none
	// needed): resp and status are the handler's answer.
	direct bool
	resp   proto.Message
	status *spb.Status
	// w is the writer of the current run, and wrote says whether
	// RunPhases recorded the run's answer in it.
	w     http.ResponseWriter
	wrote bool
}

// Call runs a unary call behind the middleware and returns its answer. A
// method whose idempotency_level is NO_SIDE_EFFECTS or IDEMPOTENT runs as
// it is. The error is the server's failure, such as a method missing from
// the protobuf registry, never the handler's, which is in Answer.Status;
// an adapter answers it with INTERNAL.
func (s *Server) Call(ctx context.Context, p CallParams) (Answer, error) {
	m, err := s.method(p.Method)
	if err != nil {
		return Answer{}, err
	}
	if m.exempt {
		resp, st := p.Handler(ctx)
		return Answer{Message: resp, Status: st}, nil
	}
	header := make(http.Header, 2)
	header["Content-Type"] = []string{"application/json"}
	if keys := m.keys(p.Request, p.Keys); len(keys) > 0 {
		header[idem.HeaderKey] = keys
	}
	body, err := Canonical(p.Request)
	if err != nil {
		return Answer{Status: newStatus(code.Code_INVALID_ARGUMENT, "The request message cannot be read as JSON: "+err.Error())}, nil
	}
	c := &call{p: p}
	r := &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: p.Method}, RequestURI: p.Method, Host: "rpc",
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: header,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}
	r = r.WithContext(context.WithValue(ctx, callKey{}, c))
	rec := newRecorder()
	s.h.ServeHTTP(rec, r)
	if c.direct {
		return Answer{Message: c.resp, Status: c.status}, nil
	}
	return decode(ctx, rec, func() proto.Message { return m.output.New().Interface() }, m.missingKey)
}

// missing is the message of a call of the method that needs a key and
// has none.
func (m *method) missing(name string) string {
	if m.keyField != nil {
		return fmt.Sprintf("%s requires an idempotency key: send one in the idempotency-key metadata, or in the request's %s field. Use one key per logical call, the same on every retry.", name, m.keyField.Name())
	}
	return fmt.Sprintf("%s requires an idempotency key: send one in the idempotency-key metadata. Use one key per logical call, the same on every retry.", name)
}

// keys returns the Idempotency-Key fields of a call: the metadata's, or
// the request field's as an sf-string.
func (m *method) keys(req proto.Message, md []string) []string {
	if m.keyField == nil {
		return md
	}
	msg := req.ProtoReflect()
	if !msg.Has(m.keyField) {
		return md
	}
	v := msg.Get(m.keyField)
	if m.keySub != nil {
		v = v.Message().Get(m.keySub)
	}
	key := v.String()
	if key == "" {
		return md
	}
	if len(md) == 1 {
		if k, err := keyspec.Parse(md[0]); err == nil && k == key {
			return md
		}
	}
	return append([]string{keyspec.Quote(key)}, md...)
}

// run is the handler behind the middleware: it runs the call, and records
// its answer for the middleware to store.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := ctx.Value(callKey{}).(*call)
	if _, ok := idem.ScopeFromContext(ctx); !ok {
		c.direct = true // the middleware passed the call through
		c.resp, c.status = c.p.Handler(ctx)
		return
	}
	c.w, c.wrote = w, false
	resp, st := c.p.Handler(ctx)
	switch {
	case c.wrote: // RunPhases recorded the answer
	case st != nil:
		WriteStatus(w, st)
	case resp == nil:
		WriteStatus(w, internalStatus("The handler returned neither a response nor an error."))
	default:
		if err := WriteMessage(w, resp); err != nil {
			WriteStatus(w, internalStatus("The response could not be encoded."))
		}
	}
}

// RunPhases runs the phases of an operation for the call whose context
// ctx is, as [idem.Phases.Run] does for an HTTP request, behind a Server
// whose middleware is in [idem.ModeTwoPhase]. The final phase writes the
// answer with [WriteMessage] or [WriteStatus], so that a [idem.Resumer],
// which runs the phases after the first with no call, stores an answer
// that the call's retry can read. RunPhases records the answer as the
// call's and returns it: nil, with the response in out, or the error
// status, UNAVAILABLE with RetryInfo when the operation is unfinished
// (retry with the same key to resume it).
func RunPhases(ctx context.Context, ph idem.Phases, out proto.Message) *spb.Status {
	rec := newRecorder()
	ph.Run(ctx, rec) // an unfinished operation writes its problem
	c, _ := ctx.Value(callKey{}).(*call)
	if c != nil && c.w != nil {
		rec.copyTo(c.w)
		c.wrote = true
	}
	ans, err := decode(ctx, rec, func() proto.Message { proto.Reset(out); return out }, "")
	if err != nil {
		return internalStatus("The operation's final phase wrote no RPC answer: " + err.Error())
	}
	return ans.Status
}
