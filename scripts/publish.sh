#!/usr/bin/env bash
# Package the app and publish it to an existing Azure function app.
#
# Usage: scripts/publish.sh <function-app-name> [extra `func azure functionapp publish` options]
#
# NIMBUS_APP=resolver publishes the Resolver app (see package.sh); the default
# is the endpoint app.
#
# Runs scripts/package.sh (honours DIST_DIR and BIN_DIR), then
# `func azure functionapp publish <app>` from the staged directory. Needs Azure
# Functions Core Tools v4 (`func`) on PATH and a signed-in Azure CLI session
# (`az login`). Changes nothing else: no app settings are published.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ $# -lt 1 || -z "$1" || "$1" == -* ]]; then
	echo "usage: scripts/publish.sh <function-app-name> [extra func publish options]" >&2
	exit 2
fi
app="$1"
shift

if ! command -v func >/dev/null 2>&1; then
	cat >&2 <<'MSG'
publish.sh: Azure Functions Core Tools ('func', v4) not found on PATH.
Install it, for example with Node.js available:  npm install -g azure-functions-core-tools@4
Other installers: https://learn.microsoft.com/azure/azure-functions/functions-run-local
MSG
	exit 127
fi

case "${DIST_DIR:-$root/dist}" in
/*) dist="${DIST_DIR:-$root/dist}" ;;
*) dist="$PWD/$DIST_DIR" ;;
esac

"$root/scripts/package.sh"
cd "$dist"
echo "publish.sh: func azure functionapp publish $app $*"
func azure functionapp publish "$app" "$@"
