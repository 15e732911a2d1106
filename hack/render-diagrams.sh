#!/usr/bin/env bash
# Renders the Graphviz sources docs/diagrams/*.dot to SVG next to them (make
# diagrams), or into the directory given as $1 (internal/packaging's
# staleness test renders into a temporary directory and compares). Graphviz
# comes from Debian's graphviz package (hack/install-deps.sh); its output is
# deterministic for one Graphviz version and font set, and the sources name
# DejaVu Sans, which Debian's fontconfig always has (fonts-dejavu-core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/docs/diagrams}
if ! command -v dot >/dev/null; then
  echo "render-diagrams: dot not found: install Debian's graphviz (make deps, hack/install-deps.sh)" >&2
  exit 1
fi
mkdir -p "$out"
for src in "$root"/docs/diagrams/*.dot; do
  name=$(basename "$src" .dot)
  dot -Tsvg "$src" -o "$out/$name.svg"
done
