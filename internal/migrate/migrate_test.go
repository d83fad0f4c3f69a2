package migrate

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{
			name: "SortsByVersion",
			files: fstest.MapFS{
				"m/002_b.up.sql": {Data: []byte("up2")}, "m/002_b.down.sql": {Data: []byte("down2")},
				"m/001_a.up.sql": {Data: []byte("up1")}, "m/001_a.down.sql": {Data: []byte("down1")},
				"m/README": {Data: []byte("ignored")},
			},
			want: []int{1, 2},
		},
		{
			name:    "RejectsMissingDown",
			files:   fstest.MapFS{"m/001_a.up.sql": {Data: []byte("up1")}},
			wantErr: "both an up and a down",
		},
		{
			name: "RejectsGap",
			files: fstest.MapFS{
				"m/001_a.up.sql": {Data: []byte("x")}, "m/001_a.down.sql": {Data: []byte("x")},
				"m/003_c.up.sql": {Data: []byte("x")}, "m/003_c.down.sql": {Data: []byte("x")},
			},
			wantErr: "versions must be 1, 2, 3",
		},
		{
			name:    "RejectsBadName",
			files:   fstest.MapFS{"m/one.up.sql": {Data: []byte("x")}},
			wantErr: "name must be",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Load(tt.files, "m")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load() error = %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Load() = %d migrations, want %d", len(got), len(tt.want))
			}
			for i, m := range got {
				if m.Version != tt.want[i] || m.Up == "" || m.Down == "" {
					t.Errorf("migration %d = %+v", i, m)
				}
			}
			if got[0].Name != "a" || got[0].Up != "up1" || got[0].Down != "down1" {
				t.Errorf("first migration = %+v, want a/up1/down1", got[0])
			}
		})
	}
}
