# Keel as a container image. The build and start steps are scripts in docker/, which the test
# suite runs too (test/packaging/image.test.ts), so what the image does is what the tests check.
#
#   docker build -t keel .
#   docker run --init -p 8080:8080 -p 8081:8081 -v keel-data:/data -e KEEL_ADMIN_KEY=... keel

FROM node:20.20.2-bookworm-slim AS build
# better-sqlite3 compiles its native module when no prebuilt one can be downloaded.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Installs from the lockfile and builds dist/ (the prepare script), as `npm ci` does in a checkout.
RUN npm ci --prefer-offline --no-audit --no-fund
RUN docker/build.sh /opt/keel

FROM node:20.20.2-bookworm-slim
ENV NODE_ENV=production \
    KEEL_HOST=0.0.0.0 \
    KEEL_PORT=8080 \
    KEEL_AUDIT_PORT=8081 \
    KEEL_DATA_DIR=/data
COPY --from=build /opt/keel /opt/keel
RUN mkdir -p /data && chown node:node /data
# The node image's unprivileged user (uid 1000).
USER node
VOLUME /data
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 CMD ["node", "/opt/keel/docker/healthcheck.mjs"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/keel/docker/start.sh"]
