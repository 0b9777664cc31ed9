#!/usr/bin/env bash
# ensure-monitoring-tools.sh — promtool (Debian's `prometheus` package) and a
# headless browser (Debian's `chromium`) for the monitoring tests:
# `promtool check metrics|rules` on /metrics and deploy/prometheus/alerts.yml,
# and the live page rendered by `chromium --headless --dump-dom`.
#
# Installs them only when they are missing, we are root and apt-get exists;
# otherwise it says so and the tests that need them skip with a message.
# Never fails the build.
set -uo pipefail

prog=ensure-monitoring-tools
installable() { [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; }
updated=
install() { # install PACKAGE
	local pkg=$1
	if [[ -z $updated ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1
		updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1
}

for want in promtool:prometheus chromium:chromium; do
	cmd=${want%%:*} pkg=${want#*:}
	if command -v "$cmd" >/dev/null 2>&1; then
		echo "$prog: $cmd found: $(command -v "$cmd")"
	elif installable && install "$pkg" && command -v "$cmd" >/dev/null 2>&1; then
		echo "$prog: installed $pkg ($cmd)"
	else
		echo "$prog: $cmd not available (Debian: apt-get install $pkg): the tests that need it skip"
	fi
done
exit 0
