#!/bin/sh
# azd preprovision hook (azure.yaml): checks the azd environment's Baton settings before anything
# is provisioned, with the handler's own start-up checks (`baton validate`, built for this
# machine with go run). azd passes the environment's values (azd env set BATON_JOB …) as
# environment variables; unset ones take the template's defaults. A bad value stops
# `azd provision` / `azd up` here with a message naming the setting.
#
# Works from any current folder. Environment (optional): GO (default: go).
set -eu

script_dir=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
src=$(dirname -- "$script_dir")
cd "$src"
# Build for this machine even when the caller exported a cross-compilation target.
unset GOOS GOARCH
FUNCTIONS_APP_ROOT_PATH=$src
export FUNCTIONS_APP_ROOT_PATH
exec "${GO:-go}" run ./handler validate
