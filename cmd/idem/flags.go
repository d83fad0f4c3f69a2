package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/idemkit/idem/internal/cmdrun"
)

// env reads flag defaults from the environment variables that are the
// flags' twins.
func (c *cli) env() *cmdrun.Env { return cmdrun.NewEnv(c.lookupEnv) }

// envHeader reads newline-separated "Name: value" lines from the
// environment variable name into a headerFlag.
func envHeader(e *cmdrun.Env, name string) *headerFlag {
	h := &headerFlag{header: http.Header{}}
	v, ok := e.Lookup(name)
	if !ok {
		return h
	}
	for _, line := range strings.Split(v, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if err := h.Set(line); err != nil {
			e.Fail(name, "", err.Error())
			return h
		}
	}
	h.fromEnv = len(h.header) > 0
	return h
}

// headerFlag is a repeatable flag of "Name: value" headers. Headers from the
// environment are replaced, not extended, by the first header on the command
// line. Its String never shows values, which are often credentials.
type headerFlag struct {
	header  http.Header
	fromEnv bool
}

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || !isToken(name) {
		return fmt.Errorf("header %q is not of the form 'Name: value'", shorten(s))
	}
	if h.fromEnv {
		h.header, h.fromEnv = http.Header{}, false
	}
	h.header.Add(name, strings.TrimSpace(value))
	return nil
}

// bodyValue returns a flag's body: the flag value itself, or the contents of
// the file it names after an @, as in curl.
func bodyValue(v string) ([]byte, error) {
	if path, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read body: %w", err)
		}
		return b, nil
	}
	return []byte(v), nil
}

// isToken reports whether s is a non-empty RFC 9110 token, as header names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// shorten keeps a possibly secret argument out of error messages beyond its start.
func shorten(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// dbFlag defines -db, whose default comes from DATABASE_URL; -h shows that
// default with any password hidden.
func dbFlag(fs *flag.FlagSet, env *cmdrun.Env, usage string) *string {
	db := env.String("DATABASE_URL", "")
	fs.Var((*cmdrun.Redacted)(&db), "db", usage)
	return &db
}
