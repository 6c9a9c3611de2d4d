#!/usr/bin/env bash
# Install what the tests need on a fresh Debian machine (Chromium for the browser tests), then run them.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromedriver >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
python3 -m pip install -q -e ".[test,dashboard]"
python3 -m pytest -q "$@"
