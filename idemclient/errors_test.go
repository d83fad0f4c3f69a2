package idemclient

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestCheckResponse(t *testing.T) {
	t.Parallel()
	const problem = `{"type":"about:blank","title":"Idempotency-Key is already used","detail":"currency differs","code":"key_reused","status":422}`
	tests := []struct {
		name        string
		method      string
		key         string
		status      int
		contentType string
		body        string
		want        *KeyReusedError // nil: no error, body left open
	}{
		{
			name: "ProblemDocument", method: http.MethodPost, key: `"k1"`, status: 422,
			contentType: "application/problem+json", body: problem,
			want: &KeyReusedError{StatusCode: 422, Key: "k1", Type: "about:blank", Title: "Idempotency-Key is already used", Detail: "currency differs", Code: "key_reused"},
		},
		{
			name: "PlainJSONKeepsOnlyBody", method: http.MethodPatch, key: "bare-key", status: 422,
			contentType: "application/json", body: problem,
			want: &KeyReusedError{StatusCode: 422, Key: "bare-key"},
		},
		{
			name: "ProblemWithNonStringMembers", method: http.MethodPost, key: `"k2"`, status: 422,
			contentType: "application/problem+json", body: `{"title":7,"detail":"d","code":42}`,
			want: &KeyReusedError{StatusCode: 422, Key: "k2", Detail: "d"},
		},
		{
			name: "MalformedProblem", method: http.MethodPost, key: `"k3"`, status: 422,
			contentType: "application/problem+json", body: `{"title":`,
			want: &KeyReusedError{StatusCode: 422, Key: "k3"},
		},
		{name: "NotUnprocessable", method: http.MethodPost, key: `"k"`, status: 400, body: "bad"},
		{name: "Success", method: http.MethodPost, key: `"k"`, status: 201, body: "ok"},
		{name: "UnkeyedPost", method: http.MethodPost, status: 422, body: "validation"},
		{name: "IdempotentMethod", method: http.MethodPut, key: `"k"`, status: 422, body: "validation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, "http://127.0.0.1/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.key != "" {
				req.Header.Set(HeaderKey, tt.key)
			}
			body := &trackedBody{Reader: strings.NewReader(tt.body)}
			resp := &http.Response{StatusCode: tt.status, Header: http.Header{}, Body: body, Request: req}
			if tt.contentType != "" {
				resp.Header.Set("Content-Type", tt.contentType)
			}
			err = CheckResponse(resp)
			if tt.want == nil {
				if err != nil || body.closed {
					t.Errorf("CheckResponse = %v (body closed %v), want nil with the body open", err, body.closed)
				}
				return
			}
			var got *KeyReusedError
			if !errors.As(err, &got) || !errors.Is(err, ErrKeyReused) {
				t.Fatalf("CheckResponse = %v, want a *KeyReusedError", err)
			}
			if got.StatusCode != tt.want.StatusCode || got.Key != tt.want.Key || got.Type != tt.want.Type ||
				got.Title != tt.want.Title || got.Detail != tt.want.Detail || got.Code != tt.want.Code {
				t.Errorf("KeyReusedError = %+v, want %+v", *got, *tt.want)
			}
			if string(got.Body) != tt.body || !body.closed {
				t.Errorf("Body = %q (closed %v), want %q and closed", got.Body, body.closed, tt.body)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"KeyReusedWithDetail", &KeyReusedError{StatusCode: 422, Detail: "amount differs", Title: "t"},
			"idemclient: idempotency key reused with a different request (status 422): amount differs"},
		{"KeyReusedWithTitle", &KeyReusedError{StatusCode: 422, Title: "Idempotency-Key is already used"},
			"idemclient: idempotency key reused with a different request (status 422): Idempotency-Key is already used"},
		{"RetryOneAttempt", &RetryError{Attempts: 1, Err: io.EOF}, "idemclient: after 1 attempt: EOF"},
		{"RetryAttempts", &RetryError{Attempts: 3, Err: io.EOF}, "idemclient: after 3 attempts: EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
	if err := (&RetryError{Err: io.EOF}); !errors.Is(err, io.EOF) {
		t.Error("RetryError does not unwrap to its error")
	}
}

// trackedBody records whether it was closed.
type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error {
	b.closed = true
	return nil
}
