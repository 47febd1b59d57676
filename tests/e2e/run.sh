#!/bin/bash
# Runs the end-to-end suite through both ways the kernel hands requests to
# the daemon: /dev/fuse (every mount told `--io-uring off` through
# RETAGFS_IO_URING), and FUSE over io_uring where the kernel has it (Linux
# 6.14+; the fuse module parameter is restored after). Tests marked `once`
# (media software, refusals: nothing in them depends on how requests
# arrive) run in the first pass only.
set -euo pipefail
param=/sys/module/fuse/parameters/enable_uring
if [ -w "$param" ]; then
  old=$(cat "$param")
  trap 'echo "$old" > "$param"' EXIT
  echo "== end-to-end tests, requests through /dev/fuse"
  echo N > "$param"
  RETAGFS_IO_URING=off python3 -m pytest -ra tests/e2e "$@"
  echo "== end-to-end tests, requests through io_uring (tests marked once ran above)"
  echo Y > "$param"
  python3 -m pytest -ra -m "not once" tests/e2e "$@"
else
  echo "NOTE: $param is missing or not writable (kernel before 6.14, or not root):"
  echo "NOTE: the end-to-end tests run through /dev/fuse only, not through io_uring."
  python3 -m pytest -ra tests/e2e "$@"
fi
