# shellcheck shell=bash
# Sourced by scripts/test and scripts/demo: make sure the repo's .venv exists with the project
# installed (editable) and that Java >= 17 is available (ZooKeeper and Spark run on it).
#
#   source scripts/_env.sh && ksidecar_env "test,spark"
#
# Environment: PYTHON picks the interpreter for a new venv (default: python3, >= 3.11);
# KSIDECAR_REINSTALL=1 forces the pip install even when pyproject.toml has not changed.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO_ROOT/.venv"

say() { printf '%s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
is_root_with_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# A Python >= 3.11 interpreter on PATH (or $PYTHON), printed as a path.
find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

ensure_venv() {
    if [ -x "$VENV/bin/python" ] \
        && "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
        return 0
    fi
    local python
    python="$(find_python)" || die "need Python >= 3.11 (install python3, or set PYTHON=/path/to/python3.X)"
    if [ -e "$VENV" ]; then
        say "== $VENV is unusable (missing or too old a Python): recreating it"
        rm -rf "$VENV"
    fi
    say "== creating .venv with $python ($("$python" -V 2>&1))"
    if ! "$python" -m venv "$VENV"; then
        # Debian splits venv/ensurepip out of python3 into python3-venv.
        is_root_with_apt || die "'$python -m venv' failed: install python3-venv"
        rm -rf "$VENV"
        apt_install python3-venv || die "could not install python3-venv"
        "$python" -m venv "$VENV" || die "'$python -m venv' failed"
    fi
}

# pip install -e ".[extras]", skipped when pyproject.toml, the interpreter and the extras are the
# same as at the last successful install and the project still imports.
ensure_installed() {
    local extras="$1"
    local stamp="$VENV/.ksidecar-install-${extras//,/-}"
    local want
    want="$({ cat "$REPO_ROOT/pyproject.toml"; "$VENV/bin/python" -VV; echo "$REPO_ROOT"; } \
        | sha256sum | cut -d' ' -f1)"
    if [ "${KSIDECAR_REINSTALL:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && (cd / && "$VENV/bin/python" -c 'import proxy, protocol') >/dev/null 2>&1; then
        return 0
    fi
    local pip_log="$VENV/.ksidecar-pip.log"
    say "== pip install -e '.[$extras]' (output in .venv/.ksidecar-pip.log; a first run downloads ~500 MB)"
    rm -f "$stamp"
    if ! (cd "$REPO_ROOT" && "$VENV/bin/python" -m pip install --disable-pip-version-check \
        -e ".[$extras]") >"$pip_log" 2>&1; then
        tail -n 40 "$pip_log" >&2
        die "pip install -e '.[$extras]' failed (full output: $pip_log)"
    fi
    printf '%s\n' "$want" >"$stamp"
}

# The java the rig will run: $JAVA_HOME/bin/java if set, else java on PATH (as proxy/rig does).
java_bin() {
    if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
        printf '%s\n' "$JAVA_HOME/bin/java"
    else
        command -v java 2>/dev/null
    fi
}

java_major() {
    "$1" -version 2>&1 | awk -F'"' '/version/ { split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit }'
}

ensure_java() {
    local java major
    if java="$(java_bin)" && major="$(java_major "$java")" && [ "${major:-0}" -ge 17 ] 2>/dev/null; then
        return 0
    fi
    is_root_with_apt || die "Java >= 17 is needed (ZooKeeper and Spark run on it) and none was found \
(java: ${java:-none}, version: ${major:-?}). Install openjdk-17-jre-headless or point JAVA_HOME at a JDK 17+."
    say "== installing Java 17 (openjdk-17-jre-headless)"
    apt_install openjdk-17-jre-headless || apt_install default-jre-headless \
        || die "could not install a Java runtime with apt-get"
    hash -r
    java="$(java_bin)" && major="$(java_major "$java")" && [ "${major:-0}" -ge 17 ] \
        || die "installed Java but '$java' reports version '${major:-?}' (need >= 17; check JAVA_HOME)"
}

# prometheus and promtool from Debian's prometheus package (tests/deploy start their own server
# on loopback and check deploy/prometheus). Only the binaries are used: if the machine has no
# /usr/sbin/policy-rc.d, one that forbids starting services is in place during the install, so
# the package's own service is not started.
ensure_prometheus() {
    if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
        return 0
    fi
    is_root_with_apt || die "prometheus and promtool are needed (tests/deploy) and were not found. \
Install Debian's prometheus package (apt-get install --no-install-recommends prometheus)."
    say "== installing prometheus and promtool (Debian's prometheus package)"
    local policy=/usr/sbin/policy-rc.d placed=0 code=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && placed=1
    fi
    apt_install prometheus || code=$?
    [ "$placed" = 0 ] || rm -f "$policy"
    [ "$code" = 0 ] || die "could not install prometheus with apt-get"
    hash -r
    command -v promtool >/dev/null 2>&1 || die "installed prometheus but promtool is not on PATH"
}

# Debian's kcat (librdkafka 2.0.2 on bookworm): an old client still in every distribution, whose
# SCRAM client-final message doubles the client nonce (tests/auth/test_kcat.py logs in with it).
ensure_kcat() {
    if command -v kcat >/dev/null 2>&1; then
        return 0
    fi
    is_root_with_apt || die "kcat is needed (tests/auth/test_kcat.py) and was not found. \
Install Debian's kcat package (apt-get install --no-install-recommends kcat)."
    say "== installing kcat (Debian's kcat package)"
    apt_install kcat || die "could not install kcat with apt-get"
    hash -r
    command -v kcat >/dev/null 2>&1 || die "installed kcat but it is not on PATH"
}

# Chromium from Debian's chromium package, headless, for the report's browser test
# (tests/spark_jobs/test_report_browser.py loads the audit report and takes screenshots).
# The test starts it itself, with its own fresh profile and no network use of its own.
ensure_chromium() {
    if command -v chromium >/dev/null 2>&1; then
        return 0
    fi
    is_root_with_apt || die "chromium is needed (the report's browser test) and was not found. \
Install Debian's chromium package (apt-get install --no-install-recommends chromium)."
    say "== installing chromium (Debian's chromium package, for the report's browser test)"
    apt_install chromium || die "could not install chromium with apt-get"
    hash -r
    command -v chromium >/dev/null 2>&1 || die "installed chromium but it is not on PATH"
}

# The whole set-up: Java, venv, project with the given extras; then the venv comes first on PATH.
ksidecar_env() {
    ensure_java # first: fail before a long pip install if Java cannot be had
    ensure_venv
    ensure_installed "$1"
    export VIRTUAL_ENV="$VENV"
    export PATH="$VENV/bin:$PATH"
}
