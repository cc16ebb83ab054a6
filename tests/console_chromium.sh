#!/usr/bin/env bash
# console_chromium.sh — prints the path of a headless-capable Chromium for
# the console's browser test (tests/console_browser_test.go). When none is
# installed and we are root on Debian/Ubuntu, installs Debian's `chromium`
# package first; otherwise says what to install and fails.
set -euo pipefail
find_chromium() {
  local c
  for c in "${PGQ_CHROMIUM:-}" chromium chromium-browser google-chrome-stable google-chrome; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}
if find_chromium; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "console_chromium: Chromium not found; installing Debian's chromium package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends chromium >&2
  find_chromium && exit 0
fi
cat >&2 <<'MSG'
console_chromium: no Chromium found for the console's browser test.
  Debian/Ubuntu:  sudo apt-get install -y chromium
  Fedora/RHEL:    sudo dnf install -y chromium
  macOS:          brew install --cask chromium
Or point PGQ_CHROMIUM at a Chromium or Chrome binary.
MSG
exit 1
