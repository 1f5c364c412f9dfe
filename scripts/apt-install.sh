#!/usr/bin/env bash
# Installs the Debian packages named that are not installed yet (nothing,
# and no `apt-get update`, when all are): scripts/setup.sh and
# scripts/fuzz.sh. `WHO` prefixes the message. Exits non-zero when apt fails.
#   WHO=setup bash scripts/apt-install.sh PKG...
set -euo pipefail
missing=()
for p in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "${WHO:-apt-install}: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
