#!/usr/bin/env bash
# Build the custom handler binary for the Azure Functions Linux workers.
#
# Usage: scripts/build.sh [output-path]
#
# Produces a static linux/amd64 executable (CGO disabled, -trimpath, stripped).
# Output: the argument if given, else $BIN_DIR/handler (BIN_DIR defaults to
# <repo>/bin). Relative paths are taken relative to the caller's directory.
# Runnable from any directory. Set GOFLAGS=-buildvcs=false if the checkout's
# VCS status cannot be read (for example a repository owned by another user).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

abspath() {
	case "$1" in
	/*) printf '%s\n' "$1" ;;
	*) printf '%s\n' "$PWD/$1" ;;
	esac
}

bin_dir="$(abspath "${BIN_DIR:-$root/bin}")"
out="$(abspath "${1:-$bin_dir/handler}")"

if ! command -v go >/dev/null 2>&1; then
	echo "build.sh: 'go' not found on PATH; install Go 1.26 or newer" >&2
	exit 127
fi

mkdir -p "$(dirname "$out")"
cd "$root"
GOOS=linux GOARCH=amd64 CGO_ENABLED=0 \
	go build -trimpath -ldflags "-s -w" -o "$out" ./handler
echo "build.sh: built $out (linux/amd64, static)"
