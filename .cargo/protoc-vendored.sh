#!/bin/sh
# Runs protoc for build scripts (see .cargo/config.toml): the binary of the
# protoc-bin-vendored-<platform> crate whose version Cargo.lock pins, from cargo's registry
# sources (cargo downloads every package of a build before it runs any build script, and the
# crates that use etcd-client depend on protoc-bin-vendored). Falls back to a protoc on PATH.
set -eu
here=$(dirname "$0")
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-x86_64 ;;
  Linux-aarch64) platform=linux-aarch_64 ;;
  Linux-i?86) platform=linux-x86_32 ;;
  Linux-ppc64le) platform=linux-ppcle_64 ;;
  Linux-s390x) platform=linux-s390_64 ;;
  Darwin-arm64) platform=macos-aarch_64 ;;
  Darwin-x86_64) platform=macos-x86_64 ;;
  *) platform=unknown ;;
esac
crate="protoc-bin-vendored-$platform"
version=$(awk -v name="$crate" '$1 == "name" && $3 == "\"" name "\"" { getline; gsub(/"/, "", $3); print $3; exit }' "$here/../Cargo.lock")
if [ -n "$version" ]; then
  for protoc in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$crate-$version"/bin/protoc; do
    if [ -x "$protoc" ]; then
      exec "$protoc" "$@"
    fi
  done
fi
if command -v protoc >/dev/null 2>&1; then
  exec protoc "$@"
fi
echo "protoc-vendored.sh: no $crate $version in ${CARGO_HOME:-$HOME/.cargo}/registry/src and no protoc on PATH" >&2
exit 127
