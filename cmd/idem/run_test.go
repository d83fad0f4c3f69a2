package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// runCLI drives the command line in-process with env as the environment.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &cli{stdout: &out, stderr: &errOut, lookupEnv: func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}}
	code = c.run(t.Context(), args)
	return code, out.String(), errOut.String()
}

func TestRunUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderr     string
		emptyOther bool // the stream not named is empty
	}{
		{"NoArguments", nil, exitUsage, "", "Commands:", true},
		{"HelpFlag", []string{"-h"}, exitOK, "Commands:", "", true},
		{"LongHelpFlag", []string{"--help"}, exitOK, "test a live endpoint against the Idempotency-Key contract", "", true},
		{"HelpCommand", []string{"help"}, exitOK, "idem <command> [flags]", "", true},
		{"HelpForCheck", []string{"help", "check"}, exitOK, "-second-client-header", "", true},
		{"HelpForUnknown", []string{"help", "bogus"}, exitUsage, "", `unknown command "bogus"`, true},
		{"UnknownCommand", []string{"bogus"}, exitUsage, "", `idem: unknown command "bogus"`, true},
		{"FlagBeforeCommand", []string{"-v", "check"}, exitUsage, "", "flag -v must follow a command", true},
		{"CheckHelp", []string{"check", "-h"}, exitOK, "", "Usage: idem check --url URL", true},
		{"CheckWithoutURL", []string{"check", "--body", "{}"}, exitUsage, "", "--url is required", true},
		{"CheckUnknownFlag", []string{"check", "--nope"}, exitUsage, "", "flag provided but not defined: -nope", true},
		{"CheckExtraArgument", []string{"check", "--url", "http://127.0.0.1:1/x", "extra"}, exitUsage, "", `unexpected argument "extra"`, true},
		{"CheckBadHeader", []string{"check", "--url", "http://127.0.0.1:1/x", "--header", "Bearer abc"}, exitUsage, "", "not of the form 'Name: value'", true},
		{"CheckInvalidConfig", []string{"check", "--url", "ftp://127.0.0.1/x"}, exitUsage, "", "not an absolute http or https URL", true},
		{"CheckKeyHeader", []string{"check", "--url", "http://127.0.0.1:1/x", "--header", "Idempotency-Key: abc"}, exitUsage, "", "must not set Idempotency-Key", true},
		{"CheckZeroTimeout", []string{"check", "--url", "http://127.0.0.1:1/x", "--timeout", "0s"}, exitUsage, "", "must be positive", true},
		{"CheckMissingBodyFile", []string{"check", "--url", "http://127.0.0.1:1/x", "--body", "@/nonexistent/body.json"}, exitUsage, "", "--body: read body", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdout, stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr)
			}
			if tt.emptyOther && tt.stdout == "" && stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if tt.emptyOther && tt.stderr == "" && stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
		})
	}
}

func TestCommandsAreWellFormed(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for _, cmd := range commands() {
		if cmd.name == "" || cmd.summary == "" || cmd.run == nil || seen[cmd.name] || cmd.name == "help" {
			t.Errorf("command %+v is incomplete, duplicate or reserved", cmd)
		}
		seen[cmd.name] = true
	}
}

// TestDocListsEveryCommand keeps the command list in doc.go, which go doc
// prints, the same as the one in usage, which idem -h prints.
func TestDocListsEveryCommand(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(f.Doc.Text(), "The commands are:\n\n")
	if !ok {
		t.Fatal(`doc.go has no "The commands are:" list`)
	}
	var documented []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "\t") {
			break
		}
		name, summary, _ := strings.Cut(strings.TrimSpace(line), " ")
		documented = append(documented, name+": "+strings.TrimSpace(summary))
	}
	var want []string
	for _, cmd := range commands() {
		want = append(want, cmd.name+": "+cmd.summary)
	}
	if got, want := strings.Join(documented, "\n"), strings.Join(want, "\n"); got != want {
		t.Errorf("doc.go lists the commands\n%s\nwant, as idem -h does,\n%s", got, want)
	}
}
