package idem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func TestClaimParamsCanTakeOver(t *testing.T) {
	t.Parallel()
	locked := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	started := func() *idem.Record {
		return &idem.Record{Status: idem.StatusInFlight, LockedAt: locked, RequestHash: []byte("h")}
	}
	params := func() idem.ClaimParams {
		return idem.ClaimParams{Mode: idem.ModeTwoPhase, Now: locked.Add(time.Minute), LockTimeout: time.Minute, RequestHash: []byte("h")}
	}
	tests := []struct {
		name   string
		change func(*idem.ClaimParams, *idem.Record)
		want   bool
	}{
		{"ExpiredLeaseOfSameRequest", func(*idem.ClaimParams, *idem.Record) {}, true},
		{"LeaseNotYetExpired", func(p *idem.ClaimParams, _ *idem.Record) { p.Now = locked.Add(time.Minute - time.Nanosecond) }, false},
		{"AtomicMode", func(p *idem.ClaimParams, _ *idem.Record) { p.Mode = idem.ModeAtomic }, false},
		{"CompletedKey", func(_ *idem.ClaimParams, r *idem.Record) { r.Status = idem.StatusCompleted }, false},
		{"OtherRequest", func(p *idem.ClaimParams, _ *idem.Record) { p.RequestHash = []byte("other") }, false},
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
	if err := (idem.PurgeParams{Before: before}).Validate(); err != nil {
		t.Errorf("Validate with BatchSize 0 = %v, want nil", err)
	}
	if got := (idem.PurgeParams{Before: before}).WithDefaults().BatchSize; got != idem.PurgeBatchSizeDefault {
		t.Errorf("WithDefaults().BatchSize = %d, want %d", got, idem.PurgeBatchSizeDefault)
	}
	if got := (idem.PurgeParams{Before: before, BatchSize: 7}).WithDefaults().BatchSize; got != 7 {
		t.Errorf("WithDefaults().BatchSize = %d, want 7", got)
	}
	noBefore := idem.PurgeParams{BatchSize: 10}.Validate()
	negative := idem.PurgeParams{Before: before, BatchSize: -1}.Validate()
	if noBefore == nil || negative == nil || errors.Is(noBefore, negative) {
		t.Errorf("Validate = %v and %v; want two distinct errors", noBefore, negative)
	}
}
