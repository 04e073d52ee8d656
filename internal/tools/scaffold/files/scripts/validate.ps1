# azd preprovision hook (azure.yaml): the PowerShell twin of scripts/validate.sh; keep the two in
# step. Checks the azd environment's Baton settings before anything is provisioned, with the
# handler's own start-up checks (`baton validate`, built for this machine with go run). azd
# passes the environment's values as environment variables; a setting that is unset or empty
# takes the default infra/main.parameters.json gives it (${BATON_X=default}), as azd does.
# Works from any current folder. Environment (optional): GO (default: go).
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest

$src = Split-Path -Parent $PSScriptRoot
$go = if ($env:GO) { $env:GO } else { 'go' }

# The template's defaults, from the "${BATON_…=default}" values of the parameters file.
$parameters = Get-Content -Raw -LiteralPath (Join-Path $src 'infra/main.parameters.json') | ConvertFrom-Json
foreach ($p in $parameters.parameters.PSObject.Properties) {
    $value = $p.Value.value
    if ($value -is [string] -and $value -match '^\$\{(BATON_[A-Z0-9_]+)=([^}]*)\}$') {
        $name = $Matches[1]
        if (-not [Environment]::GetEnvironmentVariable($name)) {
            [Environment]::SetEnvironmentVariable($name, $Matches[2])
        }
    }
}
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
