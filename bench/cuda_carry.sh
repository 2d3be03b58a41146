#!/bin/bash
# Run HERE (the development machine), before a `run` on the lent GPU machine: that machine cannot install
# packages, and the build needs Debian's header-only xsimd and nlohmann-json and GoogleTest (static libraries +
# CMake config). This copies them into .carry/ (ignored by git through .git/info/exclude) in the layout
# bench/run_cuda.sh expects; name `.carry` in the run's `carry` list (about 5 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.carry/usr
rm -rf .carry
mkdir -p "$dest/include" "$dest/lib/x86_64-linux-gnu/cmake"
cp -rL /usr/include/xsimd /usr/include/nlohmann /usr/include/gtest /usr/include/gmock "$dest/include/"
cp -L /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$dest/lib/x86_64-linux-gnu/"
cp -rL /usr/lib/x86_64-linux-gnu/cmake/GTest "$dest/lib/x86_64-linux-gnu/cmake/"
du -sh .carry
