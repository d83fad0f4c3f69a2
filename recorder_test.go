package idem

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRecorderWriteString(t *testing.T) {
	t.Parallel()
	t.Run("Buffered", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{header: make(http.Header)}
		io.WriteString(rec, "ab")
		rec.Write([]byte("c"))
		io.WriteString(rec, "d")
		if rec.statusCode() != http.StatusOK || rec.body.String() != "abcd" {
			t.Errorf("got %d %q, want 200 abcd", rec.statusCode(), rec.body.String())
		}
	})
	t.Run("Streamed", func(t *testing.T) {
		t.Parallel()
		client := httptest.NewRecorder()
		rec := &recorder{header: make(http.Header), client: client, stream: &streamState{max: 3}}
		rec.WriteHeader(http.StatusCreated)
		io.WriteString(rec, "ab")
		if rec.body.String() != "ab" || client.Body.String() != "ab" {
			t.Errorf("kept %q and sent %q, want ab and ab", rec.body.String(), client.Body.String())
		}
		io.WriteString(rec, "cd") // past max: sent, not kept
		if !rec.stream.overflow || rec.body.Len() != 0 || client.Code != http.StatusCreated || client.Body.String() != "abcd" {
			t.Errorf("overflow %t, kept %q, sent %d %q; want true, nothing, 201 abcd", rec.stream.overflow, rec.body.String(), client.Code, client.Body.String())
		}
	})
}
