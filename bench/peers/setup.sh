#!/usr/bin/env bash
# Installs the peers of bench/side_by_side.py, idempotently (a no-op when all is there):
#   node_modules/   sqs-consumer and @aws-sdk/client-sqs, exactly as package-lock.json says
#   .venv/          aws-sqs-consumer, dramatiq-sqs, aiosqs, Celery (kombu[sqs]) and boto3
#                   (requirements.txt), kept apart
#                   from the project's .venv
# PYTHON names the interpreter the venv is made from (default: python3). bench/side_by_side.py
# runs this when something is missing; each half fails on its own, with a line saying why.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
python="${PYTHON:-python3}"
status=0

node_ready() {
    [ -f node_modules/sqs-consumer/package.json ] && [ -f node_modules/.package-lock.json ] &&
        [ ! package-lock.json -nt node_modules/.package-lock.json ]
}

if node_ready; then
    :
elif ! command -v npm >/dev/null; then
    echo "setup.sh: npm not found: the Node peers cannot be installed" >&2
    status=1
elif ! npm ci --no-audit --no-fund --loglevel=error >&2; then
    echo "setup.sh: npm ci failed" >&2
    status=1
fi

stamp=.venv/.installed
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ ! requirements.txt -nt "$stamp" ]; then
    :
elif ! "$python" -m venv .venv >&2; then
    echo "setup.sh: cannot make bench/peers/.venv with $python" >&2
    status=1
elif ! .venv/bin/python -m pip install --quiet --disable-pip-version-check \
        -r requirements.txt >&2; then
    echo "setup.sh: pip install -r requirements.txt failed" >&2
    status=1
else
    touch "$stamp"
fi
exit "$status"
