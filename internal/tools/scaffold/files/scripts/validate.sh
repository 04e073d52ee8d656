#!/bin/sh
# azd preprovision hook (azure.yaml): checks the azd environment's Baton settings before anything
# is provisioned, with the handler's own start-up checks (`baton validate`, built for this
# machine with go run): the heartbeat, every schedule (those the app declares in code and the
# one BATON_SCHEDULE declares, with the BATON_SCHEDULES overrides applied) and the job params.
# azd passes the environment's values (azd env set BATON_JOB …) as environment variables; a
# setting that is unset or empty takes the default infra/main.parameters.json gives it
# (${BATON_X=default}), as azd does when it fills in the template's parameters, so the check
# sees what `azd provision` deploys. A bad value stops `azd provision` / `azd up` here with a
# message naming the setting.
#
# Works from any current folder. Environment (optional): GO (default: go).
set -eu

script_dir=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
src=$(dirname -- "$script_dir")
cd "$src"
# The template's defaults: one NAME=default line per "${BATON_…=default}" of the parameters file.
defaults=$(sed -n 's/^.*"\${\(BATON_[A-Z0-9_]*\)=\([^}]*\)}".*$/\1=\2/p' infra/main.parameters.json)
while IFS='=' read -r name value; do
	[ -n "$name" ] || continue
	eval "current=\${$name:-}"
	if [ -z "$current" ]; then
		export "$name=$value"
	fi
done <<EOF
$defaults
EOF
# Build for this machine even when the caller exported a cross-compilation target.
unset GOOS GOARCH
FUNCTIONS_APP_ROOT_PATH=$src
export FUNCTIONS_APP_ROOT_PATH
exec "${GO:-go}" run ./handler validate
