# Sourced by scripts/test after scripts/_venv.sh: the releases of
# scripts/oldest-aiobotocore.txt (and what they need) installed apart, in
# .venv/oldest-aiobotocore, to be put ahead of .venv on PYTHONPATH. Re-installed only when
# that file changed since. Sets `oldest` (the folder) and `oldest_version` (aiobotocore's).
set -euo pipefail
_pins="$root/scripts/oldest-aiobotocore.txt"
oldest="$venv/oldest-aiobotocore"
if [ ! -f "$oldest/.installed" ] || [ "$_pins" -nt "$oldest/.installed" ]; then
    rm -rf "$oldest"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --target "$oldest" \
        --requirement "$_pins"
    touch "$oldest/.installed"
fi
oldest_version="$(sed -n 's/^aiobotocore==//p' "$_pins")"
