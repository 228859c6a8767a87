#!/usr/bin/env bash
# Installs the JavaScript SDK that speaks SQS's query protocol for the conformance cases
# (js-query/: @aws-sdk/client-sqs 3.445.0, exactly as its package-lock.json says),
# idempotently. The JSON-protocol SDK is bench/peers' (bench/peers/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/js-query"
if [ -f node_modules/.package-lock.json ] && [ ! package-lock.json -nt node_modules/.package-lock.json ]; then
    exit 0
fi
command -v npm >/dev/null || { echo "setup-js.sh: npm not found" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error >&2
