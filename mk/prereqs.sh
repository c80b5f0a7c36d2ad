#!/bin/sh
# What `make test` needs from the machine, checked before anything is installed: one line
# per missing tool, naming what to install, then exit 1. Tools that `make test` installs
# itself with apt-get when it runs as root on Debian or Ubuntu (a JDK and Maven, etcd,
# PostgreSQL's server binaries) are reported as such, not as missing.
#
#   sh mk/prereqs.sh [test|demo]     # PYTHON=python3.12 sh mk/prereqs.sh
#
# Everything else (the venv, buf, helm, kube-apiserver, kubectl, helm-docs, hadolint, the
# clients' dependencies) comes from the package registries into .venv/ and .tools/.
set -u
what=${1:-test}
python=${PYTHON:-python3}
missing=0
apt=
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	apt=yes
fi

lack() {
	echo "make $what: $1" >&2
	missing=$((missing + 1))
}

# $1: a command; the rest: what to do without it.
need() {
	command -v "$1" >/dev/null 2>&1 || { shift; lack "$*"; }
}

# $1: what it is, $2: the Debian packages `make test` installs as root.
installed_by_make() {
	if [ -n "$apt" ]; then
		echo "make $what: $1 is missing; make installs Debian's $2 (apt-get, as root)"
	else
		lack "$1 is missing: install it (apt-get install $2), or run make as root on Debian or Ubuntu, which installs it"
	fi
}

if ! command -v "$python" >/dev/null 2>&1; then
	lack "$python is missing: install Python 3.11 or newer (apt-get install python3 python3-venv)"
elif ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
	lack "$python is Python $("$python" -c 'import platform; print(platform.python_version())'): install Python 3.11 or newer, or name one with PYTHON=python3.12"
elif ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
	lack "$python cannot make a venv: install its venv module (apt-get install python3-venv)"
fi

if [ "$what" = test ]; then
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		lack "node and npm are missing: install Node.js 20 or newer with npm (buf, the TypeScript client; https://nodejs.org or apt-get install nodejs npm)"
	elif [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 20 ]; then
		lack "node is $(node --version): install Node.js 20 or newer"
	fi

	if ! command -v "${GO:-go}" >/dev/null 2>&1; then
		lack "go is missing: install Go 1.21 or newer (https://go.dev/dl/; it fetches the 1.26 toolchain the Go code asks for) for the Go client, helm and the Kubernetes API server"
	else
		minor=$("${GO:-go}" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
		if [ -z "$minor" ] || [ "$minor" -lt 21 ]; then
			lack "go is $("${GO:-go}" version 2>/dev/null | cut -d' ' -f3): install Go 1.21 or newer (https://go.dev/dl/)"
		fi
	fi

	if command -v javac >/dev/null 2>&1; then
		major=$(javac -version 2>&1 | sed -n 's/^javac \([0-9]*\).*/\1/p')
		if [ -z "$major" ] || [ "$major" -lt 17 ]; then
			lack "javac is $(javac -version 2>&1): install a JDK 17 or newer (apt-get install openjdk-17-jdk-headless)"
		fi
		need "${MVN:-mvn}" "mvn is missing: install Maven (apt-get install maven)"
	else
		installed_by_make "a JDK 17 or newer (javac) and Maven" "openjdk-17-jdk-headless and maven"
	fi

	command -v etcd >/dev/null 2>&1 || installed_by_make "etcd (the Kubernetes API server's store in the chart's tests)" "etcd-server"

	# PG_ROOT: where Debian's postgresql package puts the server binaries.
	if ! command -v initdb >/dev/null 2>&1 && ! ls "${PG_ROOT:-/usr/lib/postgresql}"/*/bin/initdb >/dev/null 2>&1; then
		installed_by_make "PostgreSQL's server binaries (initdb, pg_ctl; the shared session store's tests)" "postgresql"
	fi
fi

if [ "$missing" -gt 0 ]; then
	echo "make $what: $missing prerequisite(s) missing; README.md (Quickstart) lists what make $what needs" >&2
	exit 1
fi
