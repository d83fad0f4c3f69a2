package idem

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/idemkit/idem/internal/bodybuf"
	"github.com/idemkit/idem/internal/race"
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

// TestReadBodyIsMaxBytesReader: readBody, which reads a body of a declared
// length without http.MaxBytesReader, reads what reading the whole body
// through it reads, and refuses what it refuses, for bodies that end with
// their last bytes (as net/http's do), after them, earlier or later than
// they declared, at the limit and past it, or that fail.
func TestReadBodyIsMaxBytesReader(t *testing.T) {
	t.Parallel()
	const max = 64
	body := bytes.Repeat([]byte("0123456789"), 10)
	boom := errors.New("boom")
	readers := map[string]func(n int) io.Reader{
		"EOFWithData": func(n int) io.Reader { return iotest.DataErrReader(bytes.NewReader(body[:n])) },
		"EOFAfter":    func(n int) io.Reader { return bytes.NewReader(body[:n]) },
		"OneByte":     func(n int) io.Reader { return iotest.OneByteReader(bytes.NewReader(body[:n])) },
		"Fails": func(n int) io.Reader {
			return io.MultiReader(bytes.NewReader(body[:n/2]), iotest.ErrReader(boom))
		},
		"FailsOnceWithData": func(n int) io.Reader { return &failOnce{data: body[:n], err: boom} },
	}
	m := &Middleware{cfg: &Config{MaxBodyBytes: max}}
	for name, reader := range readers {
		for _, sent := range []int{1, 10, 63, 64, 65, 100} {
			for _, declared := range []int64{-1, 0, 1, 10, 63, 64} {
				t.Run(fmt.Sprintf("%s/Sent%d/Declared%d", name, sent, declared), func(t *testing.T) {
					t.Parallel()
					wantW := httptest.NewRecorder()
					want, wantErr := readAllInto(nil, http.MaxBytesReader(wantW, io.NopCloser(reader(sent)), max), declared)
					var mbe *http.MaxBytesError
					r := httptest.NewRequest(http.MethodPost, "/", nil)
					r.Body, r.ContentLength = io.NopCloser(reader(sent)), declared
					got, _, rej := m.readBody(httptest.NewRecorder(), r)
					switch {
					case errors.As(wantErr, &mbe):
						if rej == nil || rej.code != ProblemBodyTooLarge {
							t.Fatalf("readBody = %q, %v; want 413 as MaxBytesReader's %v", got, rej, wantErr)
						}
					case wantErr != nil:
						if rej == nil || rej.code != ProblemBodyMalformed {
							t.Fatalf("readBody = %q, %v; want a rejection for %v", got, rej, wantErr)
						}
					case rej != nil || !bytes.Equal(got, want):
						t.Fatalf("readBody = %q, %v; want %q", got, rej, want)
					}
				})
			}
		}
	}
}

// TestReadBodyAllocs: a body of a declared length is read without an
// allocation of its own once the pooled buffer for its size is warm,
// whether its reader returns io.EOF with its last bytes or after them.
func TestReadBodyAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	body := bytes.Repeat([]byte("0123456789"), 100)
	m := &Middleware{cfg: &Config{MaxBodyBytes: 1 << 20}}
	w := httptest.NewRecorder()
	rd := bytes.NewReader(body)
	for name, src := range map[string]io.Reader{"EOFWithData": iotest.DataErrReader(rd), "EOFAfter": rd} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Body, r.ContentLength = io.NopCloser(src), int64(len(body))
		allocs := testing.AllocsPerRun(100, func() {
			rd.Reset(body)
			got, holder, rej := m.readBody(w, r)
			if rej != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s: readBody = %d bytes, %v", name, len(got), rej)
			}
			bodybuf.Recycle(got, holder)
		})
		if allocs > 0 {
			t.Errorf("%s: readBody allocates %v times; want none", name, allocs)
		}
	}
}

// failOnce returns as much of data as fits with err, at its first read,
// and then io.EOF.
type failOnce struct {
	data []byte
	err  error
	done bool
}

func (f *failOnce) Read(p []byte) (int, error) {
	if f.done {
		return 0, io.EOF
	}
	f.done = true
	return copy(p, f.data), f.err
}
