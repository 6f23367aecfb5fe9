#!/usr/bin/env bash
# Stops a set-up step early, with a message, when the disk cannot hold what it is about to write,
# instead of minutes later with pip's or Cargo's "No space left on device" halfway through.
# Usage: scripts/disk_check.sh GIB WHAT
#   GIB   the space the step needs on the filesystem holding the checkout (where .venv and target/
#         are), in whole GiB, measured as README's "The two commands" says
#   WHAT  what the step writes, for the message
# RINGENV_DISK_CHECK=0 skips the check (the step then runs, and fails where it fails).
set -euo pipefail
need_gib="$1"
what="$2"
[ "${RINGENV_DISK_CHECK:-1}" = 0 ] && exit 0
dir="$(cd "$(dirname "$0")/.." && pwd)"
# df -P: sizes in 1024-byte blocks; on its second line, column 4 is the free space, 6 the mount.
read -r free_kib mount < <(df -Pk "$dir" | awk 'NR == 2 {print $4, $6}')
if [ "$free_kib" -lt $((need_gib * 1024 * 1024)) ]; then
    free_gib=$(awk -v k="$free_kib" 'BEGIN {printf "%.1f", k / 1048576}')
    echo "$what needs about $need_gib GiB free on $mount (holding $dir); $free_gib GiB are free." >&2
    echo "Free some space there, or set RINGENV_DISK_CHECK=0 to try anyway." >&2
    exit 1
fi
