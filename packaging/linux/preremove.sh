#!/bin/sh
# A planned stop: an Active hands its role over (and leaves the voters in
# pair mode) before the package goes.
set -e
if [ -d /run/systemd/system ]; then
	systemctl stop scadad.service || true
	systemctl disable scadad.service || true
fi
