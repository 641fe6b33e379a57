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
packaged=$("$tmp/usr/bin/scadad" --version)
grep -q "^scadad v$version " <<<"$packaged" || fail "packaged scadad --version: $packaged"
grep -q "^ExecStart=/usr/bin/scadad " "$tmp/lib/systemd/system/scadad.service" || fail "unit does not start /usr/bin/scadad"
if command -v systemd-analyze >/dev/null; then
	# The binary is not installed here: that one complaint is expected.
	complaints=$(systemd-analyze verify "$tmp/lib/systemd/system/scadad.service" 2>&1 | grep -v "Command /usr/bin/scadad is not executable" || true)
	[ -z "$complaints" ] || fail "systemd-analyze verify: $complaints"
fi
rpm=$(ls "$dist"/scadad-*.x86_64.rpm) || fail "no .rpm in $dist"
[ -s "$rpm" ] || fail "$rpm is empty"
if command -v rpm >/dev/null; then
	rpmfiles=$(rpm -qlp "$rpm")
	grep -q '^/usr/bin/scadad$' <<<"$rpmfiles" || fail "$rpm lacks /usr/bin/scadad"
fi
zip=$(ls "$dist"/scadad_*_windows_amd64.zip) || fail "no Windows zip in $dist"
# Listed once: grep -q ending a pipe early would fail unzip (pipefail).
listing=$(unzip -l "$zip")
for f in scadad.exe scadactl.exe node.yaml upgrading.md; do
	grep -q " $f\$" <<<"$listing" || fail "$zip lacks $f"
done
msi=$(ls "$dist"/scadad_*_windows_amd64.msi) || fail "no MSI in $dist"
files=$(msiextract -l "$msi") || fail "msiextract cannot read $msi"
for f in scadad/scadad.exe scadad/scadactl.exe scadad/upgrading.md scadad/node.example.yaml; do
	grep -qx "$f" <<<"$files" || fail "$msi lacks $f (it has: $files)"
done
service=$(msiinfo export "$msi" ServiceInstall)
# Name, display name, type 16 (own process), start 2 (automatic), error
# control 1, the arguments, the component.
want='ScadadService	scadad	scadad SCADA redundancy daemon	16	2	1					--service --config "[CommonAppDataFolder]scadad\node.yaml"	ScadadExe	'
grep -qF "$want" <<<"$service" || fail "$msi does not register the service as it must: $service"
control=$(msiinfo export "$msi" ServiceControl)
grep -q "^ScadadServiceControl	scadad	162		1	ScadadExe" <<<"$control" || fail "$msi does not stop the service on install and uninstall and remove it on uninstall: $control"
# 3090: an exe installed by the package (18), deferred (1024), not
# impersonated (2048); sequenced right after InstallServices.
actions=$(msiinfo export "$msi" CustomAction)
grep -q "^SetRecoveryActions	3090	scadad.exe	service recovery" <<<"$actions" || fail "$msi does not set the service's recovery actions (scadad.exe service recovery): $actions"
sequence=$(msiinfo export "$msi" InstallExecuteSequence | tr -d '\r')
installServices=$(awk -F'\t' '$1=="InstallServices"{print $3}' <<<"$sequence")
recovery=$(awk -F'\t' '$1=="SetRecoveryActions"{print $2 "|" $3}' <<<"$sequence")
[[ "$recovery" == "NOT REMOVE|$((installServices + 1))" ]] || fail "$msi runs SetRecoveryActions at '$recovery', want 'NOT REMOVE|$((installServices + 1))' (right after InstallServices)"
registry=$(msiinfo export "$msi" Registry)
grep -qF 'EventLog\Application\scadad	EventMessageFile	[System64Folder]EventCreate.exe' <<<"$registry" || fail "$msi does not register the Event Log source: $registry"
suminfo=$(msiinfo suminfo "$msi")
grep -q "^Template: x64;" <<<"$suminfo" || fail "$msi is not an x64 package: $suminfo"
echo "check-packages: $deb, $rpm, $zip and $msi carry what they must"
