package nimbus

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// describeEnv is the environment variable that, set to any value, makes
// Main and Run describe the app instead of serving it: they print one JSON
// object on stdout and return at once, reading no setting and opening no
// port:
//
//	{"settings":["NimBus__Ledger__DatabaseId"],"eventTypes":["OrderPlaced","PaymentReceived"],"transactionalEventTypes":["PaymentReceived"],
//	 "httpFunctions":[{"name":"PlaceOrder","route":"orders","methods":["POST"]}]}
//
// settings are the app setting names the registrations read besides the
// library's own (a Container's DatabaseSetting and ContainerSetting);
// eventTypes are the registered event types, and transactionalEventTypes
// those registered with HandleTx or HandleEventTx; httpFunctions the
// functions registered with HandleHTTP, by name, with their route and
// methods (upper case). `nimbus-func check`
// builds the app and runs it with this variable to learn the settings it
// accepts and whether it needs the inbox.
const describeEnv = "NIMBUS_DESCRIBE"

// description is what describeEnv prints.
type description struct {
	Settings      []string        `json:"settings"`
	EventTypes    []string        `json:"eventTypes"`
	Transactional []string        `json:"transactionalEventTypes"`
	HTTPFunctions []describedHTTP `json:"httpFunctions"`
}

// describedHTTP is an HTTP function as describeEnv prints it.
type describedHTTP struct {
	Name    string   `json:"name"`
	Route   string   `json:"route"`
	Methods []string `json:"methods"`
}

// describe writes the app's description on opts.Stdout and closes
// opts.Listener when set, as Run does; a write error is reported on
// opts.Stderr and returned.
func (a *App) describe(opts Options) error {
	if opts.Listener != nil {
		_ = opts.Listener.Close()
	}
	d := description{Settings: a.settingNames(), EventTypes: []string{}, Transactional: []string{}, HTTPFunctions: []describedHTTP{}}
	for _, f := range a.httpFunctionsList() {
		d.HTTPFunctions = append(d.HTTPFunctions, describedHTTP{Name: f.Name, Route: f.Route, Methods: f.Methods})
	}
	slices.SortFunc(d.HTTPFunctions, func(x, y describedHTTP) int { return strings.Compare(x.Name, y.Name) })
	a.mu.Lock()
	for id, reg := range a.handlers {
		d.EventTypes = append(d.EventTypes, id)
		if reg.tx != nil {
			d.Transactional = append(d.Transactional, id)
		}
	}
	a.mu.Unlock()
	if d.Settings == nil {
		d.Settings = []string{}
	}
	slices.Sort(d.Settings)
	d.Settings = slices.Compact(d.Settings)
	slices.Sort(d.EventTypes)
	slices.Sort(d.Transactional)
	if err := json.NewEncoder(opts.Stdout).Encode(d); err != nil {
		err = fmt.Errorf("describing the app: %w", err)
		fmt.Fprintln(opts.Stderr, err)
		return err
	}
	return nil
}
