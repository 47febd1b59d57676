#!/bin/bash
# `make deb`: the Debian package target/debian/retagfs_VERSION_ARCH.deb,
# built with dpkg-deb from a tree staged by `make install` (no packaging
# tool to compile): the binary in /usr/bin, the completions, the manual
# pages, and contrib/systemd's units pointing at /usr/bin/retagfs.
# BIN is the binary to package (default target/release/retagfs);
# DEB_MAINTAINER the Maintainer field.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/target/release/retagfs}
maintainer=${DEB_MAINTAINER:-retagfs packagers <packagers@example.org>}
[ -x "$bin" ] || { echo "no $bin: run \`make build\` first" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
arch=$(dpkg --print-architecture)
out=$root/target/debian
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/DEBIAN"

make -s -C "$root" install BIN="$bin" DESTDIR="$stage" PREFIX=/usr SUDO=
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/bin/retagfs"
gzip -9n "$stage"/usr/share/man/man1/*.1

units=$stage/usr/lib/systemd/system
mkdir -p "$units"
for unit in "$root"/contrib/systemd/*; do
    sed 's|/usr/local/bin/retagfs|/usr/bin/retagfs|g; s|make build && sudo make install|apt install ./retagfs_*.deb|g' \
        "$unit" > "$units/$(basename "$unit")"
done

doc=$stage/usr/share/doc/retagfs
mkdir -p "$doc"
cp "$root/packaging/debian/copyright" "$doc/copyright"
{
    echo "retagfs ($version) unstable; urgency=medium"
    echo
    echo "  * Built from the retagfs sources; see /usr/share/doc/retagfs/changelog.gz."
    echo
    echo " -- $maintainer  $(date -R -d @"${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}")"
} | gzip -9n > "$doc/changelog.Debian.gz"
gzip -9nc "$root/CHANGELOG.md" > "$doc/changelog.gz"

# The libraries the binary links, as dpkg-shlibdeps reads them (it wants a
# source package's debian/control beside it).
mkdir -p "$out/shlibs/debian"
printf 'Source: retagfs\n\nPackage: retagfs\nArchitecture: any\n' > "$out/shlibs/debian/control"
depends=$(cd "$out/shlibs" && dpkg-shlibdeps -O -e"$stage/usr/bin/retagfs" | sed -n 's/^shlibs:Depends=//p')
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s|@VERSION@|$version|; s|@ARCH@|$arch|; s|@SIZE@|$size|; s|@MAINTAINER@|$maintainer|" \
    -e "s|@DEPENDS@|${depends:-libc6}|" "$root/packaging/debian/control" > "$stage/DEBIAN/control"
install -m 755 "$root/packaging/debian/postinst" "$root/packaging/debian/postrm" "$stage/DEBIAN/"
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
find "$stage" -type d -exec chmod 755 {} +
find "$stage/usr" -type f -exec chmod 644 {} +
chmod 755 "$stage/usr/bin/retagfs"

deb=$out/retagfs_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
