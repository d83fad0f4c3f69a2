package idem_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem"
)

func TestBuiltInPoliciesReleaseNotProcessedStatuses(t *testing.T) {
	released := []int{400, 401, 403, 404, 408, 413, 415, 429}
	stored := []int{200, 201, 202, 302, 402, 409, 410, 422}
	for _, status := range released {
		if got := idem.DefaultOutcomePolicy(status); got != idem.OutcomeRelease {
			t.Errorf("DefaultOutcomePolicy(%d) = %v, want release", status, got)
		}
		if got := idem.StoreServerErrorsPolicy(status); got != idem.OutcomeRelease {
			t.Errorf("StoreServerErrorsPolicy(%d) = %v, want release", status, got)
		}
	}
	for _, status := range stored {
		if got := idem.DefaultOutcomePolicy(status); got != idem.OutcomeStore {
			t.Errorf("DefaultOutcomePolicy(%d) = %v, want store", status, got)
		}
	}
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
		if got := idem.DefaultOutcomePolicy(status); got != idem.OutcomeRelease {
			t.Errorf("DefaultOutcomePolicy(%d) = %v, want release", status, got)
		}
		if got := idem.StoreServerErrorsPolicy(status); got != idem.OutcomeStore {
			t.Errorf("StoreServerErrorsPolicy(%d) = %v, want store", status, got)
		}
	}
}
