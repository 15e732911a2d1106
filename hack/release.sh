#!/usr/bin/env bash
# Builds a Herald release into a directory (make release VERSION=vX.Y.Z):
#
#   herald.yaml, herald-prometheus.yaml, herald-metallb-system.yaml
#       the install manifests (as make manifests renders them from
#       manifests/), with both images pinned to VERSION
#   herald-metallb-migration.yaml, herald-metallb-migration-values.yaml,
#   adopt-metallb-crds.sh
#       for the node-by-node migration from MetalLB
#       (docs/migrating-from-metallb.md): manifests/metallb-migration
#       rendered (images pinned), its Helm values
#       (manifests/metallb-migration/helm-values.yaml) and
#       hack/adopt-metallb-crds.sh
#   herald-X.Y.Z.tgz
#       the Helm chart charts/herald, packaged with version X.Y.Z and
#       appVersion vX.Y.Z (so its default image tags are VERSION)
#   herald-{controller,speaker}-linux-{amd64,arm64}
#       static binaries (CGO_ENABLED=0, -trimpath), stamped with VERSION and
#       the commit (--version, herald_build_info)
#   kubectl-herald-linux-{amd64,arm64}
#       the kubectl plugin (kubectl herald), static and stamped the same way
#   *.cdx.json next to each binary
#       each binary's SBOM, CycloneDX JSON, from the module list the Go
#       linker embedded in it (cyclonedx-gomod bin)
#   LICENSE, NOTICE, CHANGELOG.md
#   third-party-licenses.tar.gz
#       the licence and NOTICE files of every Go module linked into the
#       binaries, and the source of the MPL-2.0 ones (go-licenses save)
#   SHA256SUMS
#       sha256sum's format over every other file: `sha256sum -c SHA256SUMS`
#
# Usage: hack/release.sh VERSION [OUTDIR]   (OUTDIR defaults to dist/VERSION)
# VERSION is a semantic version with a leading v (v0.1.0, v0.2.0-rc.1).
# An existing OUTDIR is replaced only when it holds a previous release
# (a SHA256SUMS file). Tools: KUBECTL (1.27+), HELM, GO_LICENSES and
# CYCLONEDX_GOMOD, by default from bin/ (make tools test-assets). COMMIT
# overrides the commit (default: git rev-parse HEAD, "-dirty" when the work
# tree has uncommitted changes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version="${1:-}"
if [[ ! "$version" =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION must be a semantic version with a leading v (v0.1.0, v0.2.0-rc.1), got '${version}'" >&2
  exit 2
fi
out="${2:-$root/dist/$version}"
kubectl="${KUBECTL:-$root/bin/k8s/kubectl}"
helm="${HELM:-$root/bin/helm}"
golicenses="${GO_LICENSES:-$root/bin/go-licenses}"
cyclonedx="${CYCLONEDX_GOMOD:-$root/bin/cyclonedx-gomod}"
for tool in "$kubectl" "$helm" "$golicenses" "$cyclonedx"; do
  if [[ ! -x "$tool" ]]; then
    echo "release: $tool is missing (make tools test-assets builds it)" >&2
    exit 2
  fi
done
if [[ -z "${COMMIT:-}" ]]; then
  COMMIT=$(git -C "$root" rev-parse HEAD)
  if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]]; then
    echo "release: the work tree has uncommitted changes: the commit is stamped ${COMMIT}-dirty" >&2
    COMMIT+=-dirty
  fi
fi

if [[ -e "$out" ]]; then
  if [[ ! -f "$out/SHA256SUMS" ]]; then
    echo "release: $out exists and is not a release directory (no SHA256SUMS); remove it or name another" >&2
    exit 2
  fi
  rm -rf "$out"
fi
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Manifests: manifests/ with the base's image tags set to VERSION, rendered
# as hack/render-manifests.sh renders them.
cp -r "$root/manifests" "$stage/manifests"
sed -i -E "s/^(  newTag: ).*/\1$version/" "$stage/manifests/base/kustomization.yaml"
for pair in base:herald prometheus:herald-prometheus metallb-system:herald-metallb-system metallb-migration:herald-metallb-migration; do
  {
    echo "# Herald $version install manifests (hack/release.sh, from manifests/${pair%%:*})."
    "$kubectl" kustomize "$stage/manifests/${pair%%:*}"
  } > "$out/${pair#*:}.yaml"
done

# The chart, with its version and appVersion set to the release's.
"$helm" package "$root/charts/herald" --version "${version#v}" --app-version "$version" --destination "$out" >/dev/null

# The licences of the modules linked into the binaries (go-licenses save:
# licence and NOTICE files, and the source of reciprocal licences, MPL-2.0),
# in the background while the binaries build.
(cd "$root" && GOOS=linux GOARCH=amd64 "$golicenses" save ./controller ./speaker ./kubectl-herald \
  --ignore github.com/herald-lb/herald --save_path "$stage/third-party-licenses" >"$stage/go-licenses.log" 2>&1) &
licenses=$!
trap 'kill "$licenses" 2>/dev/null || true; wait || true; rm -rf "$stage"' EXIT

# Static binaries and their SBOMs.
ldflags="-s -w -X github.com/herald-lb/herald/internal/version.Version=$version -X github.com/herald-lb/herald/internal/version.Commit=$COMMIT"
for arch in amd64 arm64; do
  (cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -ldflags "$ldflags" -o "$stage/$arch/" ./controller ./speaker ./kubectl-herald)
  for bin in controller speaker kubectl-herald; do
    # The plugin keeps its own name: kubectl finds it as kubectl-herald on PATH.
    f="$out/herald-$bin-linux-$arch"
    if [[ "$bin" == kubectl-herald ]]; then f="$out/$bin-linux-$arch"; fi
    mv "$stage/$arch/$bin" "$f"
    # cyclonedx-gomod names the platform from GOOS/GOARCH, not the binary.
    if ! GOOS=linux GOARCH="$arch" "$cyclonedx" bin -json -std -version "$version" -output "$f.cdx.json" "$f" 2>"$stage/cyclonedx.log"; then
      cat "$stage/cyclonedx.log" >&2
      echo "release: cyclonedx-gomod failed for $f" >&2
      exit 1
    fi
  done
done

if ! wait "$licenses"; then
  cat "$stage/go-licenses.log" >&2
  echo "release: go-licenses failed" >&2
  exit 1
fi
cp "$root/LICENSE" "$root/NOTICE" "$root/CHANGELOG.md" "$root/hack/adopt-metallb-crds.sh" "$out/"
cp "$root/manifests/metallb-migration/helm-values.yaml" "$out/herald-metallb-migration-values.yaml"
tar -C "$stage" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - third-party-licenses |
  gzip -n > "$out/third-party-licenses.tar.gz"

(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
echo "release: Herald $version (commit $COMMIT) in $out"
