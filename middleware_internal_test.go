package idem

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/race"
)

func TestReadAll(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("0123456789"), 1000)
	tests := []struct {
		name   string
		rd     io.Reader
		length int64
	}{
		{"DeclaredLength", bytes.NewReader(body), int64(len(body))},
		{"UnknownLength", bytes.NewReader(body), -1},
		{"LongerThanDeclared", bytes.NewReader(body), 10},
		{"ShorterThanDeclared", bytes.NewReader(body), int64(len(body)) * 3},
		{"DeclaredZero", bytes.NewReader(body), 0},
		{"OneByteReads", iotest.OneByteReader(bytes.NewReader(body)), int64(len(body))},
		{"DataWithEOF", iotest.DataErrReader(bytes.NewReader(body)), int64(len(body))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readWithin(t, func() ([]byte, error) { return readAll(tt.rd, tt.length) })
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("readAll = %d bytes, %v; want the %d bytes of the body", len(got), err, len(body))
			}
		})
	}
	t.Run("HugeDeclaredLengthIsNotAllocated", func(t *testing.T) {
		t.Parallel()
		got, err := readWithin(t, func() ([]byte, error) { return readAll(bytes.NewReader(body[:5]), 1<<40) })
		if err != nil || string(got) != "01234" || cap(got) > 1<<20+1 {
			t.Fatalf("readAll = %q (cap %d), %v; want \"01234\" in at most 1 MiB", got, cap(got), err)
		}
	})
	t.Run("Error", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		if _, err := readWithin(t, func() ([]byte, error) {
			return readAll(io.MultiReader(bytes.NewReader(body[:5]), iotest.ErrReader(boom)), 100)
		}); !errors.Is(err, boom) {
			t.Fatalf("readAll error = %v, want %v", err, boom)
		}
	})
}

func TestCopyFields(t *testing.T) {
	t.Parallel()
	src := http.Header{"A": {"1", "2"}, "B": {"3"}, "Empty": {}, "Skipped": {"4"}}
	dst := http.Header{}
	rest := copyFields(dst, src, []string{"A", "B", "Empty"}, 1, nil)
	if len(rest) != 0 || cap(rest) != 1 {
		t.Fatalf("rest = %q (cap %d), want room for 1 more value", rest, cap(rest))
	}
	if want := (http.Header{"A": {"1", "2"}, "B": {"3"}}); !reflect.DeepEqual(dst, want) {
		t.Fatalf("copied %v, want %v", dst, want)
	}
	dst["A"] = append(dst["A"], "x")
	_ = append(rest, "y")
	if dst.Get("B") != "3" || src["A"][1] != "2" {
		t.Fatalf("appending to a copied field wrote into another: %v, source %v", dst, src)
	}
	all := http.Header{}
	copyFields(all, src, nil, 0, nil)
	if want := (http.Header{"A": {"1", "2"}, "B": {"3"}, "Empty": {}, "Skipped": {"4"}}); !reflect.DeepEqual(all, want) {
		t.Fatalf("copied %v, want every field of %v", all, want)
	}
}

// TestCopyFieldsManyValues checks copyFields when fields have more values
// than it makes room for at first.
func TestCopyFieldsManyValues(t *testing.T) {
	t.Parallel()
	many := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}
	src := http.Header{"A": many, "B": {"b"}, "C": {"c1", "c2", "c3"}}
	for _, names := range [][]string{nil, {"A", "B", "C"}} {
		for _, buf := range [][]string{nil, make([]string, 0, 8)} {
			dst := http.Header{}
			rest := copyFields(dst, src, names, 2, buf)
			if len(rest) != 0 || cap(rest) != 2 {
				t.Fatalf("rest = %q (cap %d), want room for 2 more values", rest, cap(rest))
			}
			if !reflect.DeepEqual(dst, src) {
				t.Fatalf("copied %v, want %v", dst, src)
			}
			for name := range dst {
				dst[name] = append(dst[name], "x")
			}
			_ = append(rest, "y", "z")
			want := http.Header{"A": append(slices.Clone(many), "x"), "B": {"b", "x"}, "C": {"c1", "c2", "c3", "x"}}
			if !reflect.DeepEqual(dst, want) || len(src["A"]) != 10 || src["B"][0] != "b" {
				t.Fatalf("appending to copied fields wrote into others: %v, source %v", dst, src)
			}
		}
	}
}

// TestCopyFieldsValuesFillTheRoom checks copyFields when the values fill
// the slice it made at first (room for one value a field and the extra),
// so that no room is left for the extra values.
func TestCopyFieldsValuesFillTheRoom(t *testing.T) {
	t.Parallel()
	src := http.Header{"A": {"1", "2", "3"}}
	for _, buf := range [][]string{nil, make([]string, 0, 4)} {
		dst := http.Header{}
		rest := copyFields(dst, src, nil, 2, buf)
		if len(rest) != 0 || cap(rest) != 2 {
			t.Fatalf("rest = %q (cap %d), want room for 2 more values", rest, cap(rest))
		}
		if !reflect.DeepEqual(dst, src) {
			t.Fatalf("copied %v, want %v", dst, src)
		}
		_ = append(rest, "y", "z")
		if !reflect.DeepEqual(dst, http.Header{"A": {"1", "2", "3"}}) {
			t.Fatalf("appending to the rest wrote into a copied field: %v", dst)
		}
	}
}

// TestCopyFieldsIntoBuf: the values go into buf when it has room for one
// value a field and the extra ones, without an allocation.
func TestCopyFieldsIntoBuf(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	src := http.Header{"A": {"1"}, "B": {"2"}}
	buf := make([]string, 0, 4)
	dst := make(http.Header, 4)
	allocs := testing.AllocsPerRun(100, func() {
		clear(dst)
		rest := copyFields(dst, src, nil, 2, buf)
		if len(rest) != 0 || cap(rest) != 2 {
			t.Fatalf("rest = %q (cap %d), want room for 2 more values", rest, cap(rest))
		}
	})
	if allocs != 0 || !reflect.DeepEqual(dst, src) {
		t.Fatalf("copied %v in %v allocations; want %v in none", dst, allocs, src)
	}
	dst["A"] = append(dst["A"], "x")
	if dst.Get("B") != "2" || src["A"][0] != "1" || len(src["A"]) != 1 {
		t.Fatalf("appending to a copied field wrote into another: %v, source %v", dst, src)
	}
}

// TestWriteToAfterResponse: the answer that writeTo writes is the same
// whether replayList.response read the header's fields before (as it does
// for a response it stores whole) or not, or read more than it keeps; and
// its values are copies, so that changing them changes no stored response.
// The stored header has the fields on the list that have values, for the
// list by default, which response looks up, and for a longer one.
func TestWriteToAfterResponse(t *testing.T) {
	t.Parallel()
	lists := []replayList{newReplayList(nil), newReplayList([]string{"X-A", "X-B", "X-C", "X-D", "X-E"})}
	headers := []http.Header{
		{},
		{"Content-Type": {"application/json"}},
		{"Location": {"/v1/payments/pay_1"}},
		{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}},
		{"Content-Type": {"a"}, "Location": {"b"}, "Content-Language": {"c"}},
		{"Content-Type": {"a"}, "Location": {"b"}, "X-A": {"c", "d"}, "X-B": {"e"}},
		{"Content-Type": {"a"}, "Location": {"b"}, "X-A": {"c"}, "X-B": {"e"}, "X-C": {"f"}}, // more than it keeps
		{"Content-Type": {"a"}, "X-Other": {"b"}},                                            // not all on the list
		{"Content-Type": {"a"}, "X-A": {}},                                                   // a field without values
		{"Content-Type": {"a"}, "Location": {}},
		{"Content-Type": nil, "Content-Language": {"en", "fr"}},
		{"X-Other": {"a"}, "Content-Type": {"b"}, "Location": {"c"}, "Content-Language": {"d"}},
	}
	for _, list := range lists {
		for _, h := range headers {
			for _, first := range []bool{false, true} {
				rec := &recorder{header: h.Clone(), status: http.StatusCreated, wroteHeader: true}
				rec.body.WriteString("{}")
				var stored *idemstore.Response
				if first {
					stored = list.response(rec)
					want := http.Header{}
					for name, values := range h {
						if len(values) > 0 && slices.Contains(list, name) {
							want[name] = values
						}
					}
					if !reflect.DeepEqual(stored.Header, want) {
						t.Fatalf("response of %v for %q stores %v; want %v", h, list, stored.Header, want)
					}
				}
				w := httptest.NewRecorder()
				var buf [4]string
				rec.writeTo(w, buf[:0])
				want := h.Clone()
				want["Content-Length"] = []string{"2"}
				if !reflect.DeepEqual(w.Header(), want) || w.Code != http.StatusCreated || w.Body.String() != "{}" {
					t.Fatalf("writeTo of %v (response first: %t) = %d %v %q; want %v", h, first, w.Code, w.Header(), w.Body, want)
				}
				for _, values := range w.Header() {
					for i := range values {
						values[i] = "changed"
					}
				}
				if stored != nil {
					for name, values := range stored.Header {
						if !slices.Equal(values, h[name]) {
							t.Fatalf("changing the answer's header changed the stored %s: %q", name, values)
						}
					}
				}
			}
		}
	}
}

// TestDefaultLookups: the names that response looks up for the replay
// list by default are the names on it.
func TestDefaultLookups(t *testing.T) {
	t.Parallel()
	got, want := slices.Sorted(slices.Values(defaultLookups[:])), slices.Sorted(slices.Values(newReplayList(nil)))
	if !slices.Equal(got, want) {
		t.Errorf("defaultLookups = %q; want the names %q", defaultLookups, want)
	}
}
