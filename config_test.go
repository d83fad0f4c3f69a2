package idem_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestConfigLimits: each limit of Config's validation, a value at it and
// one past it, accepted or refused as the fields' comments say. A zero
// duration or size is not a limit: it means the default (ExampleConfig
// and every test that builds from a nil Config cover it).
func TestConfigLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(c *idem.Config)
		ok   bool
	}{
		{"MaxAttemptsNeverGiveUp", func(c *idem.Config) { c.Resume.MaxAttempts = -1 }, true},
		{"MaxAttemptsOne", func(c *idem.Config) { c.Resume.MaxAttempts = 1 }, true},
		{"MaxAttemptsBelowNever", func(c *idem.Config) { c.Resume.MaxAttempts = -2 }, false},
		{"NoConflictRetries", func(c *idem.Config) { c.MaxConflictRetries = idem.NoConflictRetries }, true},
		{"ConflictRetriesBelowNone", func(c *idem.Config) { c.MaxConflictRetries = idem.NoConflictRetries - 1 }, false},
		{"MaxPreferWaitZero", func(c *idem.Config) { c.MaxPreferWait = 0 }, true},
		{"MaxPreferWaitNegative", func(c *idem.Config) { c.MaxPreferWait = -time.Nanosecond }, false},
		{"RetentionJustAboveLockTimeout", func(c *idem.Config) { c.LockTimeout = time.Minute; c.Retention = time.Minute + time.Nanosecond }, true},
		{"RetentionEqualToLockTimeout", func(c *idem.Config) { c.LockTimeout = time.Minute; c.Retention = time.Minute }, false},
		{"ExcludeOneCharacterField", func(c *idem.Config) { c.ExcludeFields = []string{"/a"} }, true},
		{"ExcludeEscapedSlash", func(c *idem.Config) { c.ExcludeFields = []string{"/a~1b"} }, true},
		{"ExcludeRootOnly", func(c *idem.Config) { c.ExcludeFields = []string{"/"} }, false},
		{"ExcludeNoSlash", func(c *idem.Config) { c.ExcludeFields = []string{"a"} }, false},
		{"ExcludeNested", func(c *idem.Config) { c.ExcludeFields = []string{"/a/b"} }, false},
		{"NegativeLockTimeout", func(c *idem.Config) { c.LockTimeout = -time.Nanosecond }, false},
		{"NegativeRetention", func(c *idem.Config) { c.Retention = -time.Nanosecond }, false},
		{"NegativeMaxBodyBytes", func(c *idem.Config) { c.MaxBodyBytes = -1 }, false},
		{"NegativeStoreTimeout", func(c *idem.Config) { c.StoreTimeout = -time.Nanosecond }, false},
		{"NegativeReadyTimeout", func(c *idem.Config) { c.ReadyTimeout = -time.Nanosecond }, false},
		{"NegativePurgeInterval", func(c *idem.Config) { c.Purge.Interval = -time.Nanosecond }, false},
		{"NegativePurgeBatchSize", func(c *idem.Config) { c.Purge.BatchSize = -1 }, false},
		{"NegativePurgePause", func(c *idem.Config) { c.Purge.Pause = -time.Nanosecond }, false},
		{"NegativePurgeBatchTimeout", func(c *idem.Config) { c.Purge.BatchTimeout = -time.Nanosecond }, false},
		{"NegativeResumeInterval", func(c *idem.Config) { c.Resume.Interval = -time.Nanosecond }, false},
		{"NegativeResumeBatchSize", func(c *idem.Config) { c.Resume.BatchSize = -1 }, false},
		{"SmallestPositiveValues", func(c *idem.Config) {
			c.LockTimeout, c.Retention, c.MaxBodyBytes, c.StoreTimeout, c.ReadyTimeout = 1, 2, 1, 1, 1
			c.Purge = idem.PurgeOpts{Interval: 1, BatchSize: 1, Pause: 1, BatchTimeout: 1}
			c.Resume.Interval, c.Resume.BatchSize = 1, 1
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := idem.Config{ClientID: func(*http.Request) (string, bool) { return "alice", true }, Logger: quiet}
			tc.set(&cfg)
			_, err := idem.New(idemtest.NewMemoryStore(), &cfg)
			if tc.ok && err != nil {
				t.Errorf("New refused the config: %v", err)
			}
			if !tc.ok && err == nil {
				t.Error("New accepted the config")
			}
		})
	}
}
