#!/usr/bin/env bash
# Debian's Chromium, for the test that renders a run report headlessly. Idempotent.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "chromium: /usr/bin/chromium is missing; install Debian's chromium package (sudo apt-get install chromium)" >&2
  exit 1
fi
echo "chromium: installing Debian's chromium package"
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null \
  || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null; }
