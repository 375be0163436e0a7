#!/usr/bin/env bash
# Prints the first Debian archive URI apt is configured with for bookworm (deb822 first, then the one-line
# format); security and updates suites are skipped because debootstrap needs the main suite. Used by
# molecule-image.sh and vm-image.sh, which debootstrap from the mirror this machine already trusts.
set -euo pipefail
for f in /etc/apt/sources.list.d/*.sources; do
  [ -r "$f" ] || continue
  uri="$(awk '
    /^[[:space:]]*$/ { if (u != "" && s ~ /(^| )bookworm( |$)/) { print u; exit } u = ""; s = ""; next }
    tolower($1) == "uris:" { u = $2 }
    tolower($1) == "suites:" { $1 = ""; s = $0 " " }
    END { if (u != "" && s ~ /(^| )bookworm( |$)/) print u }' "$f" | head -n1)"
  [ -n "$uri" ] && { echo "$uri"; exit 0; }
done
if [ -r /etc/apt/sources.list ]; then
  uri="$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list)"
  [ -n "$uri" ] && { echo "$uri"; exit 0; }
fi
echo "http://deb.debian.org/debian"
