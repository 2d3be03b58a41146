#!/usr/bin/env bash
# The README's main command: sets up, builds everything, then serves the demo with the headers that
# wasm threads need (COOP same-origin, COEP require-corp) and prints its URL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec npm run --silent serve:demo
