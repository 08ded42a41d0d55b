package deploy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// No Bicep compiler runs in these tests: they check the templates' text for
// the decisions that matter and for balanced syntax.

// bicepAPIVersions are the resource types the templates may use and the API
// version for each: known-good versions from the published Flex Consumption
// samples and public Bicep (the managed identity's is the GA version of that
// resource type); newer ones exist.
var bicepAPIVersions = map[string]string{
	"Microsoft.Web/serverfarms":                                     "2024-04-01",
	"Microsoft.Web/sites":                                           "2024-04-01",
	"Microsoft.Storage/storageAccounts":                             "2024-01-01",
	"Microsoft.Storage/storageAccounts/blobServices":                "2024-01-01",
	"Microsoft.Storage/storageAccounts/blobServices/containers":     "2024-01-01",
	"Microsoft.OperationalInsights/workspaces":                      "2025-02-01",
	"Microsoft.Insights/components":                                 "2020-02-02",
	"Microsoft.Authorization/roleAssignments":                       "2022-04-01",
	"Microsoft.ManagedIdentity/userAssignedIdentities":              "2023-01-31",
	"Microsoft.ServiceBus/namespaces":                               "2024-01-01",
	"Microsoft.ServiceBus/namespaces/topics":                        "2024-01-01",
	"Microsoft.ServiceBus/namespaces/topics/subscriptions":          "2024-01-01",
	"Microsoft.ServiceBus/namespaces/topics/subscriptions/rules":    "2024-01-01",
	"Microsoft.DocumentDB/databaseAccounts":                         "2024-11-15",
	"Microsoft.DocumentDB/databaseAccounts/sqlDatabases":            "2024-11-15",
	"Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers": "2024-11-15",
	"Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments":      "2024-11-15",
}

var resourceTypeRE = regexp.MustCompile(`'([A-Za-z]+\.[A-Za-z]+(?:/[A-Za-z]+)+)@([0-9]{4}-[0-9]{2}-[0-9]{2}(?:-preview)?)'`)

type bicepFile struct {
	Name string // relative to infra/bicep
	Text string
}

func bicepFiles(t *testing.T) []bicepFile {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "infra", "bicep")
	var files []bicepFile
	for _, rel := range []string{"main.bicep", "modules/servicebus-topology.bicep", "modules/servicebus-access.bicep", "modules/resolver-app.bicep", "modules/cloudevents-ingress.bicep", "modules/sample-ledger.bicep", "modules/event-forwarding.bicep"} {
		files = append(files, bicepFile{Name: rel, Text: string(readFile(t, filepath.Join(dir, rel)))})
	}
	return files
}

func bicepText(t *testing.T, name string) string {
	t.Helper()
	for _, f := range bicepFiles(t) {
		if f.Name == name {
			return f.Text
		}
	}
	t.Fatalf("no Bicep file %s", name)
	return ""
}

func TestBicepSyntaxAndAPIVersions(t *testing.T) {
	for _, f := range bicepFiles(t) {
		if err := checkBalanced(f.Text); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
		uses := resourceTypeRE.FindAllStringSubmatch(f.Text, -1)
		if len(uses) == 0 {
			t.Errorf("%s declares no resources", f.Name)
		}
		for _, m := range uses {
			want, known := bicepAPIVersions[m[1]]
			switch {
			case !known:
				t.Errorf("%s uses %s, which has no agreed API version", f.Name, m[1])
			case m[2] != want:
				t.Errorf("%s uses %s@%s, want @%s", f.Name, m[1], m[2], want)
			}
		}
	}
}

// TestBicepDescriptions checks that every param and output carries @description.
func TestBicepDescriptions(t *testing.T) {
	for _, f := range bicepFiles(t) {
		lines := strings.Split(f.Text, "\n")
		for i, l := range lines {
			if !strings.HasPrefix(l, "param ") && !strings.HasPrefix(l, "output ") {
				continue
			}
			described := false
			for j := i - 1; j >= 0 && strings.HasPrefix(lines[j], "@"); j-- {
				described = described || strings.HasPrefix(lines[j], "@description(")
			}
			// A multi-line decorator such as @allowed([...]) ends with "])".
			for j := i - 1; !described && j >= 0 && lines[j] != "" && !strings.HasPrefix(lines[j], "//"); j-- {
				described = strings.HasPrefix(lines[j], "@description(")
			}
			if !described {
				t.Errorf("%s:%d: %q has no @description", f.Name, i+1, strings.TrimSpace(l))
			}
		}
	}
}

func TestBicepFunctionAppAndData(t *testing.T) {
	main := bicepText(t, "main.bicep")
	all := ""
	for _, f := range bicepFiles(t) {
		all += f.Text
	}

	mustMatch := map[string]string{
		"Flex Consumption plan":             `tier:\s*'FlexConsumption'\s+name:\s*'FC1'`,
		"Linux function app":                `kind:\s*'functionapp,linux'`,
		"custom runtime 1.0":                `runtime:\s*\{\s*name:\s*'custom'\s+version:\s*'1\.0'\s*\}`,
		"deployment container via the UAMI": `authentication:\s*\{\s*type:\s*'UserAssignedIdentity'\s+userAssignedIdentityResourceId:\s*identity\.id`,
		"storage without shared keys":       `allowSharedKeyAccess:\s*false`,
		"Strong consistency":                `defaultConsistencyLevel:\s*'Strong'`,
		"inbox partition key /id":           `paths:\s*\[\s*'/id'\s*\]`,
		"inbox indexing: purge paths only":  `indexingPolicy:\s*\{\s*indexingMode:\s*'consistent'\s+automatic:\s*true\s+includedPaths:\s*\[\s*\{\s*path:\s*'/endpointId/\?'\s*\}\s*\{\s*path:\s*'/createdAtUtc/\?'\s*\}\s*\]\s*excludedPaths:\s*\[\s*\{\s*path:\s*'/\*'\s*\}\s*\]`,
		"Cosmos data-plane role":            `'Microsoft\.DocumentDB/databaseAccounts/sqlRoleAssignments@`,
		"Cosmos data contributor role id":   `sqlRoleDefinitions/\$\{cosmosDataContributor\}'`,
		"Cosmos keys disabled":              `disableLocalAuth:\s*true\s+minimalTlsVersion`,
		"App Insights Entra auth":           `Authorization=AAD`,
	}
	for what, re := range mustMatch {
		if !regexp.MustCompile(re).MatchString(main) {
			t.Errorf("main.bicep: %s not found (/%s/)", what, re)
		}
	}
	if n := strings.Count(main, "defaultConsistencyLevel:"); n != 1 {
		t.Errorf("main.bicep sets defaultConsistencyLevel %d times, want once (Strong)", n)
	}
	// The inbox container has no default TTL (cleanup is explicit); only the
	// Resolver's tracking containers and the sample ledger set one, in their
	// modules.
	if strings.Contains(main, "defaultTtl") {
		t.Error("main.bicep sets a defaultTtl; the inbox container must have none")
	}
	for _, banned := range []string{"listKeys(", "listConnectionStrings(", "AccountKey=", "SharedAccessKey"} {
		if strings.Contains(all, banned) {
			t.Errorf("the Bicep contains %q", banned)
		}
	}

	roles := map[string]string{
		"Storage Blob Data Owner":             "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
		"Storage Queue Data Contributor":      "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
		"Storage Table Data Contributor":      "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
		"Monitoring Metrics Publisher":        "3913510d-42f4-4e42-8a64-420c390055eb",
		"Azure Service Bus Data Receiver":     "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
		"Azure Service Bus Data Sender":       "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
		"Cosmos DB Built-in Data Contributor": "00000000-0000-0000-0000-000000000002",
	}
	for name, id := range roles {
		if !strings.Contains(all, "'"+id+"'") {
			t.Errorf("role %s (%s) is not assigned", name, id)
		}
	}

	settings := bicepAppSettings(t, main)
	want := map[string]string{
		"AzureWebJobsStorage__credential":               "'managedidentity'",
		"AzureWebJobsStorage__clientId":                 "identity.properties.clientId",
		"ServiceBusConnection__fullyQualifiedNamespace": "serviceBusAccess.outputs.fullyQualifiedNamespace",
		"ServiceBusConnection__credential":              "'managedidentity'",
		"ServiceBusConnection__clientId":                "identity.properties.clientId",
		"NimBus__Endpoint":                              "endpointName",
		"NimBus__Inbox__Enabled":                        "'true'",
		"NimBus__Inbox__Store":                          "'Cosmos'",
		"NimBus__Inbox__RetentionPeriod":                "inboxRetentionPeriod",
		"NimBus__Inbox__CleanupSchedule":                "inboxCleanupSchedule",
		"NimBus__Outbox__SweepSchedule":                 "outboxSweepSchedule",
		"NimBus__Outbox__MinimumAge":                    "outboxMinimumAge",
		"NimBus__Inbox__Cosmos__AccountEndpoint":        "cosmos.properties.documentEndpoint",
		"NimBus__Inbox__Cosmos__ClientId":               "identity.properties.clientId",
		"NimBus__Inbox__Cosmos__DatabaseId":             "cosmosDatabaseId",
		"NimBus__Inbox__Cosmos__ContainerId":            "cosmosContainerId",
		// Entra data-plane RBAC cannot create containers.
		"NimBus__Inbox__Cosmos__AutoCreateContainer":     "'false'",
		"NimBus__Inbox__Cosmos__AllowRelaxedConsistency": "'false'",
		"NimBus__Resolver__Sink":                         "'ServiceBus'",
	}
	for name, value := range want {
		got, ok := settings[name]
		switch {
		case !ok:
			t.Errorf("main.bicep does not set app setting %s", name)
		case got != value:
			t.Errorf("app setting %s = %s, want %s", name, got, value)
		}
	}
	for name := range settings {
		if strings.Contains(name, ":") {
			t.Errorf("app setting %s uses ':'; Linux app settings need '__'", name)
		}
	}
	// Flex Consumption takes the worker runtime from functionAppConfig.runtime.
	if _, ok := settings["FUNCTIONS_WORKER_RUNTIME"]; ok {
		t.Error("main.bicep sets FUNCTIONS_WORKER_RUNTIME; Flex Consumption rejects it")
	}
	// Key-based settings must not be set: the app uses its identity everywhere.
	for _, name := range []string{"ServiceBusConnection", "NimBus__Inbox__Cosmos__ConnectionString", "AzureWebJobsStorage"} {
		if _, ok := settings[name]; ok {
			t.Errorf("main.bicep sets %s (key-based); use the identity settings", name)
		}
	}
}

var appSettingRE = regexp.MustCompile(`name:\s*'([A-Za-z0-9_:]+)'\s*\n\s*value:\s*([^\n]+)`)

// bicepAppSettings extracts the name/value pairs of main.bicep's appSettings
// array: the settings every deployment gets. With concat([...], cond ? [...]
// : []), those are the first array's.
func bicepAppSettings(t *testing.T, main string) map[string]string {
	t.Helper()
	start := strings.Index(main, "appSettings: [")
	if start < 0 {
		start = strings.Index(main, "appSettings: concat([")
	}
	if start < 0 {
		t.Fatal("main.bicep has no appSettings array")
	}
	section := main[start:]
	if end := regexp.MustCompile(`\n      \](\n|, )`).FindStringIndex(section); end != nil {
		section = section[:end[0]]
	}
	return settingPairs(t, section)
}

// conditionalAppSettings extracts the name/value pairs main.bicep's
// appSettings add when cond holds: concat([...], cond ? [...] : []).
func conditionalAppSettings(t *testing.T, main, cond string) map[string]string {
	t.Helper()
	// The condition's list follows the base list or another condition's.
	loc := regexp.MustCompile(`\n      \](?: : \[\])?, ` + regexp.QuoteMeta(cond) + ` \? \[`).FindStringIndex(main)
	if loc == nil {
		t.Fatalf("main.bicep's appSettings add nothing on %s", cond)
	}
	section := main[loc[1]:]
	if end := strings.Index(section, "\n      ] : []"); end > 0 {
		section = section[:end]
	} else {
		t.Fatalf("main.bicep's appSettings on %s do not end with ] : []", cond)
	}
	return settingPairs(t, section)
}

func settingPairs(t *testing.T, section string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, s := range appSettingRE.FindAllStringSubmatch(section, -1) {
		if _, dup := m[s[1]]; dup {
			t.Errorf("app setting %s is set twice", s[1])
		}
		m[s[1]] = strings.TrimSpace(s[2])
	}
	return m
}

func TestBicepServiceBusTopology(t *testing.T) {
	topo := bicepText(t, "modules/servicebus-topology.bicep")
	for what, s := range map[string]string{
		"endpoint topic":                  "name: endpointName",
		"Resolver topic and subscription": "var resolverId = 'Resolver'",
		"session subscription {E}":        "parent: endpointTopic\n  name: endpointName\n  properties: union(subscriptionDefaults, { requiresSession: true })",
		"rule to-{E}":                     `name: 'to-${endpointName}'`,
		"filter To = {E}":                 `sqlExpression: 'user.To = \'${endpointName}\''`,
		"rule continuation":               `sqlExpression: 'SET user.To = \'${endpointName}\'; SET user.From = \'Continuation\''`,
		"rule retry":                      `sqlExpression: 'SET user.To = \'${endpointName}\'; SET user.From = \'Retry\''`,
		"rule from-{E}":                   `name: 'from-${endpointName}'`,
		"fan-out action":                  `sqlExpression: 'SET user.From = \'${endpointName}\''`,
		"fan-out forwarding":              "forwardTo: resolverTopic.name",
		"Deferred filter":                 `sqlExpression: 'user.To = \'Deferred\' AND user.OriginalSessionId IS NOT NULL'`,
		"DeferredProcessor filter":        `sqlExpression: 'user.To = \'DeferredProcessor\''`,
		"MaxDeliveryCount 10":             "maxDeliveryCount: 10",
		"LockDuration 30 s":               "lockDuration: 'PT30S'",
		"inert $Default":                  "name: '$Default'",
		"Standard namespace":              "name: 'Standard'",
	} {
		if !strings.Contains(topo, s) {
			t.Errorf("servicebus-topology.bicep: %s not found (%q)", what, s)
		}
	}
	// The Resolver's own subscription keeps $Default: no rules are declared on it.
	if strings.Contains(topo, "parent: resolverSubscription") {
		t.Error("servicebus-topology.bicep declares rules on the Resolver subscription; it must keep $Default")
	}
	// Four filtered subscriptions, each with its $Default overwritten.
	if n := strings.Count(topo, "  inertDefaultRule\n"); n != 4 {
		t.Errorf("inertDefaultRule is used by %d rule sets, want 4 ({E}, Resolver fan-out, Deferred, DeferredProcessor)", n)
	}

	access := bicepText(t, "modules/servicebus-access.bicep")
	if !strings.Contains(access, "scope: endpointTopic") {
		t.Error("servicebus-access.bicep: roles are not scoped to the endpoint topic")
	}
	main := bicepText(t, "main.bicep")
	for _, s := range []string{
		"module serviceBusTopology 'modules/servicebus-topology.bicep' = if (createServiceBus)",
		"scope: resourceGroup(serviceBusResourceGroupName)",
		"var createServiceBus = empty(existingServiceBusNamespaceName)",
	} {
		if !strings.Contains(main, s) {
			t.Errorf("main.bicep: %q not found", s)
		}
	}
}

// checkBalanced reports unbalanced (), [], {} and unterminated strings or
// comments, treating '...' strings (with \ escapes and ${...} interpolation)
// and // and /* */ comments as Bicep does.
func checkBalanced(src string) error {
	var stack []byte // '(', '[', '{', or 'i' for an interpolation inside a string
	inString := false
	line := 1
	closer := map[byte]byte{')': '(', ']': '[', '}': '{'}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == '\n' {
			line++
		}
		if inString {
			switch {
			case c == '\\':
				i++
			case c == '\'':
				inString = false
			case c == '$' && i+1 < len(src) && src[i+1] == '{':
				stack = append(stack, 'i')
				inString = false
				i++
			case c == '\n':
				return fmt.Errorf("line %d: newline in a string", line)
			}
			continue
		}
		switch c {
		case '/':
			if i+1 < len(src) && src[i+1] == '/' {
				for i < len(src) && src[i] != '\n' {
					i++
				}
				line++
			} else if i+1 < len(src) && src[i+1] == '*' {
				end := strings.Index(src[i+2:], "*/")
				if end < 0 {
					return fmt.Errorf("line %d: unterminated comment", line)
				}
				line += strings.Count(src[i:i+2+end], "\n")
				i += end + 3
			}
		case '\'':
			inString = true
		case '(', '[', '{':
			stack = append(stack, c)
		case ')', ']', '}':
			if len(stack) == 0 {
				return fmt.Errorf("line %d: unmatched %q", line, c)
			}
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if c == '}' && top == 'i' {
				inString = true
				continue
			}
			if top != closer[c] {
				return fmt.Errorf("line %d: %q closes %q", line, c, top)
			}
		}
	}
	if inString {
		return fmt.Errorf("unterminated string")
	}
	if len(stack) > 0 {
		return fmt.Errorf("%d unclosed brackets", len(stack))
	}
	return nil
}

func TestCheckBalanced(t *testing.T) {
	good := []string{
		"var a = { b: [ 'x' ] }",
		"var s = 'it\\'s ${f('a', [1])} ok' // ( unbalanced in a comment",
		"/* { */ var x = (1)",
	}
	bad := []string{"var a = { b: [ 'x' }", "var s = 'open", "var a = (", "/* open", "var s = 'a\nb'"}
	for _, s := range good {
		if err := checkBalanced(s); err != nil {
			t.Errorf("checkBalanced(%q) = %v, want nil", s, err)
		}
	}
	for _, s := range bad {
		if checkBalanced(s) == nil {
			t.Errorf("checkBalanced(%q) = nil, want an error", s)
		}
	}
}

// TestBicepResolverApp checks the Resolver's module and how main.bicep
// deploys it: only when asked, its tracking containers with TTL on, its
// own identity with receive and send roles on the Resolver topic, and the
// settings the Resolver app asks for.
func TestBicepResolverApp(t *testing.T) {
	main := bicepText(t, "main.bicep")
	mod := bicepText(t, "modules/resolver-app.bicep")
	for _, s := range []string{
		"param deployResolver bool = false",
		"module resolverApp 'modules/resolver-app.bicep' = if (deployResolver)",
		"param unresolvedRetentionDays int = -1",
		"param resolverMaxConcurrentSessions int = 16",
	} {
		if !strings.Contains(main, s) {
			t.Errorf("main.bicep: %q not found", s)
		}
	}
	for what, re := range map[string]string{
		"endpoint containers /id with TTL on, no default": `paths:\s*\[\s*'/id'\s*\]\s*kind:\s*'Hash'\s*version:\s*2\s*\}\s*defaultTtl:\s*-1`,
		"messages 90 days":               `name:\s*'messages'\s*ttl:\s*7776000`,
		"audits 1 year":                  `name:\s*'audits'\s*ttl:\s*31536000`,
		"history containers by /eventId": `paths:\s*\[\s*'/eventId'\s*\][\s\S]*defaultTtl:\s*c\.ttl`,
		"one container per endpoint id":  `\[for id in endpointIds:`,
		"own identity":                   `name:\s*'id-resolver-\$\{token\}'`,
		"roles on the Resolver topic":    `module serviceBusAccess 'servicebus-access.bicep'[\s\S]*endpointTopicName:\s*'Resolver'`,
		"Flex Consumption plan":          `tier:\s*'FlexConsumption'\s+name:\s*'FC1'`,
		"custom runtime 1.0":             `runtime:\s*\{\s*name:\s*'custom'\s+version:\s*'1\.0'\s*\}`,
		"Cosmos data-plane role":         `sqlRoleDefinitions/\$\{cosmosDataContributor\}'`,
	} {
		if !regexp.MustCompile(re).MatchString(mod) {
			t.Errorf("resolver-app.bicep: %s not found (/%s/)", what, re)
		}
	}
	settings := bicepAppSettings(t, mod)
	for name, value := range map[string]string{
		"NimBus__App":                                                          "'Resolver'",
		"NimBus__Resolver__Store":                                              "'Cosmos'",
		"NimBus__Cosmos__AccountEndpoint":                                      "cosmos.properties.documentEndpoint",
		"NimBus__Cosmos__ClientId":                                             "identity.properties.clientId",
		"NimBus__Cosmos__DatabaseId":                                           "cosmosDatabaseName",
		"NimBus__Cosmos__AutoCreateContainers":                                 "'false'",
		"NimBus__Cosmos__AllowRelaxedConsistency":                              "'false'",
		"NimBus__Cosmos__UnresolvedRetentionDays":                              "string(unresolvedRetentionDays)",
		"ServiceBusConnection__fullyQualifiedNamespace":                        "serviceBusAccess.outputs.fullyQualifiedNamespace",
		"ServiceBusConnection__credential":                                     "'managedidentity'",
		"ServiceBusConnection__clientId":                                       "identity.properties.clientId",
		"AzureWebJobsStorage__credential":                                      "'managedidentity'",
		"AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentSessions": "string(maxConcurrentSessions)",
	} {
		if got, ok := settings[name]; !ok || got != value {
			t.Errorf("Resolver app setting %s = %q (set %v), want %s", name, got, ok, value)
		}
	}
	// The Resolver is not an endpoint: none of the endpoint's settings.
	for name := range settings {
		if strings.HasPrefix(name, "NimBus__Inbox__") || name == "NimBus__Endpoint" || name == "NimBus__Resolver__Sink" {
			t.Errorf("the Resolver app sets the endpoint setting %s", name)
		}
	}
	if got := bicepAppSettings(t, main)["NimBus__App"]; got != "'Endpoint'" {
		t.Errorf("the endpoint app's NimBus__App = %s, want 'Endpoint'", got)
	}
}

// TestBicepSampleLedger checks the sample ledger: only when asked, its
// container with partition key /customerId and time to live on with no
// default (the markers' own ttl expires them), in the inbox's account so
// the account-scope data-plane role covers it, and the two settings the
// sample reads.
func TestBicepSampleLedger(t *testing.T) {
	main := bicepText(t, "main.bicep")
	mod := bicepText(t, "modules/sample-ledger.bicep")
	for _, s := range []string{
		"param deploySampleLedger bool = false",
		"param sampleLedgerDatabaseId string = 'Billing'",
		"param sampleLedgerContainerId string = 'ledger'",
		"module sampleLedger 'modules/sample-ledger.bicep' = if (deploySampleLedger)",
		"cosmosAccountName: cosmos.name",
		"createDatabase: sampleLedgerDatabaseId != cosmosDatabaseId",
	} {
		if !strings.Contains(main, s) {
			t.Errorf("main.bicep: %q not found", s)
		}
	}
	for what, re := range map[string]string{
		"ledger /customerId with TTL on, no default": `paths:\s*\[\s*'/customerId'\s*\]\s*kind:\s*'Hash'\s*version:\s*2\s*\}\s*defaultTtl:\s*-1\s*\}`,
		"in the named (existing) account":            `resource cosmos 'Microsoft\.DocumentDB/databaseAccounts@[0-9-]+' existing = \{\s*name:\s*cosmosAccountName\s*\}`,
		"database created only when asked":           `resource newDatabase '[^']+' = if \(createDatabase\) \{\s*parent:\s*cosmos\s*name:\s*databaseId`,
		"container in that database":                 `resource ledger '[^']+' = \{\s*parent:\s*database\s*name:\s*containerId`,
		"after the database":                         `dependsOn:\s*\[\s*newDatabase\s*\]`,
	} {
		if !regexp.MustCompile(re).MatchString(mod) {
			t.Errorf("sample-ledger.bicep: %s not found (/%s/)", what, re)
		}
	}
	// One data-plane role assignment at account scope: it covers every
	// container of the account, the ledger's included.
	if !regexp.MustCompile(`resource cosmosDataAccess 'Microsoft\.DocumentDB/databaseAccounts/sqlRoleAssignments@[0-9-]+' = \{\s*parent:\s*cosmos\s[\s\S]*?scope:\s*cosmos\.id\s*\}`).MatchString(main) {
		t.Error("main.bicep: the endpoint identity's data-plane role is not assigned at account scope")
	}
	if strings.Contains(mod, "sqlRoleAssignments") {
		t.Error("sample-ledger.bicep assigns a role of its own; the account-scope assignment covers the ledger")
	}
	if !regexp.MustCompile(`dependsOn:\s*\[[^\]]*\bsampleLedger\b[^\]]*\]`).MatchString(main) {
		t.Error("main.bicep: the function app does not wait for the sample ledger")
	}
	sampleContainerSettings(t, main, "deploySampleLedger", "Ledger")
}

// TestBicepSampleOrders checks the container of the sample's PlaceOrder
// front door: only when asked, the ledger's module (partition key
// /customerId, time to live on with no default) with the orders' ids, a
// database created only when no other part of the template creates it,
// the function app waiting for it, and the two settings the sample reads.
func TestBicepSampleOrders(t *testing.T) {
	main := bicepText(t, "main.bicep")
	for _, s := range []string{
		"param deploySampleOrders bool = false",
		"param sampleOrdersDatabaseId string = 'Sales'",
		"param sampleOrdersContainerId string = 'orders'",
		"module sampleOrders 'modules/sample-ledger.bicep' = if (deploySampleOrders)",
		"createDatabase: sampleOrdersDatabaseId != cosmosDatabaseId && !(deploySampleLedger && sampleOrdersDatabaseId == sampleLedgerDatabaseId)",
		"containerId: sampleOrdersContainerId",
	} {
		if !strings.Contains(main, s) {
			t.Errorf("main.bicep: %q not found", s)
		}
	}
	if !regexp.MustCompile(`dependsOn:\s*\[[^\]]*\bsampleOrders\b[^\]]*\]`).MatchString(main) {
		t.Error("main.bicep: the function app does not wait for the sample orders")
	}
	sampleContainerSettings(t, main, "deploySampleOrders", "Orders")
}

// sampleContainerSettings checks that the condition cond of main.bicep,
// and only it, sets the two app settings of a sample container,
// NimBus__Sample__<name>__DatabaseId and __ContainerId, from the
// parameters sample<name>DatabaseId and sample<name>ContainerId.
func sampleContainerSettings(t *testing.T, main, cond, name string) {
	t.Helper()
	base := bicepAppSettings(t, main)
	extra := conditionalAppSettings(t, main, cond)
	for _, id := range []string{"DatabaseId", "ContainerId"} {
		setting, param := "NimBus__Sample__"+name+"__"+id, "sample"+name+id
		if got := extra[setting]; got != param {
			t.Errorf("with %s, app setting %s = %q, want %s", cond, setting, got, param)
		}
		if _, ok := base[setting]; ok {
			t.Errorf("app setting %s is set without %s", setting, cond)
		}
	}
	if len(extra) != 2 {
		t.Errorf("%s adds %d app settings (%v), want 2", cond, len(extra), extra)
	}
}
