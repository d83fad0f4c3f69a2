package idem

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// readWithin returns what read returns, waiting 30 s at most: a read that
// never ends (one into a full buffer reads nothing, again and again) fails
// the test instead of hanging it.
func readWithin(t *testing.T, read func() ([]byte, error)) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := read()
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("the body was not read within 30 s")
		return nil, nil
	}
}

// TestReadAllInto checks that a body is read into the buffer given when it
// has room for the declared length and the byte after it, and otherwise
// into one made for exactly that, when the length is known.
func TestReadAllInto(t *testing.T) {
	t.Parallel()
	const body = "0123456789"
	tests := []struct {
		name     string
		buf      []byte
		body     string
		length   int64
		wantSame bool // the body is read into buf
		wantCap  int  // of the buffer read into, when not buf; 0 for any
	}{
		{"Room", make([]byte, 0, 11), body, 10, true, 0},
		{"RoomToSpare", make([]byte, 0, 100), body, 10, true, 0},
		{"NoRoomForTheByteAfter", make([]byte, 0, 10), body, 10, false, 11},
		{"NoBuffer", nil, body, 10, false, 11},
		{"UnknownLength", make([]byte, 0, 100), body, -1, false, 0},
		{"LongerThanDeclared", make([]byte, 0, 6), body, 5, false, 0},
		{"Empty", make([]byte, 0, 1), "", 0, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readWithin(t, func() ([]byte, error) { return readAllInto(tt.buf, strings.NewReader(tt.body), tt.length) })
			if err != nil || !bytes.Equal(got, []byte(tt.body)) {
				t.Fatalf("readAllInto = %q, %v; want %q", got, err, tt.body)
			}
			if same := cap(tt.buf) > 0 && &got[:1][0] == &tt.buf[:1][0]; same != tt.wantSame {
				t.Errorf("read into the buffer given: %t, want %t", same, tt.wantSame)
			}
			if tt.wantCap != 0 && cap(got) != tt.wantCap {
				t.Errorf("read into a buffer of %d bytes, want one of %d: the declared length and the byte after it", cap(got), tt.wantCap)
			}
		})
	}
}
