package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procCPUSeconds returns the user+system CPU seconds of pid from /proc.
func procCPUSeconds(pid int) (float64, error) { return readProc(pid, "stat", parseProcStatCPU) }

// readProc parses /proc/<pid>/<name>.
func readProc(pid int, name string, parse func([]byte) (float64, error)) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		return 0, err
	}
	return parse(b)
}

// parseProcStatCPU extracts utime+stime (fields 14 and 15) from a
// /proc/<pid>/stat line; the command name (field 2) may contain spaces and
// parentheses, so fields are counted after its last ')'.
func parseProcStatCPU(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat line")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14 → f[11], stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc stat line: %d fields", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc stat times %q %q", f[11], f[12])
	}
	return float64(u+s) / clockTicks, nil
}

// procRunDelaySeconds returns the seconds pid's threads spent runnable,
// waiting for a CPU, from /proc/<pid>/schedstat (the main thread's: a
// PostgreSQL process has one).
func procRunDelaySeconds(pid int) (float64, error) {
	return readProc(pid, "schedstat", parseSchedstatDelay)
}

// parseSchedstatDelay extracts the second field of a /proc/<pid>/schedstat
// line (time on the CPU, time runnable waiting for one, timeslices; the
// times in nanoseconds), in seconds.
func parseSchedstatDelay(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("malformed schedstat line %q", b)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed schedstat line %q: %w", b, err)
	}
	return float64(ns) / 1e9, nil
}

// memTotal returns MemTotal from /proc/meminfo in bytes (0 if unknown).
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuTimes returns the machine's busy and total jiffies from /proc/stat.
func cpuTimes() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// cpuMeter accumulates the CPU seconds (or, newRunDelayMeter, the seconds
// waiting for a CPU) of a changing set of processes over a measured
// interval.
//
// Invariants (under mu): for every pid ever observed, base is its reading at the
// first observation after Start (0 when it first appeared after the first
// sample, i.e. it was started during the interval) and last its latest
// reading; a pid's contribution is last-base, kept after it exits.
type cpuMeter struct {
	read    func(pid int) (float64, error) // procCPUSeconds, procRunDelaySeconds
	mu      sync.Mutex
	started bool
	base    map[int]float64
	last    map[int]float64
	group   map[int]string
}

func newCPUMeter() *cpuMeter { return newMeter(procCPUSeconds) }

// newRunDelayMeter meters the seconds processes wait, runnable, for a CPU.
func newRunDelayMeter() *cpuMeter { return newMeter(procRunDelaySeconds) }

func newMeter(read func(int) (float64, error)) *cpuMeter {
	return &cpuMeter{read: read, base: map[int]float64{}, last: map[int]float64{}, group: map[int]string{}}
}

// observe reads the CPU of pids (labelled by group) now. first marks the
// sample that starts the interval.
func (m *cpuMeter) observe(pids map[int]string, first bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid, g := range pids {
		v, err := m.read(pid)
		if err != nil {
			continue
		}
		if _, ok := m.base[pid]; !ok {
			if first || !m.started {
				m.base[pid] = v
			} else {
				m.base[pid] = 0
			}
		}
		m.last[pid] = v
		m.group[pid] = g
	}
	if first {
		m.started = true
	}
}

// total returns the CPU seconds of every pid of group.
func (m *cpuMeter) total(group string) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s float64
	for pid, g := range m.group {
		if g == group {
			s += max(0, m.last[pid]-m.base[pid])
		}
	}
	return s
}

// watchPeakRSS follows pid's peak resident set size (VmHWM in
// /proc/<pid>/status) every 100 ms until done is closed, and returns a
// func giving the last value read, in bytes (0: none read). Not the
// rusage of its wait: Go clones a child sharing the parent's memory until
// exec, and Linux carries that memory's high-water mark into the child's
// ru_maxrss, which then reports the parent's (this process's) peak
// whenever that is the larger. Growth in the last 100 ms before the
// process exits is not seen.
func watchPeakRSS(pid int, done <-chan struct{}) func() int64 {
	var mu sync.Mutex
	var peak int64
	read := func() {
		if v, err := readProc(pid, "status", parseVmHWM); err == nil && v > 0 {
			mu.Lock()
			peak = max(peak, int64(v))
			mu.Unlock()
		}
	}
	read()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				read()
			}
		}
	}()
	return func() int64 {
		select {
		case <-done: // waited for: its pid may be another's now
		default:
			read()
		}
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// parseVmHWM extracts VmHWM ("VmHWM:  12345 kB") from /proc/<pid>/status,
// in bytes.
func parseVmHWM(b []byte) (float64, error) {
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("malformed VmHWM line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("malformed VmHWM line %q", line)
			}
			return float64(kb << 10), nil
		}
	}
	return 0, fmt.Errorf("no VmHWM line")
}
