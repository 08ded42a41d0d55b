package testenv

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when the test binary dies, so a
// stand-in a package shares does not outlive a killed test run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
