#!/usr/bin/env bash
# Build kube-apiserver and kubectl of one Kubernetes release from the Go module proxy.
#
#   helm/tools/build-kubernetes.sh v1.37.2 .tools/k8s/v1.37.2
#
# The k8s.io/kubernetes module points its k8s.io/* requirements at ./staging/src, which a
# module download does not carry. Its published staging modules (k8s.io/api v0.37.2 for
# Kubernetes v1.37.2, ...) are the same code, so the replace directives are rewritten to
# them; go.work and vendor/ are dropped so the build resolves through go.mod alone. The
# version ldflags are those of Kubernetes' own build (hack/lib/version.sh): without them
# the binaries report v0.0.0-master and kubectl refuses to talk to the server.
set -euo pipefail

version=${1:?usage: build-kubernetes.sh VERSION OUTDIR}
out=${2:?usage: build-kubernetes.sh VERSION OUTDIR}
go=${GO:-go}

case $version in
	v1.*.*) ;;
	*) echo "build-kubernetes.sh: VERSION must look like v1.37.2, not $version" >&2; exit 2 ;;
esac
minor=${version#v1.}
minor=${minor%%.*}
patch=${version##*.}
staging=v0.${minor}.${patch}

mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work=$(mktemp -d "$(dirname "$out")/build-${version}.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

echo "kubernetes ${version}: downloading k8s.io/kubernetes"
src=$("$go" mod download -json "k8s.io/kubernetes@${version}" \
	| sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "build-kubernetes.sh: no module directory for ${version}" >&2; exit 1; }
cp -R "$src/." "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
rm -rf go.work go.work.sum vendor

# ./staging/src/k8s.io/NAME -> k8s.io/NAME vX (the published module of the same release).
sed -i -E "s#^([[:space:]]*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+[[:space:]]*\$#\1\2 => \2 ${staging}#" go.mod
if grep -q '=> ./staging' go.mod; then
	echo "build-kubernetes.sh: replace directives left pointing at ./staging:" >&2
	grep '=> ./staging' go.mod >&2
	exit 1
fi

commit="" # a module download carries no commit
pkg=k8s.io/component-base/version
cpkg=k8s.io/client-go/pkg/version
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for p in $pkg $cpkg; do
	ldflags+=" -X $p.gitVersion=${version} -X $p.gitMajor=1 -X $p.gitMinor=${minor}"
	ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=${date} -X $p.gitCommit=${commit}"
done

echo "kubernetes ${version}: building kube-apiserver and kubectl (staging modules ${staging})"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"
"$go" build -trimpath -ldflags "$ldflags" -o "$work/bin/" ./cmd/kube-apiserver ./cmd/kubectl

"$work/bin/kubectl" version --client -o yaml | grep -q "gitVersion: ${version}"
rm -rf "$out"
mv "$work/bin" "$out"
echo "kubernetes ${version}: $(ls "$out" | tr '\n' ' ')in $out"
