package testenv

// StartServiceBusWithEnv is StartServiceBus with extra environment entries
// for the stand-in ("KEY=value").
var StartServiceBusWithEnv = startServiceBus

// HostPID returns the process id of the host whose broker sb is, or 0 when
// sb is a process of its own.
func HostPID(sb *ServiceBus) int {
	if sb.host == nil {
		return 0
	}
	return sb.host.cmd.Process.Pid
}
