package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MaxDeployedEndpointLen is the longest endpoint name a deployment takes:
// the endpoint's subscription holds the rule from-<endpoint>, and a Service
// Bus rule name has at most 50 characters (infra/bicep's endpointName has
// the same @maxLength).
const MaxDeployedEndpointLen = 45

// ReservedEndpointNames are NimBus's own names on the topology, which no
// endpoint may take (Service Bus compares names without regard to case):
// the Resolver's topic and subscription, the Deferred and DeferredProcessor
// subscriptions of every endpoint's topic, and the Continuation and Retry
// addresses its subscription's rules rewrite.
var ReservedEndpointNames = []string{"Resolver", "Deferred", "DeferredProcessor", "Continuation", "Retry"}

// endpointNameRE is a Service Bus subscription name (letters, digits, '.',
// '_' and '-') that starts with a letter, short enough for the rule
// from-<endpoint>.
var endpointNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,` + strconv.Itoa(MaxDeployedEndpointLen-1) + `}$`)

// CheckEndpointName reports why name cannot be an endpoint's name: it names
// the endpoint's topic and session subscription, so the deployment refuses
// what Service Bus or NimBus's topology would. nimbus-func init and the
// endpoint app's start-up apply it.
func CheckEndpointName(name string) error {
	if why := endpointNameProblem(name); why != "" {
		return fmt.Errorf("endpoint name %s %s", show(name), why)
	}
	return nil
}

// endpointNameProblem says why name cannot be an endpoint's name; "" when
// it can.
func endpointNameProblem(name string) string {
	if !endpointNameRE.MatchString(name) {
		return fmt.Sprintf("is not a name the deployment takes: want a letter, then up to %d letters, digits, '.', '_' or '-' (it names the endpoint's topic and subscription, and the rule from-<endpoint>, at most 50 characters)",
			MaxDeployedEndpointLen-1)
	}
	for _, r := range ReservedEndpointNames {
		if strings.EqualFold(name, r) {
			return fmt.Sprintf("is reserved: NimBus's topology names %s (Service Bus compares names without regard to case); the reserved names are %s",
				r, strings.Join(ReservedEndpointNames, ", "))
		}
	}
	return ""
}
