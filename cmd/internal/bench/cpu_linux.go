package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// processCPU returns the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is USER_HZ, the unit of the times in /proc/PID/stat: 100 on
// every Linux platform Go supports.
const clockTicks = 100

// serverCPU returns the CPU time used so far by each process on this
// machine whose name starts with "postgres" (the server and its backends),
// by process, or nil when /proc cannot be read. A database on another
// machine is not seen.
func serverCPU() map[int]time.Duration {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil || len(dirs) == 0 {
		return nil
	}
	out := map[int]time.Duration{}
	for _, dir := range dirs {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || !bytes.HasPrefix(comm, []byte("postgres")) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses and
		// may contain spaces: utime and stime are the 12th and 13th.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 > len(stat) {
			continue
		}
		f := bytes.Fields(stat[i+2:])
		if len(f) < 13 {
			continue
		}
		utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
		stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
		pid, err3 := strconv.Atoi(filepath.Base(dir))
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out[pid] = time.Duration(utime+stime) * time.Second / clockTicks
	}
	return out
}
