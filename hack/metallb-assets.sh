#!/usr/bin/env bash
# Builds MetalLB's controller and speaker from their Go module
# and copies its native-mode manifests (metallb-native.yaml) next to them,
# (go.universe.tf/metallb, pinned in hack/tools/metallb) into bin/metallb for
# the migration test (e2e TestMigration) and make bench-migration. No
# prebuilt binary or image is downloaded. Rebuilt when missing or when
# hack/tools/metallb changed since the last build (stamp file).
#
# frr-k8s: MetalLB v0.16.2 requires github.com/metallb/frr-k8s v0.0.27, which
# the Go module proxy does not serve; go.mod replaces it with v0.0.21 (the
# newest it serves) and this script builds against a copy of v0.0.21's API package (bin/metallb/src)
# with the type and the Advertise field v0.0.21's API package lacks. Only MetalLB's frr-k8s
# backend uses them; the lab runs the native BGP mode.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/metallb"
tools="$root/hack/tools/metallb"
stamp="$out/.stamp"
want=$(cat "$tools"/go.mod "$tools"/go.sum "$tools"/*.txt "$0" | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$out/controller" && -x "$out/speaker" && -f "$out/metallb-native.yaml" ]]; then
  exit 0
fi
mkdir -p "$out"
rm -f "$stamp"
cd "$tools"
mver=$(go list -m -f '{{.Version}}' go.universe.tf/metallb)
echo "metallb-assets: building MetalLB $mver controller and speaker from Go modules (cold: ~5 min on 2 cores)" >&2
go mod download github.com/metallb/frr-k8s
frr=$(go list -m -f '{{.Dir}}' github.com/metallb/frr-k8s)
src="$out/src/frr-k8s"
rm -rf "$out/src" && mkdir -p "$src/api"
cp "$frr/go.mod" "$src/"
cp -r "$frr/api/v1beta1" "$src/api/"
chmod -R u+w "$src"
types="$src/api/v1beta1/frrconfiguration_types.go"
# The field goes after PrefixesWithCommunity in Advertise, as in v0.0.27.
awk '{print} /^\tPrefixesWithCommunity \[\]CommunityPrefixes/ {
  print "\n\t// PrefixesWithAsPathPrepend (added by Herald'"'"'s hack/metallb-assets.sh).";
  print "\t// +optional";
  print "\tPrefixesWithAsPathPrepend []AsPathPrependPrefixes `json:\"withAsPathPrepend,omitempty\"`"}' \
  "$frr/api/v1beta1/frrconfiguration_types.go" > "$types"
grep -q PrefixesWithAsPathPrepend "$types" || {
  echo "metallb-assets: Advertise.PrefixesWithCommunity not found in $frr" >&2; exit 1; }
cp "$tools/frrk8s_aspathprepend.go.txt" "$src/api/v1beta1/zz_herald_aspathprepend.go"
# Build with a copy of go.mod that points frr-k8s at the patched copy.
cp go.mod "$out/build.mod" && cp go.sum "$out/build.sum"
go mod edit -modfile="$out/build.mod" -replace "github.com/metallb/frr-k8s=$src"
ldflags="-s -w"
go build -trimpath -modfile="$out/build.mod" -ldflags "$ldflags" -o "$out/controller" go.universe.tf/metallb/controller
go build -trimpath -modfile="$out/build.mod" -ldflags "$ldflags" -o "$out/speaker" go.universe.tf/metallb/speaker
# MetalLB's own manifests of the same version (CRDs, RBAC, webhook,
# Deployment "controller", DaemonSet "speaker"): the lab installs MetalLB
# from them as a user would, and runs its processes from their templates.
mdir=$(go list -m -f '{{.Dir}}' go.universe.tf/metallb)
cp "$mdir/config/manifests/metallb-native.yaml" "$out/metallb-native.yaml"
chmod u+w "$out/metallb-native.yaml"
echo "$want" > "$stamp"
