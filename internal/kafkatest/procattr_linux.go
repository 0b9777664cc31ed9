package kafkatest

import "syscall"

// sysProcAttr has the kernel kill a broker JVM when the thread of the test
// process that started it goes away (the whole process exiting, or killed),
// and puts it in a process group of its own, away from the terminal's
// signals.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
