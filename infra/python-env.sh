#!/usr/bin/env bash
# Makes the model server's Python environment once per machine: outside the clone, keyed by a hash of
# the pinned requirements, so a fresh clone reuses it instead of reinstalling torch. Links it as .venv.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
requirements=("$root/trainer/requirements.txt" "$root/trainer/requirements-nodeps.txt")
python=${EVALRL_PYTHON:-python3}
key=$( (cat "${requirements[@]}"; "$python" --version) | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/evalrl
venv=$cache/venv-$key
mkdir -p "$cache"

exec 9>"$venv.lock"
flock 9 # two clones setting up at once wait for each other
if [ ! -f "$venv/.complete" ]; then
  echo "python-env: creating $venv (torch and friends; a few minutes the first time)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "${requirements[0]}"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "${requirements[1]}"
  touch "$venv/.complete"
fi
ln -sfn "$venv" "$root/.venv"
