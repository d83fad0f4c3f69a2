package replay

import (
	"slices"
	"testing"
)

func TestHeaders(t *testing.T) {
	t.Parallel()
	got := Headers([]string{"x-request-id", "content-type", "X-Request-Id", "Etag"})
	want := []string{"Content-Type", "Content-Language", "Location", "X-Request-Id", "Etag"}
	if !slices.Equal(got, want) {
		t.Fatalf("Headers = %q, want %q", got, want)
	}
}

func TestCheckRefusesForbiddenHeaders(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"set-cookie", "Authorization", "idempotent-replayed"} {
		if err := Check("Config.ReplayHeaders", []string{"X-Ok", h}); err == nil {
			t.Errorf("Check accepted %q", h)
		}
	}
	if err := Check("Config.ReplayHeaders", []string{"X-Request-Id", "Etag"}); err != nil {
		t.Errorf("Check refused allowed headers: %v", err)
	}
}
