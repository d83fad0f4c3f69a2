package idemstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
)

func TestClaimParamsCanTakeOver(t *testing.T) {
	t.Parallel()
	locked := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	started := func() *idemstore.Record {
		return &idemstore.Record{Status: idemstore.StatusInFlight, LockedAt: locked, RequestHash: []byte("h")}
	}
	params := func() idemstore.ClaimParams {
		return idemstore.ClaimParams{TwoPhase: true, Now: locked.Add(time.Minute), LockTimeout: time.Minute, RequestHash: []byte("h")}
	}
	tests := []struct {
		name   string
		change func(*idemstore.ClaimParams, *idemstore.Record)
		want   bool
	}{
		{"ExpiredLeaseOfSameRequest", func(*idemstore.ClaimParams, *idemstore.Record) {}, true},
		{"LeaseNotYetExpired", func(p *idemstore.ClaimParams, _ *idemstore.Record) { p.Now = locked.Add(time.Minute - time.Nanosecond) }, false},
		{"AtomicMode", func(p *idemstore.ClaimParams, _ *idemstore.Record) { p.TwoPhase = false }, false},
		{"CompletedKey", func(_ *idemstore.ClaimParams, r *idemstore.Record) { r.Status = idemstore.StatusCompleted }, false},
		{"OtherRequest", func(p *idemstore.ClaimParams, _ *idemstore.Record) { p.RequestHash = []byte("other") }, false},
	}
	for _, tt := range tests {
		p, rec := params(), started()
		tt.change(&p, rec)
		if got := p.CanTakeOver(rec); got != tt.want {
			t.Errorf("%s: CanTakeOver = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPurgeParams(t *testing.T) {
	t.Parallel()
	before := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := (idemstore.PurgeParams{Before: before}).Validate(); err != nil {
		t.Errorf("Validate with BatchSize 0 = %v, want nil", err)
	}
	if got := (idemstore.PurgeParams{Before: before}).WithDefaults().BatchSize; got != idemstore.PurgeBatchSizeDefault {
		t.Errorf("WithDefaults().BatchSize = %d, want %d", got, idemstore.PurgeBatchSizeDefault)
	}
	if got := (idemstore.PurgeParams{Before: before, BatchSize: 7}).WithDefaults().BatchSize; got != 7 {
		t.Errorf("WithDefaults().BatchSize = %d, want 7", got)
	}
	noBefore := idemstore.PurgeParams{BatchSize: 10}.Validate()
	negative := idemstore.PurgeParams{Before: before, BatchSize: -1}.Validate()
	if noBefore == nil || negative == nil || errors.Is(noBefore, negative) {
		t.Errorf("Validate = %v and %v; want two distinct errors", noBefore, negative)
	}
}
