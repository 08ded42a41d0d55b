#!/usr/bin/env bash
# Package the app and publish it to an existing Azure function app: a wrapper
# of `nimbus-func publish` (cmd/nimbus-func) for this repository.
#
# Usage: scripts/publish.sh <function-app-name> [extra `func azure functionapp publish` options]
#
# NIMBUS_APP=resolver publishes the Resolver app (see package.sh); the default
# is the endpoint app.
#
# Packages as scripts/package.sh does (honours DIST_DIR and BIN_DIR), then
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

abspath() {
	case "$1" in
	/*) printf '%s\n' "$1" ;;
	*) printf '%s\n' "$PWD/$1" ;;
	esac
}

nimbus_app="$(printf '%s' "${NIMBUS_APP:-endpoint}" | tr '[:upper:]' '[:lower:]')"
case "$nimbus_app" in
endpoint) app_flag=() ;;
resolver) app_flag=(--resolver) ;;
*)
	echo "publish.sh: unknown NIMBUS_APP '$nimbus_app': use endpoint or resolver" >&2
	exit 1
	;;
esac

dist="$(abspath "${DIST_DIR:-$root/dist}")"
bin_dir="$(abspath "${BIN_DIR:-$root/bin}")"
cd "$root"
exec go run ./cmd/nimbus-func publish "$app" "${app_flag[@]}" --dir "$root" --pkg ./handler --dist "$dist" --bin "$bin_dir" -- "$@"
