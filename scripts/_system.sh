# Sourced by scripts/test: the Debian packages whose programs the tests start for real
# (Prometheus and promtool, redis-server, Chromium and its driver for the console).
# Installs only what is missing, as root or through sudo; apt-get update runs only when
# something is to be installed.
set -euo pipefail
_missing=()
for _pair in prometheus:prometheus prometheus:promtool redis-server:redis-server \
    chromium:chromium chromium-driver:chromedriver; do
    _package="${_pair%%:*}"
    _program="${_pair##*:}"
    if ! command -v "$_program" >/dev/null 2>&1 && [[ ! " ${_missing[*]-} " == *" $_package "* ]]; then
        _missing+=("$_package")
    fi
done
if [ "${#_missing[@]}" -gt 0 ]; then
    _sudo=""
    if [ "$(id -u)" != 0 ]; then
        _sudo="sudo"
    fi
    echo "== apt-get install ${_missing[*]}"
    $_sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $_sudo apt-get install -y -qq --no-install-recommends \
        "${_missing[@]}" >/dev/null
fi
