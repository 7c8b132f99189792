#!/usr/bin/env bash
# Installs holter: the binary into $DESTDIR$PREFIX/bin, the systemd unit
# into $DESTDIR$SYSTEMDDIR (its ExecStart naming $PREFIX/bin/holter), and
# the service's flags into $DESTDIR/etc/default/holter unless that file is
# there already (it is the administrator's). Builds bin/holter when missing.
#   PREFIX=/usr/local SYSTEMDDIR=/etc/systemd/system DESTDIR= scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
SYSTEMDDIR=${SYSTEMDDIR:-/etc/systemd/system}
DESTDIR=${DESTDIR:-}
BIN=${BIN:-bin/holter}
case $PREFIX in /*) ;; *) echo "install: PREFIX must be absolute, not $PREFIX" >&2; exit 2 ;; esac

if [ ! -x "$BIN" ]; then
	go build -o "$BIN" ./cmd/holter
fi
install -d "$DESTDIR$PREFIX/bin" "$DESTDIR$SYSTEMDDIR" "$DESTDIR/etc/default"
install -m 0755 "$BIN" "$DESTDIR$PREFIX/bin/holter"
sed "s|^ExecStart=/usr/local/bin/holter |ExecStart=$PREFIX/bin/holter |" deploy/systemd/holter.service >"$DESTDIR$SYSTEMDDIR/holter.service.tmp"
chmod 0644 "$DESTDIR$SYSTEMDDIR/holter.service.tmp"
mv "$DESTDIR$SYSTEMDDIR/holter.service.tmp" "$DESTDIR$SYSTEMDDIR/holter.service"
if [ ! -e "$DESTDIR/etc/default/holter" ]; then
	install -m 0644 deploy/systemd/holter.env "$DESTDIR/etc/default/holter"
fi
echo "install: $DESTDIR$PREFIX/bin/holter, $DESTDIR$SYSTEMDDIR/holter.service, $DESTDIR/etc/default/holter"
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
	echo "install: systemctl daemon-reload && systemctl enable --now holter" >&2
fi
