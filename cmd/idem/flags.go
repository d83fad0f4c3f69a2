package main

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// envDefaults reads flag defaults from environment variables, the twins of
// the flags, and keeps the first value it could not parse.
type envDefaults struct {
	lookup func(string) (string, bool)
	err    error
}

func (c *cli) env() *envDefaults { return &envDefaults{lookup: c.lookupEnv} }

func (e *envDefaults) string(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

func (e *envDefaults) int(name string, def int) int {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		e.fail(name, v, "an integer")
		return def
	}
	return n
}

func (e *envDefaults) duration(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		e.fail(name, v, "a duration such as 10s")
		return def
	}
	return d
}

func (e *envDefaults) bool(name string, def bool) bool {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		e.fail(name, v, "true or false")
		return def
	}
	return b
}

// header reads newline-separated "Name: value" lines into a headerFlag.
func (e *envDefaults) header(name string) *headerFlag {
	h := &headerFlag{header: http.Header{}}
	v, ok := e.lookup(name)
	if !ok {
		return h
	}
	for _, line := range strings.Split(v, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if err := h.Set(line); err != nil {
			e.fail(name, "", err.Error())
			return h
		}
	}
	h.fromEnv = len(h.header) > 0
	return h
}

func (e *envDefaults) fail(name, value, want string) {
	if e.err == nil {
		if value == "" {
			e.err = fmt.Errorf("environment variable %s: %s", name, want)
		} else {
			e.err = fmt.Errorf("environment variable %s=%q: want %s", name, value, want)
		}
	}
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
