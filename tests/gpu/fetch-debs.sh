#!/usr/bin/env bash
# Downloads (here, where the package registry answers) the .deb files of the
# build dependencies that a lent GPU machine may lack, into .gpudeps/ (which
# .git/info/exclude must ignore); tests/gpu/run.sh unpacks them there with
# dpkg -x into /tmp/gpudeps when pkg-config does not find them. Name
# .gpudeps in the device call's carry. The packages are this machine's
# distribution's (Debian 12 here); their libraries need only an older glibc
# than the GPU image's.
set -eu
cd "$(dirname "$0")/../.."
grep -qx '/.gpudeps/' .git/info/exclude 2>/dev/null || echo '/.gpudeps/' >>"$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p .gpudeps
cd .gpudeps
apt-get download libhwloc-dev libhwloc15 libnuma-dev libnuma1 libcmocka-dev libcmocka0 \
    libssl-dev pkgconf pkgconf-bin libpkgconf3 pkg-config
ls -la
