package benchbody

import (
	"encoding/json"
	"net/url"
	"testing"
)

func TestBodies(t *testing.T) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b := JSON(size)
		if !json.Valid(b) || len(b) < size-100 || len(b) > size+100 {
			t.Errorf("JSON(%d): %d bytes, valid %v", size, len(b), json.Valid(b))
		}
	}
	form := Form()
	v, err := url.ParseQuery(string(form))
	if err != nil || len(form) != 248 || len(v) != 8 {
		t.Errorf("Form: %d bytes, %d fields, err %v; want 248 bytes, 8 fields", len(form), len(v), err)
	}
}
