//go:build !linux

package kafkatest

import "syscall"

// sysProcAttr puts a broker JVM in a process group of its own; without
// Linux's PR_SET_PDEATHSIG, ReapStale removes what a killed test leaves.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
