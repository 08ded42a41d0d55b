package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc (100 on every
// Linux architecture the handler is built for).
const clockTicks = 100

// procCPU returns the user + system CPU time the process pid has used
// (all its threads), from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted from the last ')' are stable. utime and stime are fields 14
	// and 15 of the line, the 12th and 13th after the name.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unreadable CPU times", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procRSS returns the resident set size of pid and its peak (VmRSS and
// VmHWM of /proc/<pid>/status), in bytes.
func procRSS(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	return rss, peak, nil
}

// machineCPU is the machine's CPU time from /proc/stat: busy (everything
// but idle and iowait) and total, summed over all cores, and the number
// of cores.
type machineCPU struct {
	busy, total time.Duration
	cores       int
}

func readMachineCPU() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	var m machineCPU
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			m.cores++
			continue
		}
		var total, idle int64
		for i, s := range f[1:] {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return machineCPU{}, fmt.Errorf("/proc/stat: %w", err)
			}
			if i >= 8 { // guest times are already in user and nice
				break
			}
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		m.total = time.Duration(total) * time.Second / clockTicks
		m.busy = time.Duration(total-idle) * time.Second / clockTicks
	}
	if m.cores == 0 {
		return machineCPU{}, fmt.Errorf("/proc/stat: no cpu lines")
	}
	return m, nil
}

// loadAverage is the first field of /proc/loadavg ("" when unreadable).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// childPid returns the pid of this process's child whose command line
// contains arg (a stand-in's script name), or 0.
func childPid(arg string) int {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(self) {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(cmd, []byte(arg)) {
			return pid
		}
	}
	return 0
}
