package bodybuf

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestBodyBuffer(t *testing.T) {
	t.Parallel()
	for _, length := range []int64{-1, 0, maxPooledBody, maxPooledBody + 1} {
		if b, h := Get(length); b != nil || h != nil {
			t.Errorf("Get(%d) = a buffer of cap %d, want none", length, cap(b))
		}
	}
	// Other tests recycle buffers too, and the pool may drop any: whatever
	// Get returns must be empty, have room for the body and the byte
	// after it, and be the smallest of bodySizes that has.
	for _, length := range []int64{1, 99, 1023, 1024, 5000, 16 << 10, maxPooledBody - 1} {
		for range 10 {
			b, h := Get(length)
			if b == nil || len(b) != 0 || int64(cap(b)) <= length || bodySize(length+1) != bodySize(int64(cap(b))) || cap(b) != bodySizes[bodySize(length+1)] {
				t.Fatalf("Get(%d) = len %d cap %d, want empty, cap %d", length, len(b), cap(b), bodySizes[bodySize(length+1)])
			}
			b = append(b, "leftover"...)
			Recycle(b, h)
		}
	}
	// Buffers of other sizes, as io.ReadAll's, are not kept.
	Recycle(make([]byte, 7, 100), nil)
	for range 10 {
		if b, _ := Get(50); cap(b) == 100 {
			t.Fatal("a buffer of a size not in bodySizes was kept")
		}
	}
}

// TestBodyReaderReadsAsBytesReader holds the body a handler reads to what
// bytes.Reader does: reads of every size, ReadAt and Seek.
func TestBodyReaderReadsAsBytesReader(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "x", `{"amount":4200,"currency":"usd","customer":"cus_123"}`, strings.Repeat("0123456789", 1000)} {
		if err := iotest.TestReader(&Reader{s: []byte(body)}, []byte(body)); err != nil {
			t.Errorf("body of %d bytes: %v", len(body), err)
		}
	}
	b := &Reader{s: []byte("0123456789")}
	var w strings.Builder
	if _, err := b.Seek(4, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(&w, b); n != 6 || err != nil || w.String() != "456789" {
		t.Errorf("io.Copy after Seek(4) = %d, %v, %q; want 6, nil, 456789", n, err, w.String())
	}
	if !b.Detach() {
		t.Fatal("Detach of a body nobody reads = false")
	}
	if n, err := b.Seek(0, io.SeekStart); err != nil || n != 0 {
		t.Fatalf("Seek(0) after Detach = %d, %v", n, err)
	}
	if got, err := io.ReadAll(b); len(got) != 0 || err != nil {
		t.Errorf("a detached body reads %q, %v; want nothing", got, err)
	}
	if n, err := b.ReadAt(make([]byte, 4), 0); n != 0 || err != io.EOF {
		t.Errorf("a detached body's ReadAt = %d, %v; want 0, EOF", n, err)
	}
}

// TestBodySize: bodySize is the walk over bodySizes for the smallest size
// of at least n, for every n around each size and between them.
func TestBodySize(t *testing.T) {
	t.Parallel()
	walk := func(n int64) int {
		for i, size := range bodySizes {
			if n <= int64(size) {
				return i
			}
		}
		return -1
	}
	for n := int64(-2); n <= 2*maxPooledBody; n++ {
		if got, want := bodySize(n), walk(n); got != want {
			t.Fatalf("bodySize(%d) = %d; want %d", n, got, want)
		}
	}
}
