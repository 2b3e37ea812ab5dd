#!/usr/bin/env bash
# Build the container image with podman on a Debian-family host with no registry and no Docker daemon.
#
#   bash deploy/image/build.sh             # target gateway -> cascade-gateway:local
#   bash deploy/image/build.sh demo        # target demo    -> cascade-demo:local
#
# Every step is skipped when already done, so a second run costs only the (cached) podman build:
#   1. podman & co and debootstrap from apt (as root);
#   2. the podman settings this host needs, added to /etc/containers/containers.conf only where it
#      sets nothing (deploy/image/containers_conf.py says which and why);
#   3. the Python base image, made with debootstrap (deploy/image/base.sh), unless PYTHON_IMAGE
#      names one to use instead (e.g. python:3.11.11-slim-bookworm where a registry is reachable);
#   4. podman build of the target, in Docker format so the HEALTHCHECK is kept.
# Environment: PYTHON_IMAGE (see 3), IMAGE_TAG (default cascade-<target>:local).
# Prints `image <tag> <size in bytes> built in <seconds>s` last.
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGET=${1:-gateway}
case "$TARGET" in gateway | demo) ;; *) echo "usage: $0 [gateway|demo]" >&2; exit 2 ;; esac
TAG=${IMAGE_TAG:-cascade-$TARGET:local}

PACKAGES=(podman buildah runc fuse-overlayfs slirp4netns uidmap debootstrap containernetworking-plugins
          netavark aardvark-dns catatonit conmon iptables)

fail() { echo "error: $*" >&2; exit 1; }

ensure_tools() {
  if command -v podman >/dev/null && command -v debootstrap >/dev/null && command -v runc >/dev/null; then
    return
  fi
  [ "$(id -u)" = 0 ] || fail "podman, runc and debootstrap are missing and installing them needs root (apt-get install ${PACKAGES[*]})"
  command -v apt-get >/dev/null || fail "podman, runc and debootstrap are missing and there is no apt-get to install them"
  echo "==> apt-get install ${PACKAGES[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null; }
}

ensure_settings() {
  if [ "$(id -u)" = 0 ]; then
    python3 deploy/image/containers_conf.py /etc/containers/containers.conf >&2
  fi
}

ensure_base() {
  if [ -n "${PYTHON_IMAGE:-}" ]; then
    echo "$PYTHON_IMAGE"
  else
    [ "$(id -u)" = 0 ] || fail "building the base image with debootstrap needs root (or set PYTHON_IMAGE)"
    bash deploy/image/base.sh
  fi
}

ensure_tools
ensure_settings
BASE=$(ensure_base)

BUILD_ARGS=(--format docker --build-arg "PYTHON_IMAGE=$BASE" --target "$TARGET" -t "$TAG")
# Behind a TLS-intercepting proxy the package index is only trusted through the host's CA bundle:
# lend it to the build's RUN steps (read-only, at the path Debian's pip and OpenSSL read). A volume
# exists only while a step runs, so nothing of it is baked into the image.
HOST_CA=/etc/ssl/certs/ca-certificates.crt
if [ -f "$HOST_CA" ]; then
  BUILD_ARGS+=(-v "$HOST_CA:$HOST_CA:ro")
fi

echo "==> podman build ${BUILD_ARGS[*]} ." >&2
START=$(date +%s)
podman build "${BUILD_ARGS[@]}" . >&2
SECONDS_TAKEN=$(( $(date +%s) - START ))
SIZE=$(podman image inspect --format '{{.Size}}' "$TAG")
echo "image $TAG $SIZE built in ${SECONDS_TAKEN}s"
