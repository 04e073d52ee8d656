# Builds the package azd deploys (azure.yaml: language custom, dist ./dist, prepackage hook).
# The PowerShell twin of scripts/package.sh; keep the two in step.
#
# The package is what the Functions host expects at the app root:
#   baton            the custom handler, linux/amd64, static (CGO off)
#   host.json
#   <Function>/      every top-level folder holding a function.json, copied whole
# local.settings.json is never copied (it may hold secrets and is local-only).
#
# Environment (all optional): SOURCE_DIR (app root, default the repo root), DIST_DIR (output,
# emptied first, default $SOURCE_DIR/dist), GO_PACKAGE (default ./handler), GO (default go).
#
# Execute bit: Windows file systems have none, so a zip made on Windows marks baton as a plain
# file and the Linux host may be unable to start it. On Linux Consumption the host sets the
# bit on customHandler.description.defaultExecutablePath itself; that this also happens on Flex
# Consumption is not confirmed. When the file system supports it (pwsh on Linux or macOS) this
# script sets the bit; on Windows prefer running scripts/package.sh from WSL before azd deploy.
$ErrorActionPreference = 'Stop'
Set-StrictMode -Version Latest

function Fail([string]$message) {
    [Console]::Error.WriteLine("package.ps1: $message")
    exit 1
}

$src = if ($env:SOURCE_DIR) { $env:SOURCE_DIR } else { Split-Path -Parent $PSScriptRoot }
$src = (Resolve-Path -LiteralPath $src).Path.TrimEnd([IO.Path]::DirectorySeparatorChar, [IO.Path]::AltDirectorySeparatorChar)
$dist = if ($env:DIST_DIR) { $env:DIST_DIR } else { Join-Path $src 'dist' }
$pkg = if ($env:GO_PACKAGE) { $env:GO_PACKAGE } else { './handler' }
$go = if ($env:GO) { $env:GO } else { 'go' }

if (-not (Test-Path -LiteralPath (Join-Path $src 'host.json') -PathType Leaf)) {
    Fail "no host.json in ${src}: set SOURCE_DIR to the app root"
}

# The deployed binary carries the standard library of the Go that builds it, with that Go's
# known vulnerabilities: refuse one older than go.mod's toolchain line (else its go line). Run
# in $src, `go env GOVERSION` reports the Go that would build, which is the newer toolchain when
# GOTOOLCHAIN lets go fetch it (auto, the default where GOTOOLCHAIN is unset).
$gomod = Get-Content -LiteralPath (Join-Path $src 'go.mod')
$wantGo = $gomod | ForEach-Object { if ($_ -match '^toolchain\s+(go[0-9]\S*)') { $Matches[1] } } | Select-Object -First 1
if (-not $wantGo) { $wantGo = $gomod | ForEach-Object { if ($_ -match '^go\s+([0-9]\S*)') { 'go' + $Matches[1] } } | Select-Object -First 1 }
Push-Location -LiteralPath $src
try { $haveGo = (& $go env GOVERSION) } finally { Pop-Location }
if ($LASTEXITCODE -ne 0 -or -not $haveGo) { Fail "$go env GOVERSION failed in $src" }
function GoVersion([string]$v) {
    $n = @(($v -replace '^go', '') -split '[^0-9]+' | Where-Object { $_ -ne '' } | ForEach-Object { [int]$_ })
    while ($n.Count -lt 3) { $n += 0 }
    return [version]::new($n[0], $n[1], $n[2])
}
if ($wantGo -and (GoVersion $haveGo) -lt (GoVersion $wantGo)) {
    Fail "$haveGo is older than $wantGo, which go.mod asks for (its toolchain line): the package would ship that older standard library. Install $wantGo, or let go fetch it (GOTOOLCHAIN=auto or GOTOOLCHAIN=$wantGo)"
}

# dist is deleted and rebuilt: resolve it first and refuse paths where that would destroy
# something else (a drive root, the home folder, the sources or a folder holding them).
New-Item -ItemType Directory -Force -Path $dist | Out-Null
$dist = (Resolve-Path -LiteralPath $dist).Path.TrimEnd([IO.Path]::DirectorySeparatorChar, [IO.Path]::AltDirectorySeparatorChar)
$sep = [IO.Path]::DirectorySeparatorChar
if (-not $dist -or $dist -eq [IO.Path]::GetPathRoot($dist).TrimEnd($sep) -or $dist -eq $HOME -or
    ($src + $sep).StartsWith($dist + $sep, [StringComparison]::OrdinalIgnoreCase)) {
    Fail "refusing to empty DIST_DIR=$dist"
}
Remove-Item -LiteralPath $dist -Recurse -Force
New-Item -ItemType Directory -Force -Path $dist | Out-Null

# The Flex Consumption workers are linux/amd64. CGO off gives a static binary that needs no
# libc from the image; -trimpath and -s -w keep it small and free of local paths.
$saved = @{ GOOS = $env:GOOS; GOARCH = $env:GOARCH; CGO_ENABLED = $env:CGO_ENABLED }
$env:GOOS = 'linux'; $env:GOARCH = 'amd64'; $env:CGO_ENABLED = '0'
Push-Location -LiteralPath $src
try {
    & $go build -trimpath '-ldflags=-s -w' -o (Join-Path $dist 'baton') $pkg
    if ($LASTEXITCODE -ne 0) { Fail "go build $pkg failed" }
} finally {
    Pop-Location
    $env:GOOS = $saved.GOOS; $env:GOARCH = $saved.GOARCH; $env:CGO_ENABLED = $saved.CGO_ENABLED
}

$binary = Join-Path $dist 'baton'
if ([Environment]::OSVersion.Platform -eq [PlatformID]::Unix) {
    # azd zips files with the modes they have on disk: the host can only start an executable file.
    chmod 755 $binary
    if ($LASTEXITCODE -ne 0) { Fail "chmod $binary failed" }
} else {
    Write-Warning 'package.ps1: this file system has no execute bit; if the deployed app cannot start baton, package from WSL with scripts/package.sh'
}

Copy-Item -LiteralPath (Join-Path $src 'host.json') -Destination (Join-Path $dist 'host.json')

$count = 0
foreach ($dir in Get-ChildItem -LiteralPath $src -Directory) {
    if (-not (Test-Path -LiteralPath (Join-Path $dir.FullName 'function.json') -PathType Leaf)) { continue }
    if ($dir.FullName -eq $dist) { continue }
    Copy-Item -LiteralPath $dir.FullName -Destination (Join-Path $dist $dir.Name) -Recurse
    $count++
}
if ($count -eq 0) { Fail "no function folders (top-level folders with a function.json) in $src" }

# A function folder should never hold one, but make sure no local settings file is shipped.
Get-ChildItem -LiteralPath $dist -Recurse -Filter 'local.settings.json' | Remove-Item -Force

Write-Host "package.ps1: built $dist with baton, host.json and $count function folders"
