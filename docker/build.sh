#!/bin/sh
# The image's build step, after `npm ci` in the checkout (the Dockerfile runs both; so does
# test/packaging): assembles in OUTPUT_DIR what runs Keel and nothing else: package.json, the
# built server and console, the image's scripts and the production dependencies.
set -eu
out=${1:?usage: docker/build.sh OUTPUT_DIR}
cd "$(dirname "$0")/.."
[ -f dist/src/cli.js ] && [ -f dist/console/index.html ] || { echo "docker/build.sh: dist/ is not built (run npm ci first)" >&2; exit 1; }
mkdir -p "$out/dist"
cp package.json package-lock.json "$out/"
cp -R dist/src dist/console "$out/dist/"
mkdir -p "$out/docker"
cp docker/start.sh docker/healthcheck.mjs "$out/docker/"
cp -R node_modules "$out/"
cd "$out"
npm prune --omit=dev --no-audit --no-fund
