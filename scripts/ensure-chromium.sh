#!/usr/bin/env bash
# Installs Debian's chromium when it is missing, for the dashboard's headless-browser check
# (make test runs it before the Go tests). Root on a fresh Debian machine (CI) installs it with
# apt-get; anyone else without it gets a clear message and a non-zero exit.
# Prints the browser's path on success.
set -euo pipefail

if path=$(command -v chromium 2>/dev/null); then
	echo "$path"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "chromium is not installed and this is not root: install it with" >&2
	echo "  sudo apt-get update && sudo apt-get install -y chromium" >&2
	echo "(the dashboard browser check in make test needs it)" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium is not installed and apt-get is not available: install Debian's chromium package" >&2
	exit 1
fi
echo "installing chromium with apt-get (dashboard browser check)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends chromium >&2
command -v chromium
