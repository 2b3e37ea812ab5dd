#!/usr/bin/env bash
# A Python 3.11 base image made without a registry: Debian bookworm (minbase) from the Debian mirror
# this host's apt already uses, plus python3, venv and CA certificates, imported into podman.
#
#   bash deploy/image/base.sh        # prints the image name; builds it only if podman lacks it
#
# It stands in for python:3.11-slim-bookworm where no registry is reachable (the Dockerfile takes
# it as --build-arg PYTHON_IMAGE=...). The tag is a hash of this file, so a changed recipe builds a
# new base and an unchanged one is reused (about 40 s to build, then 0). Needs root, debootstrap
# and podman (deploy/image/build.sh installs them).
set -euo pipefail
cd "$(dirname "$0")"

SUITE=bookworm
NAME=localhost/cascade-python311-bookworm
TAG=$(sha256sum base.sh | cut -c1-12)
IMAGE="$NAME:$TAG"

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi

# The mirror apt already uses (deb822 .sources or one-line .list), not a security or updates suite.
mirror() {
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1 || true)
  if [ -z "$uri" ]; then
    uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' | grep -v security | head -1 || true)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

ROOTFS=$(mktemp -d /var/tmp/cascade-base.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
echo "==> debootstrap --variant=minbase $SUITE from $(mirror)" >&2
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$(mirror)" >&2

# Like Debian's own slim images: no manuals, docs or translations (copyright files are kept).
cat > "$ROOTFS/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
EOF
find "$ROOTFS/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
rm -rf "$ROOTFS"/usr/share/{man,info,locale,groff,lintian}/*

# python-is-python3: Debian has no `python` command otherwise (the HEALTHCHECK runs `python`).
# python3-venv brings ensurepip, with Debian's pip that trusts the system CA bundle.
echo "==> python3 python3-venv python-is-python3 ca-certificates" >&2
chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  sh -c 'apt-get install -y -q --no-install-recommends python3 python3-venv python-is-python3 ca-certificates \
         && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /var/log/apt/*' >&2

# An imported image has no environment at all: give it the usual PATH and a UTF-8 locale.
tar -C "$ROOTFS" -c . | podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$IMAGE" >&2
# Older bases of this recipe are no longer used by anything.
podman images --format '{{.Repository}}:{{.Tag}}' | grep "^$NAME:" | grep -v ":$TAG\$" | xargs -r podman rmi >&2 || true
echo "$IMAGE"
