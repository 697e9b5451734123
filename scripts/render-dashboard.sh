#!/usr/bin/env bash
# Render docs/img/dashboard.png: the dashboard deploy/grafana/zarrgate.json
# over ~5 minutes of a real load, as docs/operations.md ("Dashboard") shows.
#
# It runs, all on 127.0.0.1 and stopped at the end:
#   - a store worker over a temporary directory, a codec worker and a
#     gateway over both (--shared-memory), each with --admin-listen;
#   - Prometheus (Debian's: apt-get install prometheus), scraping the three
#     every 5 s into a temporary directory, as jobs zarrgate-gateway,
#     zarrgate-store-worker, zarrgate-codec-worker;
#   - scripts/dashboard-load.go: slab writes and reads through the Go client
#     by 2, then 6, 3 and 10 concurrent callers (75+75+75+60 s), the codec
#     worker killed (SIGKILL) in the third phase and restarted 5 s later,
#     so that the retry and error panels have something to show;
#   - scripts/render-dashboard.py over the last 5 minutes.
#
#   scripts/render-dashboard.sh [OUTPUT.png]
#
# Needs prometheus on PATH and matplotlib in $PYTHON (default: the client
# venv, ~/.cache/zarrgate/venv-client; pip install matplotlib there).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/img/dashboard.png}
PYTHON=${PYTHON:-$HOME/.cache/zarrgate/venv-client/bin/python}
command -v prometheus >/dev/null || { echo "prometheus not found (apt-get install prometheus)" >&2; exit 1; }
"$PYTHON" -c 'import matplotlib' || { echo "$PYTHON has no matplotlib" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/zarrgate" ./cmd/zarrgate
go build -o "$tmp/load" ./scripts/dashboard-load.go
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
gw=$(free_port) sw=$(free_port) cw=$(free_port) gwa=$(free_port) swa=$(free_port) cwa=$(free_port) prom=$(free_port)

"$tmp/zarrgate" store-worker --root "$tmp/store" --create --listen 127.0.0.1:$sw --admin-listen 127.0.0.1:$swa 2>"$tmp/sw.log" &
pids+=($!)
codec_worker() { exec "$tmp/zarrgate" codec-worker --listen 127.0.0.1:$cw --admin-listen 127.0.0.1:$cwa --memory-limit 256MiB 2>>"$tmp/cw.log"; }
(codec_worker) &
cwpid=$!
pids+=($cwpid)
"$tmp/zarrgate" gateway --store 127.0.0.1:$sw --codec 127.0.0.1:$cw --listen 127.0.0.1:$gw \
	--admin-listen 127.0.0.1:$gwa --shared-memory --memory-limit 512MiB 2>"$tmp/gw.log" &
pids+=($!)

cat >"$tmp/prometheus.yml" <<EOF
global: {scrape_interval: 5s, evaluation_interval: 5s}
scrape_configs:
  - {job_name: zarrgate-gateway, static_configs: [{targets: ["127.0.0.1:$gwa"]}]}
  - {job_name: zarrgate-store-worker, static_configs: [{targets: ["127.0.0.1:$swa"]}]}
  - {job_name: zarrgate-codec-worker, static_configs: [{targets: ["127.0.0.1:$cwa"]}]}
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prom" \
	--web.listen-address=127.0.0.1:$prom 2>"$tmp/prom.log" &
pids+=($!)

for _ in $(seq 50); do curl -sf 127.0.0.1:$gwa/readyz >/dev/null && break; sleep 0.2; done
curl -sf 127.0.0.1:$gwa/readyz >/dev/null || { cat "$tmp/gw.log" >&2; exit 1; }
sleep 10 # a few scrapes before the load

for phase in "2 75s" "6 75s" "3 75s" "10 60s"; do
	set -- $phase
	if [ "$1" = 3 ]; then
		(sleep 30; kill -9 $cwpid; sleep 5; codec_worker) &
		pids+=($!)
	fi
	"$tmp/load" --addr 127.0.0.1:$gw --workers "$1" --duration "$2" 2>>"$tmp/load.log"
done
sleep 10 # the last scrapes
"$PYTHON" scripts/render-dashboard.py --prometheus http://127.0.0.1:$prom --minutes 5 -o "$out"
ls -l "$out"
