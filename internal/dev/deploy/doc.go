// Package deploy holds tests for the deployment artifacts: host.json, the
// function.json files, local.settings.sample.json, the build and packaging
// scripts, the Bicep templates and docs/deploying.md. It has no non-test code.
package deploy
