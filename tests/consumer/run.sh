#!/usr/bin/env bash
# Installs castor from BUILD_DIR into a temporary prefix, builds the consumer
# with find_package(castor), and runs it. Usage: run.sh SOURCE_DIR BUILD_DIR PORT
set -euo pipefail
src=$1 build=$2 port=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" -j2 >/dev/null
if [ "$port" = 0 ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
"$work/build/consumer" "$port"
