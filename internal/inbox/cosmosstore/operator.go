package cosmosstore

import "fmt"

// operatorError is a misconfiguration an operator must fix. Its text names
// only account settings (consistency level, container ids, app-setting
// names), never keys or payloads, so the pipeline logs it verbatim instead of
// reducing it to "unavailable".
type operatorError struct{ err error }

func (e *operatorError) Error() string           { return e.err.Error() }
func (e *operatorError) Unwrap() error           { return e.err }
func (e *operatorError) OperatorMessage() string { return e.err.Error() }

func operatorErrorf(format string, args ...any) error {
	return &operatorError{err: fmt.Errorf(format, args...)}
}
