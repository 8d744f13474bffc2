#!/usr/bin/env bash
# Build the real Helm CLI from the Go module proxy, once, into the stream-dedupe cache.
#
#   tools/helm/install.sh          build if missing, print the helm binary's path on stdout
#
# Helm is not packaged for Debian or PyPI, so `go install helm.sh/helm/v3/cmd/helm@VERSION`
# builds it (a few minutes from scratch on 2 cores; instant once cached). The binary lands in
#   ${STREAM_DEDUPE_CACHE:-~/.cache/stream-dedupe}/helm/<version>/helm
# Override the version with HELM_VERSION (must be a helm.sh/helm/v3 release tag).
# tests/test_helm.py finds helm at the same path; `make tools` runs this script.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${STREAM_DEDUPE_CACHE:-$HOME/.cache/stream-dedupe}"
DEST_DIR="$CACHE_ROOT/helm/$HELM_VERSION"
HELM_BIN="$DEST_DIR/helm"

log() { echo "helm/install.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -x "$HELM_BIN" ]]; then
  echo "$HELM_BIN"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go not found: install Go >= 1.24 (Debian: apt-get install golang) and rerun"
mkdir -p "$DEST_DIR"
exec 9>"$DEST_DIR/.install.lock"
flock -w 1200 9 || die "timed out waiting for another build (lock $DEST_DIR/.install.lock)"
if [[ -x "$HELM_BIN" ]]; then  # another process built it while we waited
  echo "$HELM_BIN"
  exit 0
fi

# Same version stamps as Helm's own Makefile, so `helm version` and the default Kubernetes
# version that `helm lint`/`helm template` assume are the release's (derived from the
# k8s.io/client-go it is built with, v0.N -> 1.N), not the 1.20 fallback of a plain `go install`.
GOMOD="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[[ -f "$GOMOD" ]] || die "could not download helm.sh/helm/v3@$HELM_VERSION (is the Go module proxy reachable?)"
K8S_MINOR="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$GOMOD")"
[[ -n "$K8S_MINOR" ]] || die "no k8s.io/client-go version in $GOMOD"
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in pkg/lint/rules pkg/chartutil; do
  LDFLAGS="$LDFLAGS -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$K8S_MINOR"
done

TMP_BIN="$(mktemp -d "$DEST_DIR/.build.XXXXXX")"
trap 'rm -rf "$TMP_BIN"' EXIT
log "building helm $HELM_VERSION with $(go version | awk '{print $3}') (a few minutes, once)"
start=$SECONDS
GOBIN="$TMP_BIN" CGO_ENABLED=0 go install -trimpath -ldflags "$LDFLAGS" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
  || die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed (see above; check that the Go module proxy is reachable)"
"$TMP_BIN/helm" version --short >/dev/null || die "the built helm does not run"
mv -f "$TMP_BIN/helm" "$HELM_BIN"
log "built $HELM_BIN in $((SECONDS - start)) s"
echo "$HELM_BIN"
