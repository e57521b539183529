#!/usr/bin/env bash
# Installs what is missing, builds, then runs castor's main job on local workers.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
exec "${CASTOR_BUILD_DIR:-build}/apps/castor" demo "$@"
