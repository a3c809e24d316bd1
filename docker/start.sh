#!/bin/sh
# The image's entrypoint (and test/packaging's): Keel replaces this shell, so the container's
# stop signal (SIGTERM) reaches it and it shuts down gracefully. Settings come from KEEL_* in
# the environment (the Dockerfile sets the container's defaults) or as flags after `serve`.
set -eu
cd "$(dirname "$0")/.."
exec node dist/src/cli.js serve "$@"
