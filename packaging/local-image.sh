#!/bin/sh
# Makes a node image from a chorus binary built on this machine, with no registry: FROM scratch,
# the binary (stripped when `strip` is there) and the shared libraries it links (from ldd).
# Where a registry serves images, packaging/Dockerfile builds the same from source instead.
#
#   packaging/local-image.sh target/release/chorus chorus/node:latest
#   docker run --rm chorus/node:latest version
set -eu
bin=${1:?usage: local-image.sh PATH-TO-chorus TAG}
tag=${2:?usage: local-image.sh PATH-TO-chorus TAG}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/var/lib/chorus" "$ctx/rootfs/tmp"
cp "$bin" "$ctx/rootfs/usr/local/bin/chorus"
strip "$ctx/rootfs/usr/local/bin/chorus" 2>/dev/null || true
# Every library the binary links, at the path the loader looks for it.
ldd "$bin" | awk '/=> \// { print $3 } /^[[:space:]]*\// { print $1 }' | while read -r lib; do
  mkdir -p "$ctx/rootfs$(dirname "$lib")"
  cp -L "$lib" "$ctx/rootfs$lib"
done
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
VOLUME /var/lib/chorus
EXPOSE 7946 7070
ENTRYPOINT ["/usr/local/bin/chorus"]
CMD ["run", "--data-dir", "/var/lib/chorus", "--listen", "/ip4/0.0.0.0/tcp/7946", "--http", "0.0.0.0:7070"]
DOCKERFILE
docker build -q -t "$tag" "$ctx" >/dev/null
echo "built $tag"
