# azd preprovision hook (azure.yaml): the PowerShell twin of scripts/validate.sh; keep the two in
# step. Checks the azd environment's Baton settings before anything is provisioned, with the
# handler's own start-up checks (`baton validate`, built for this machine with go run). azd
# passes the environment's values as environment variables; unset ones take the template's
# defaults. Works from any current folder. Environment (optional): GO (default: go).
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest

$src = Split-Path -Parent $PSScriptRoot
$go = if ($env:GO) { $env:GO } else { 'go' }

# Build for this machine even when the caller exported a cross-compilation target.
Remove-Item Env:GOOS, Env:GOARCH -ErrorAction SilentlyContinue
$env:FUNCTIONS_APP_ROOT_PATH = $src
Push-Location -LiteralPath $src
try {
    & $go run ./handler validate
    $code = $LASTEXITCODE
} finally {
    Pop-Location
}
exit $code
