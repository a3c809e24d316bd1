#!/bin/sh
# The image's build step (the Dockerfile runs it; so does test/packaging): installs from the
# lockfile (which builds dist/), then assembles in OUTPUT_DIR what runs Keel and nothing else:
# package.json, the built server and console, these scripts and the production dependencies.
set -eu
out=${1:?usage: docker/build.sh OUTPUT_DIR}
cd "$(dirname "$0")/.."
npm ci --prefer-offline --no-audit --no-fund
mkdir -p "$out/dist"
cp package.json package-lock.json "$out/"
cp -R dist/src dist/console "$out/dist/"
mkdir -p "$out/docker"
cp docker/start.sh docker/healthcheck.mjs "$out/docker/"
cp -R node_modules "$out/"
cd "$out"
npm prune --omit=dev --no-audit --no-fund
