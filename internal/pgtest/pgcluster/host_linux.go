package pgcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// findBinDir returns the first directory holding both initdb and postgres:
// that of initdb or postgres on PATH (symbolic links resolved), then the
// directories matching glob, highest version first. Its error is an
// *UnavailableError.
func findBinDir(lookPath func(file string) (string, error), glob string) (string, error) {
	var candidates []string
	for _, name := range []string{"initdb", "postgres"} {
		p, err := lookPath(name)
		if err != nil {
			continue
		}
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = resolved
		}
		candidates = append(candidates, filepath.Dir(p))
	}
	versioned, _ := filepath.Glob(glob)
	slices.SortStableFunc(versioned, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	candidates = append(candidates, versioned...)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", &UnavailableError{Reasons: []string{
		"no PostgreSQL server binaries (initdb and postgres) on PATH or in " + glob,
	}}
}

// compareVersions compares dotted version numbers such as "9.6" and "15";
// a part that is not a number sorts first.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		na, nb := -1, -1
		if i < len(pa) {
			if n, err := strconv.Atoi(pa[i]); err == nil {
				na = n
			}
		}
		if i < len(pb) {
			if n, err := strconv.Atoi(pb[i]); err == nil {
				nb = n
			}
		}
		if na != nb {
			return na - nb
		}
	}
	return 0
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}

// serverCredential returns the postgres system user's credential when the
// process runs as root, and nil otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	unavailable := func(why string) error {
		return &UnavailableError{Reasons: []string{
			"running as root, which PostgreSQL refuses, and " + why,
		}}
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, unavailable("no " + serverUser + " system user to run the server as")
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, unavailable("the " + serverUser + " user has a non-numeric uid " + u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, unavailable("the " + serverUser + " user has a non-numeric gid " + u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tempBase returns the directory to make cluster directories in: the
// system temporary directory, or /tmp if the server user cannot reach the
// former.
func tempBase(cred *syscall.Credential) (string, error) {
	for _, dir := range []string{os.TempDir(), "/tmp"} {
		resolved, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if cred == nil || traversable(resolved, cred.Uid, cred.Gid) {
			return resolved, nil
		}
	}
	return "", fmt.Errorf("pgcluster: the %s user cannot reach %s or /tmp; set TMPDIR to a directory it can traverse", serverUser, os.TempDir())
}

// traversable reports whether the user uid with primary group gid may
// search every directory from path up to the root, by the permission bits.
func traversable(path string, uid, gid uint32) bool {
	for p := path; ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return false
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		perm := info.Mode().Perm()
		var bit os.FileMode
		switch {
		case st.Uid == uid:
			bit = 0o100
		case st.Gid == gid:
			bit = 0o010
		default:
			bit = 0o001
		}
		if perm&bit == 0 {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

// makeClusterDir makes a cluster directory in base, owned by the server
// user, holding a lock file that the returned file keeps locked. The lock is
// taken before the file gets its final name, so sweepStale never sees an
// unlocked lock file of a live owner.
func makeClusterDir(base string, cred *syscall.Credential) (string, *os.File, error) {
	dir, err := os.MkdirTemp(base, dirPrefix+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return "", nil, fmt.Errorf("pgcluster: make cluster directory: %w", err)
	}
	fail := func(err error) (string, *os.File, error) {
		return "", nil, errors.Join(fmt.Errorf("pgcluster: make cluster directory: %w", err), os.RemoveAll(dir))
	}
	if err := chownTo(dir, cred); err != nil {
		return fail(err)
	}
	pending := filepath.Join(dir, ownerLockName+".new")
	lock, err := os.OpenFile(pending, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return fail(err)
	}
	if err := os.Rename(pending, filepath.Join(dir, ownerLockName)); err != nil {
		lock.Close()
		return fail(err)
	}
	return dir, lock, nil
}

// sweepStale removes the cluster directories in base whose owner process is
// gone: their lock file can be locked, and no server runs on their data.
// It is best effort and leaves anything it is unsure about.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		if ownerGone(dir) {
			_ = os.RemoveAll(dir)
		}
	}
}

// ownerGone reports whether the process that made dir has died.
func ownerGone(dir string) bool {
	f, err := os.Open(filepath.Join(dir, ownerLockName))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	return !postmasterAlive(filepath.Join(dir, "data"))
}

// postmasterAlive reports whether the server process named in the
// postmaster.pid file of dataDir is running.
func postmasterAlive(dataDir string) bool {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return false
	}
	return processAlive(pid)
}

// processAlive reports whether pid names a process that has not exited; a
// zombie counts as exited.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill
	}
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// chownTo gives path to the user of cred, if any.
func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serverEnv is the environment of initdb and postgres: this process's,
// without the PG* variables that could point them elsewhere.
func serverEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG")
	})
}
