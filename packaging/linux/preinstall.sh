#!/bin/sh
# The scadad system user and group own /var/lib/scadad.
set -e
if ! getent group scadad >/dev/null; then
	groupadd --system scadad
fi
if ! getent passwd scadad >/dev/null; then
	useradd --system --gid scadad --home-dir /var/lib/scadad --no-create-home --shell /usr/sbin/nologin scadad
fi
