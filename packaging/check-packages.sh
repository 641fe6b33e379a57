#!/usr/bin/env bash
# Checks what `make packages` built: the files each package must carry.
# Usage: check-packages.sh DIST VERSION
set -euo pipefail
dist=$1 version=$2
fail() { echo "check-packages: $*" >&2; exit 1; }
deb=$(ls "$dist"/scadad_*_amd64.deb) || fail "no .deb in $dist"
contents=$(dpkg-deb --contents "$deb")
for path in ./usr/bin/scadad ./usr/bin/scadactl ./lib/systemd/system/scadad.service ./etc/scadad/ ./var/lib/scadad/ \
	./usr/share/doc/scadad/upgrading.md ./usr/share/doc/scadad/prometheus/scadad-alerts.yml; do
	grep -q " $path\$" <<<"$contents" || fail "$deb lacks $path"
done
grep -q "scadad/scadad .*\./var/lib/scadad/$" <<<"$contents" || fail "$deb: /var/lib/scadad is not owned by scadad"
info=$(dpkg-deb --info "$deb")
grep -q "preinst" <<<"$info" || fail "$deb has no preinst (the scadad user)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
dpkg-deb --extract "$deb" "$tmp"
"$tmp/usr/bin/scadad" --version | grep -q "^scadad v$version " || fail "packaged scadad --version: $("$tmp/usr/bin/scadad" --version)"
grep -q "^ExecStart=/usr/bin/scadad " "$tmp/lib/systemd/system/scadad.service" || fail "unit does not start /usr/bin/scadad"
if command -v systemd-analyze >/dev/null; then
	# The binary is not installed here: that one complaint is expected.
	complaints=$(systemd-analyze verify "$tmp/lib/systemd/system/scadad.service" 2>&1 | grep -v "Command /usr/bin/scadad is not executable" || true)
	[ -z "$complaints" ] || fail "systemd-analyze verify: $complaints"
fi
rpm=$(ls "$dist"/scadad-*.x86_64.rpm) || fail "no .rpm in $dist"
[ -s "$rpm" ] || fail "$rpm is empty"
if command -v rpm >/dev/null; then
	rpm -qlp "$rpm" | grep -q '^/usr/bin/scadad$' || fail "$rpm lacks /usr/bin/scadad"
fi
zip=$(ls "$dist"/scadad_*_windows_amd64.zip) || fail "no Windows zip in $dist"
for f in scadad.exe scadactl.exe node.yaml upgrading.md; do
	unzip -l "$zip" | grep -q " $f\$" || fail "$zip lacks $f"
done
echo "check-packages: $deb, $rpm and $zip carry what they must"
