#!/usr/bin/env bash
# Build the handler and stage a deployable Functions app root: a wrapper of
# `nimbus-func package` (cmd/nimbus-func) for this repository, whose main
# package is handler/.
#
# Usage: scripts/package.sh [endpoint|resolver]
#
# One binary serves two Functions apps; this stages one of them:
#   endpoint  (default) host.json and functions/*/ of the repository root:
#             Subscriber, InboxCleanup, OutboxSweep, CloudEventsIngress,
#             DeferredProcessor
#   resolver  apps/resolver/host.json and apps/resolver/functions/*/: Resolver
# The app's settings must say the same (NimBus__App=Endpoint or Resolver).
#
# Environment:
#   NIMBUS_APP  the app when no argument is given (default endpoint)
#   DIST_DIR    staging directory (default <repo>/dist); recreated on every run
#   BIN_DIR     where the binary is built first (default <repo>/bin)
#
# Layout staged (the host only looks at the immediate sub-folders of the app
# root for function.json, so functions/<Name>/ is flattened to <Name>/):
#   host.json
#   <defaultExecutablePath from host.json>   the binary, mode 0755
#   <Name>/function.json                     one per functions/<Name>/
#   .funcignore                              keeps local files out of the zip
#   local.settings.json                      for `func start` (see below)
#
# local.settings.json is copied from the app's root (the repository root, or
# apps/resolver/) if present (it is git-ignored and never published:
# .funcignore excludes it). Otherwise a minimal one with
# FUNCTIONS_WORKER_RUNTIME=custom (and NimBus__App=Resolver for the Resolver)
# is written so that Core Tools knows the worker runtime.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

abspath() {
	case "$1" in
	/*) printf '%s\n' "$1" ;;
	*) printf '%s\n' "$PWD/$1" ;;
	esac
}

app="$(printf '%s' "${1:-${NIMBUS_APP:-endpoint}}" | tr '[:upper:]' '[:lower:]')"
case "$app" in
endpoint) app_flag=() ;;
resolver) app_flag=(--resolver) ;;
*)
	echo "package.sh: unknown app '$app': use endpoint or resolver" >&2
	exit 1
	;;
esac

if ! command -v go >/dev/null 2>&1; then
	echo "package.sh: 'go' not found on PATH; install Go 1.26 or newer" >&2
	exit 127
fi

dist="$(abspath "${DIST_DIR:-$root/dist}")"
bin_dir="$(abspath "${BIN_DIR:-$root/bin}")"
cd "$root"
exec go run ./cmd/nimbus-func package "${app_flag[@]}" --dir "$root" --pkg ./handler --dist "$dist" --bin "$bin_dir"
