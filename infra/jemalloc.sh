#!/usr/bin/env bash
# Debian's jemalloc, which the model server preloads: training then holds about half the memory it holds
# with glibc's malloc, and runs faster. Optional (without it the server bounds memory more slowly). Idempotent.
set -euo pipefail
if /sbin/ldconfig -p 2>/dev/null | grep -q 'libjemalloc\.so\.2'; then exit 0; fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "jemalloc: not installed (optional; e.g. sudo apt-get install libjemalloc2): the model server uses glibc's malloc" >&2
  exit 0
fi
echo "jemalloc: installing Debian's libjemalloc2"
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libjemalloc2 >/dev/null \
  || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libjemalloc2 >/dev/null; } \
  || echo "jemalloc: could not install libjemalloc2 (optional): the model server uses glibc's malloc" >&2
