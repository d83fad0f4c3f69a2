package payments

import (
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(idemoutbox.Cursor{CreatedAt: time.UnixMicro(1764590000123456), ID: "evt_abc"}))
	f.Add("")
	f.Add("MTIzLnBheV8x")
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := decodeCursor(s)
		if !ok {
			return
		}
		// Whatever decodes, re-encodes to a cursor of the same position.
		again, ok := decodeCursor(encodeCursor(c))
		if !ok || !again.CreatedAt.Equal(c.CreatedAt) || again.ID != c.ID {
			t.Fatalf("cursor %q decodes to %+v, which round-trips to %+v (%v)", s, c, again, ok)
		}
	})
}
