#!/bin/sh
# Builds and runs fiber_switch.cpp (with boost.context where libboost-context-dev is installed).
set -e
cd "$(dirname "$0")"
out=$(mktemp -d)
if [ -f /usr/include/boost/context/fiber.hpp ]; then
    g++ -O2 -std=c++20 -DWITH_BOOST fiber_switch.cpp -o "$out/fs" -lboost_context
else
    g++ -O2 -std=c++20 fiber_switch.cpp -o "$out/fs"
fi
"$out/fs"
rm -rf "$out"
