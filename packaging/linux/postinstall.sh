#!/bin/sh
# Enabled on install, started only once /etc/scadad/node.yaml exists.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	systemctl enable scadad.service || true
	if [ -f /etc/scadad/node.yaml ]; then
		systemctl restart scadad.service || true
	fi
fi
