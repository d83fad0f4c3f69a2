package idem

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadAllInto(t *testing.T) {
	t.Parallel()
	body := []byte("0123456789")
	tests := []struct {
		name      string
		buf       []byte
		length    int64
		wantSame  bool // the body is read into buf
		wantBytes []byte
	}{
		{"Room", make([]byte, 0, 11), 10, true, body},
		{"RoomToSpare", make([]byte, 0, 100), 10, true, body},
		{"NoRoomForTheByteAfter", make([]byte, 0, 10), 10, false, body},
		{"NoBuffer", nil, 10, false, body},
		{"UnknownLength", make([]byte, 0, 100), -1, false, body},
		{"LongerThanDeclared", make([]byte, 0, 6), 5, false, body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readAllInto(tt.buf, bytes.NewReader(body), tt.length)
			if err != nil || !bytes.Equal(got, tt.wantBytes) {
				t.Fatalf("readAllInto = %q, %v; want %q", got, err, tt.wantBytes)
			}
			if same := cap(tt.buf) > 0 && &got[:1][0] == &tt.buf[:1][0]; same != tt.wantSame {
				t.Errorf("read into the buffer given: %t, want %t", same, tt.wantSame)
			}
		})
	}
}

func TestBodyBuffer(t *testing.T) {
	t.Parallel()
	for _, length := range []int64{-1, 0, maxPooledBody, maxPooledBody + 1} {
		if b := bodyBuffer(length); b != nil {
			t.Errorf("bodyBuffer(%d) = a buffer of cap %d, want none", length, cap(b))
		}
	}
	// Other tests recycle buffers too, and the pool may drop any: whatever
	// bodyBuffer returns must be empty, have room for the body and the byte
	// after it, and be the smallest of bodySizes that has.
	for _, length := range []int64{1, 99, 1023, 1024, 5000, 16 << 10, maxPooledBody - 1} {
		for range 10 {
			b := bodyBuffer(length)
			if b == nil || len(b) != 0 || int64(cap(b)) <= length || bodySize(length+1) != bodySize(int64(cap(b))) || cap(b) != bodySizes[bodySize(length+1)] {
				t.Fatalf("bodyBuffer(%d) = len %d cap %d, want empty, cap %d", length, len(b), cap(b), bodySizes[bodySize(length+1)])
			}
			b = append(b, "leftover"...)
			recycleBody(b)
		}
	}
	// Buffers of other sizes, as io.ReadAll's, are not kept.
	recycleBody(make([]byte, 7, 100))
	for range 10 {
		if b := bodyBuffer(50); cap(b) == 100 {
			t.Fatal("a buffer of a size not in bodySizes was kept")
		}
	}
}

// TestBodyReaderReadsAsBytesReader holds the body a handler reads to what
// bytes.Reader does: reads of every size, ReadAt and Seek.
func TestBodyReaderReadsAsBytesReader(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "x", `{"amount":4200,"currency":"usd","customer":"cus_123"}`, strings.Repeat("0123456789", 1000)} {
		if err := iotest.TestReader(&bodyReader{s: []byte(body)}, []byte(body)); err != nil {
			t.Errorf("body of %d bytes: %v", len(body), err)
		}
	}
	b := &bodyReader{s: []byte("0123456789")}
	var w strings.Builder
	if _, err := b.Seek(4, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(&w, b); n != 6 || err != nil || w.String() != "456789" {
		t.Errorf("io.Copy after Seek(4) = %d, %v, %q; want 6, nil, 456789", n, err, w.String())
	}
	if !b.detach() {
		t.Fatal("detach of a body nobody reads = false")
	}
	if n, err := b.Seek(0, io.SeekStart); err != nil || n != 0 {
		t.Fatalf("Seek(0) after detach = %d, %v", n, err)
	}
	if got, err := io.ReadAll(b); len(got) != 0 || err != nil {
		t.Errorf("a detached body reads %q, %v; want nothing", got, err)
	}
	if n, err := b.ReadAt(make([]byte, 4), 0); n != 0 || err != io.EOF {
		t.Errorf("a detached body's ReadAt = %d, %v; want 0, EOF", n, err)
	}
}
