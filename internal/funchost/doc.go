// Package funchost speaks the Azure Functions custom-handler protocol: the
// host POSTs each invocation to /<FunctionName> on 127.0.0.1 with a JSON
// envelope {"Data":{...},"Metadata":{...}} and reads the answer's status:
// 2xx completes the trigger (a Service Bus message is completed), anything
// else fails it (the message is abandoned and redelivered). GET / is the
// host's readiness and health probe.
//
// The package decodes envelopes with encoding/json (Metadata strings are
// JSON strings inside JSON strings, numbers arrive as strings, dates have
// second precision), encodes the response, and routes by function name. It
// knows nothing of NimBus. Package hostwire builds envelopes as the host
// does (for nimbus-func invoke, the demo and tests).
package funchost
