package testenv

// StartServiceBusWithEnv is StartServiceBus with extra environment entries
// for the stand-in ("KEY=value").
var StartServiceBusWithEnv = startServiceBus

// HostPID returns the process id of the host whose instance sb is, or 0
// when sb is a process of its own.
func HostPID(sb *ServiceBus) int {
	i, ok := sb.proc.(*hostedInstance)
	if !ok {
		return 0
	}
	return i.host.cmd.Process.Pid
}
