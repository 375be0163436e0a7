#!/usr/bin/env bash
# Runs ansible-test against exactly what `ansible-galaxy collection build` ships (build_ignore keeps the
# simulator, benchmarks and pytest-only tests out), unpacked under a build path
# .../ansible_collections/confidential/tee as ansible-test requires. The build path lies outside this
# checkout: inside it, ansible-test would ask git for the file list and git ignores build output.
# Usage: scripts/ansible-test.sh sanity [extra ansible-test args]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${VENV_BIN:-$repo/.venv/bin}
build_id=$(printf '%s' "$repo" | md5sum | cut -c1-10)
dest=${XDG_CACHE_HOME:-$HOME/.cache}/confidential-tee/ansible-test-$build_id/ansible_collections/confidential/tee
dist=$repo/.build/dist

# ansible-test bootstraps pip in its venvs with a get-pip script it downloads from a host this machine
# cannot reach; this stand-in does the same job with the interpreter's own ensurepip.
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
for version in 24_2 25_0 25_1; do
  [ -f "$cache/get_pip_$version.py" ] && continue
  cat >"$cache/get_pip_$version.py" <<'PY'
"""Offline stand-in for ansible-test's get-pip download (placed by confidential.tee's scripts/ansible-test.sh)."""
import subprocess
import sys

args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
PY
done

rm -rf "$dest" "$dist"
mkdir -p "$dest" "$dist"
"$bin/ansible-galaxy" collection build --force --output-path "$dist" "$repo" >/dev/null
tar -xzf "$dist"/confidential-tee-*.tar.gz -C "$dest"
# The tarball's manifests are build artefacts, not collection sources.
rm -f "$dest/MANIFEST.json" "$dest/FILES.json"
cp "$repo/galaxy.yml" "$dest/galaxy.yml"

cd "$dest"
exec "$bin/ansible-test" "$@" --venv --python 3.11 --requirements --color no
