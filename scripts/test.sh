#!/usr/bin/env bash
# Install what the tests need on a fresh Debian machine (Chromium for the browser tests), then run them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Chromium for the browser tests; a C compiler for the native trace reader (parsers/_scan.c), whose tests
# compare it with the pure-Python reader.
PACKAGES=()
command -v chromedriver >/dev/null 2>&1 || PACKAGES+=(chromium chromium-driver)
command -v cc >/dev/null 2>&1 || PACKAGES+=(gcc)
if [ ${#PACKAGES[@]} -gt 0 ]; then
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
fi
python3 -m pip install -q -e ".[test,dashboard]"
# torch (~200 MB even as a CPU build) only when asked: tests/test_training.py's real torch.profiler runs skip without it.
if [ "${TRACEANALYZER_TEST_TORCH:-0}" = 1 ]; then
  python3 -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
fi
# The habits CI keeps before the tests: lint, format, and the type checker ([tool.mypy] in pyproject.toml).
python3 -m ruff check --quiet .
python3 -m ruff format --check --quiet .
python3 -m mypy
# Two test processes (pytest-xdist), one per core of the CI machine; "-n 0" after the command runs them in one.
# loadgroup: a module whose tests share a module-scoped fixture runs on one worker (tests/conftest.py).
python3 -m pytest -q -n 2 --dist loadgroup "$@"
