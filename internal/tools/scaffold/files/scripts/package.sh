#!/bin/sh
# Builds the package azd deploys (azure.yaml: language custom, dist ./dist, prepackage hook).
#
# The package is what the Functions host expects at the app root:
#   baton            the custom handler, linux/amd64, static (CGO off), executable
#   host.json
#   <Function>/      every top-level folder holding a function.json, copied whole
# local.settings.json is never copied (it may hold secrets and is local-only).
#
# Environment (all optional; the defaults are what azd needs):
#   SOURCE_DIR   app root holding go.mod, host.json and the function folders (default: the repo root)
#   DIST_DIR     output folder, emptied first (default: $SOURCE_DIR/dist)
#   GO_PACKAGE   Go package of the handler, relative to SOURCE_DIR (default: ./handler)
#   GO           go command (default: go)
set -eu

script_dir=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
src=${SOURCE_DIR:-$(dirname -- "$script_dir")}
src=$(CDPATH='' cd -- "$src" && pwd)
dist=${DIST_DIR:-$src/dist}
pkg=${GO_PACKAGE:-./handler}
go_cmd=${GO:-go}

fail() {
	echo "package.sh: $*" >&2
	exit 1
}

[ -f "$src/host.json" ] || fail "no host.json in $src: set SOURCE_DIR to the app root"

# The deployed binary carries the standard library of the Go that builds it, with that Go's
# known vulnerabilities: refuse one older than go.mod's toolchain line (else its go line). Run
# in $src, `go env GOVERSION` reports the Go that would build, which is the newer toolchain when
# GOTOOLCHAIN lets go fetch it (auto, the default where GOTOOLCHAIN is unset).
want_go=$(sed -n 's/^toolchain[[:space:]]*\(go[0-9][^[:space:]]*\).*/\1/p' "$src/go.mod" | head -n 1)
[ -n "$want_go" ] || want_go=$(sed -n 's/^go[[:space:]]*\([0-9][^[:space:]]*\).*/go\1/p' "$src/go.mod" | head -n 1)
have_go=$(cd "$src" && "$go_cmd" env GOVERSION) || fail "$go_cmd env GOVERSION failed in $src"
if [ -n "$want_go" ] && ! printf '%s\n%s\n' "$want_go" "$have_go" | awk '
	function parse(v, a,   n, i) { sub(/^go/, "", v); n = split(v, a, /[^0-9]+/); for (i = n + 1; i <= 3; i++) a[i] = 0 }
	NR == 1 { parse($0, w) } NR == 2 { parse($0, h) }
	END { for (i = 1; i <= 3; i++) { if (h[i] + 0 > w[i] + 0) exit 0; if (h[i] + 0 < w[i] + 0) exit 1 } exit 0 }'; then
	fail "$have_go is older than $want_go, which go.mod asks for (its toolchain line): the package would ship that older standard library. Install $want_go, or let go fetch it (GOTOOLCHAIN=auto or GOTOOLCHAIN=$want_go)"
fi

# dist is deleted and rebuilt: resolve it first and refuse paths where that would destroy
# something else (the root, the home folder, the sources or a folder holding them).
mkdir -p -- "$dist"
dist=$(CDPATH='' cd -- "$dist" && pwd)
case "$dist" in
/ | "${HOME:-/}") fail "refusing to empty DIST_DIR=$dist" ;;
esac
case "$src/" in
"$dist"/*) fail "refusing to empty DIST_DIR=$dist: it holds the sources in $src" ;;
esac
rm -rf -- "$dist"
mkdir -p -- "$dist"

# The Flex Consumption workers are linux/amd64. CGO off gives a static binary that needs no
# libc from the image; -trimpath and -s -w keep it small and free of local paths.
(
	cd "$src"
	GOOS=linux GOARCH=amd64 CGO_ENABLED=0 "$go_cmd" build -trimpath -ldflags='-s -w' -o "$dist/baton" "$pkg"
) || fail "go build $pkg failed"
# azd zips files with the modes they have on disk: the host can only start an executable file.
chmod 755 "$dist/baton"

cp "$src/host.json" "$dist/host.json"

count=0
for dir in "$src"/*/; do
	dir=${dir%/}
	[ -f "$dir/function.json" ] || continue
	name=$(basename -- "$dir")
	[ "$dir" = "$dist" ] && continue
	cp -R -- "$dir" "$dist/$name"
	count=$((count + 1))
done
[ "$count" -gt 0 ] || fail "no function folders (top-level folders with a function.json) in $src"

# A function folder should never hold one, but make sure no local settings file is shipped.
find "$dist" -name local.settings.json -exec rm -f -- {} +

echo "package.sh: built $dist with baton, host.json and $count function folders"
