#!/bin/sh
# Makes a Rust image for packaging/Dockerfile to build in, where no registry serves `rust`
# images: a Debian root filesystem from Debian's own packages (debootstrap, the release this
# machine runs, so this machine's toolchain runs in it) with gcc and libc6-dev, plus this
# machine's rustc and cargo (`rustc --print sysroot`, without its documents). Needs root,
# debootstrap (`apt-get install debootstrap`) and the Debian mirror ($DEBIAN_MIRROR). Prints the
# image's tag; an image already of that tag (same toolchain, same release) is kept as it is.
#
#   docker build -f packaging/Dockerfile --build-arg BUILDER=$(packaging/builder-image.sh) \
#     -t chorus/node .
set -eu
sysroot=$(rustc --print sysroot)
version=$(rustc --version | awk '{ print $2 }')
suite=${SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-}")}
[ -n "$suite" ] || { echo "builder-image.sh: not a Debian release; set SUITE (e.g. bookworm)" >&2; exit 2; }
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
tag=${1:-chorus/rust-builder:$version-$suite}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "builder-image.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates \
  "$suite" "$dir/rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1; then
  tail -20 "$dir/debootstrap.log" >&2
  echo "builder-image.sh: debootstrap $suite from $mirror failed" >&2
  exit 1
fi
rm -f "$dir/rootfs/var/cache/apt/archives/"*.deb
mkdir -p "$dir/rootfs/usr/local/rust/bin"
cp "$sysroot/bin/rustc" "$sysroot/bin/cargo" "$dir/rootfs/usr/local/rust/bin/"
# The compiler's libraries, the standard library and the linker it ships (rustlib/…/bin).
cp -a "$sysroot/lib" "$dir/rootfs/usr/local/rust/"
tar -C "$dir/rootfs" -c . | docker import \
  -c 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'WORKDIR /' - "$tag" >/dev/null
echo "$tag"
