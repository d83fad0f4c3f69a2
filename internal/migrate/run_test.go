package migrate

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// schema is a database that records which scripts ran, for the runner's
// tests; the stores' own tests run Run against real databases.
type schema struct {
	version int
	ran     []string
	fail    string // a script that fails
}

type schemaTx struct {
	db        *schema
	version   int
	ran       []string
	committed bool
}

func (s *schema) begin(context.Context) (Tx, error) {
	return &schemaTx{db: s, version: s.version}, nil
}

func (tx *schemaTx) Version(context.Context) (int, error) { return tx.version, nil }

func (tx *schemaTx) Exec(_ context.Context, script string) error {
	if script == tx.db.fail {
		return errors.New("syntax error")
	}
	tx.ran = append(tx.ran, script)
	return nil
}

func (tx *schemaTx) Record(_ context.Context, m Migration) error { tx.version = m.Version; return nil }
func (tx *schemaTx) Forget(_ context.Context, m Migration) error {
	tx.version = m.Version - 1
	return nil
}

func (tx *schemaTx) Commit(context.Context) error {
	tx.committed = true
	tx.db.version = tx.version
	tx.db.ran = append(tx.db.ran, tx.ran...)
	return nil
}

func (tx *schemaTx) Rollback(context.Context) error { return nil }

func TestRunner(t *testing.T) {
	t.Parallel()
	ms := []Migration{{Version: 1, Name: "a", Up: "up1", Down: "down1"}, {Version: 2, Name: "b", Up: "up2", Down: "down2"}}
	ctx := context.Background()
	db := &schema{}
	var log []string
	applied := func(m Migration, up bool) { log = append(log, m.Name) }
	r := Runner{Store: "test", Migrations: ms, Begin: db.begin, Applied: applied}
	if err := r.To(ctx, -1); err != nil || db.version != 2 {
		t.Fatalf("Run to newest: version %d, %v; want 2", db.version, err)
	}
	if err := r.To(ctx, 0); err != nil || db.version != 0 {
		t.Fatalf("Run to 0: version %d, %v; want 0", db.version, err)
	}
	if got := strings.Join(db.ran, " "); got != "up1 up2 down2 down1" {
		t.Errorf("scripts ran: %s", got)
	}
	if got := strings.Join(log, " "); got != "a b b a" {
		t.Errorf("applied: %s", got)
	}
	if err := r.To(ctx, 3); err == nil || !strings.Contains(err.Error(), "test: no migration version 3") {
		t.Errorf("Run to 3 = %v; want no such version", err)
	}
	db.version = 5
	if err := r.To(ctx, -1); err == nil || !strings.Contains(err.Error(), "newer than this program's 2") {
		t.Errorf("Run on a newer database = %v", err)
	}
	db = &schema{fail: "up2"}
	r = Runner{Store: "test", Migrations: ms, Begin: db.begin}
	if err := r.To(ctx, -1); err == nil || !strings.Contains(err.Error(), "migrate up to 2 (b)") || db.version != 1 {
		t.Errorf("Run with a failing script = %v at version %d; want the error at version 1", err, db.version)
	}
}
