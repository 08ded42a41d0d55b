#!/usr/bin/env bash
# Build the handler and stage a deployable Functions app root.
#
# Usage: scripts/package.sh [endpoint|resolver]
#
# One binary serves two Functions apps; this stages one of them:
#   endpoint  (default) host.json and functions/*/ of the repository root:
#             Subscriber, InboxCleanup, CloudEventsIngress
#   resolver  apps/resolver/host.json and apps/resolver/functions/*/: Resolver
# The app's settings must say the same (NimBus__App=Endpoint or Resolver).
#
# Environment:
#   NIMBUS_APP  the app when no argument is given (default endpoint)
#   DIST_DIR    staging directory (default <repo>/dist); recreated on every run
#   BIN_DIR     where build.sh writes the binary first (default <repo>/bin)
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

die() {
	echo "package.sh: $*" >&2
	exit 1
}

app="$(printf '%s' "${1:-${NIMBUS_APP:-endpoint}}" | tr '[:upper:]' '[:lower:]')"
case "$app" in
endpoint) app_root="$root" ;;
resolver) app_root="$root/apps/resolver" ;;
*) die "unknown app '$app': use endpoint or resolver" ;;
esac

dist="$(abspath "${DIST_DIR:-$root/dist}")"
bin_dir="$(abspath "${BIN_DIR:-$root/bin}")"
marker=".nimbus-package"

# The executable name the host will start: customHandler.description.defaultExecutablePath.
exe="$(sed -n 's/.*"defaultExecutablePath"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$app_root/host.json" | head -n 1)"
[[ -n "$exe" ]] || die "host.json has no customHandler.description.defaultExecutablePath"
[[ "$exe" =~ ^[A-Za-z0-9._-]+$ ]] || die "defaultExecutablePath '$exe' must be a plain file name in the app root"

# Validate function folders before doing any work.
shopt -s nullglob
functions=()
for dir in "$app_root"/functions/*/; do
	name="$(basename "$dir")"
	[[ -f "$dir/function.json" ]] || die "${dir#"$root"/}function.json is missing"
	# Utility.FunctionNameValidationRegex in the Functions host (case-insensitive).
	[[ "$name" =~ ^[A-Za-z][A-Za-z0-9_-]{0,127}$ ]] || die "function name '$name' is not valid for the Functions host"
	lower="$(printf '%s' "$name" | tr '[:upper:]' '[:lower:]')"
	[[ "$lower" != "host" ]] || die "'host' is a reserved function name"
	[[ "$lower" != "$(printf '%s' "$exe" | tr '[:upper:]' '[:lower:]')" ]] ||
		die "function folder '$name' would collide with the executable '$exe'"
	functions+=("$name")
done
((${#functions[@]} > 0)) || die "no functions/*/function.json found"

# Refuse to wipe a directory this script did not create.
if [[ -e "$dist" ]]; then
	[[ -d "$dist" ]] || die "DIST_DIR $dist exists and is not a directory"
	if [[ -n "$(ls -A "$dist")" && ! -f "$dist/$marker" ]]; then
		die "DIST_DIR $dist is not empty and was not staged by package.sh; refusing to delete it"
	fi
fi

"$root/scripts/build.sh" "$bin_dir/$exe"

rm -rf "$dist"
mkdir -p "$dist"
echo "staged by scripts/package.sh; this directory is recreated on every run" >"$dist/$marker"

cp "$app_root/host.json" "$dist/host.json"
for name in "${functions[@]}"; do
	mkdir -p "$dist/$name"
	cp "$app_root/functions/$name/function.json" "$dist/$name/function.json"
done
cp "$bin_dir/$exe" "$dist/$exe"
chmod 0755 "$dist/$exe"

cat >"$dist/.funcignore" <<'IGNORE'
.git*
.vscode
.nimbus-package
local.settings.json
*.go
go.mod
go.sum
__azurite_db*
__blobstorage__
__queuestorage__
IGNORE

if [[ -f "$app_root/local.settings.json" ]]; then
	cp "$app_root/local.settings.json" "$dist/local.settings.json"
	settings_note="local.settings.json copied from ${app_root#"$root"/}"
	[[ "$app_root" != "$root" ]] || settings_note="local.settings.json copied from the repository root"
else
	app_setting=""
	[[ "$app" != resolver ]] || app_setting='    "NimBus__App": "Resolver",'
	printf '%s\n' '{' '  "IsEncrypted": false,' '  "Values": {' ${app_setting:+"$app_setting"} '    "FUNCTIONS_WORKER_RUNTIME": "custom"' '  }' '}' \
		>"$dist/local.settings.json"
	settings_note="minimal local.settings.json written (copy local.settings.sample.json to ${app_root#"$root"/}/local.settings.json to run locally)"
	[[ "$app_root" != "$root" ]] || settings_note="minimal local.settings.json written (copy local.settings.sample.json to local.settings.json to run locally)"
fi

echo "package.sh: staged the $app app in $dist"
(cd "$dist" && find . -type f ! -name "$marker" | LC_ALL=C sort | sed 's|^\./|  |')
echo "package.sh: executable: $exe ($(wc -c <"$dist/$exe" | tr -d ' ') bytes, mode 0755)"
echo "package.sh: functions: ${functions[*]}"
echo "package.sh: $settings_note"
