package testenv

// StartServiceBusWithEnv is StartServiceBus with extra environment entries
// for the stand-in ("KEY=value").
var StartServiceBusWithEnv = startServiceBus
