// Package migrate loads the embedded, versioned SQL migrations of a store.
//
// Files are named NNN_name.up.sql and NNN_name.down.sql. A [Runner] applies
// them, one migration per transaction, through a small adapter of each
// store's driver ([Tx]) that records the version in the store's version
// table.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one version of a schema.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Load reads the migrations in dir of fsys, sorted by version. Every version
// must have both an up and a down file, and versions must be 1, 2, 3, ...
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", dir, err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		var up bool
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			up = true
		case strings.HasSuffix(name, ".down.sql"):
		default:
			continue
		}
		num, rest, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migrate: %s: name must be NNN_name.up.sql or NNN_name.down.sql", name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", name, err)
		}
		m := byVersion[version]
		if m == nil {
			m = &Migration{Version: version}
			byVersion[version] = m
		}
		m.Name = strings.TrimSuffix(strings.TrimSuffix(rest, ".up.sql"), ".down.sql")
		if up {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migrate: version %d needs both an up and a down file", m.Version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrate: versions must be 1, 2, 3, ...; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}
