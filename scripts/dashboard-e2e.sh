#!/usr/bin/env bash
# End-to-end check of the dashboard with a real browser: starts `pacer serve` on a
# loopback port, submits three jobs, checks that `/` without a credential is the 401
# login form, then logs in headless Chromium through that form (`/#token=…`: the login
# page puts the fragment's token in its form and submits it; `POST /login` sets the
# session cookie and redirects to `/`) and checks that every job name is in the
# rendered DOM. Installs
# Debian's chromium when it is missing (apt-get, needs root). Keeps the DOM and a
# screenshot in OUT_DIR (default target/dashboard-e2e).
#
# Usage: [PACER=path/to/pacer] scripts/dashboard-e2e.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-target/dashboard-e2e}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if ! command -v chromium >/dev/null; then
  echo "== installing chromium (apt-get)"
  apt-get -y install chromium >/dev/null || { apt-get update >/dev/null && apt-get -y install chromium >/dev/null; }
fi

if [ -z "${PACER:-}" ]; then   # PACER=path/to/pacer uses that binary instead
  echo "== building pacer"
  cargo build -q -p pacer-cli
  PACER=${CARGO_TARGET_DIR:-target}/debug/pacer
fi

STATE=$(mktemp -d)
PROFILE=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$PACER" serve --listen 127.0.0.1:$PORT --state "$STATE" --cluster 2x2:cpu --policy fair --round-s 0.5 --grace-s 2 \
  > "$OUT/service.log" 2>&1 &
SERVICE=$!
cleanup() {
  # Cancel the jobs (they checkpoint and exit on SIGTERM), then stop the service.
  for j in 1 2 3; do
    "$PACER" cancel job-$j --server http://127.0.0.1:$PORT --token-file "$STATE/token" >/dev/null 2>&1 || true
  done
  sleep 1
  kill "$SERVICE" 2>/dev/null || true
  wait "$SERVICE" 2>/dev/null || true
  rm -rf "$STATE" "$PROFILE"
}
trap cleanup EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && break; sleep 0.1; done
export PACER_SERVER=http://127.0.0.1:$PORT

# The jobs are crates/serve/tests/job.py: 0.1 s steps, a report every 5 steps.
JOB_PY=$(pwd)/crates/serve/tests/job.py
PYTHON=$(python3 -c 'import sys; print(sys.executable)')   # the interpreter, not a shim
mkdir -p "$STATE/out"
NAMES=(resnet-e2e bert-e2e tiny-mlp-e2e)
for n in "${NAMES[@]}"; do
  printf 'name = "%s"\ncommand = ["%s", "%s", "%s", "300"]\nreplicas = 1\n' "$n" "$PYTHON" "$JOB_PY" "$STATE/out" > "$STATE/$n.toml"
  "$PACER" submit "$STATE/$n.toml" --token-file "$STATE/token"
done
sleep 5
"$PACER" jobs --token-file "$STATE/token"

# Without a credential `/` is the login form (401), and the API does not answer.
CODE=$(curl -s -o "$OUT/login.html" -w '%{http_code}' http://127.0.0.1:$PORT/)
[ "$CODE" = 401 ] && grep -q 'action="/login"' "$OUT/login.html" || { echo "FAIL: / without a token answered $CODE, not the 401 login form"; exit 1; }
CODE=$(curl -s -o /dev/null -w '%{http_code}' -b "pacer_session=$(printf '0%.0s' $(seq 64))" http://127.0.0.1:$PORT/v1/jobs)
[ "$CODE" = 401 ] || { echo "FAIL: /v1/jobs with a wrong cookie answered $CODE"; exit 1; }

URL="http://127.0.0.1:$PORT/#token=$(cat "$STATE/token")"
FLAGS=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update
       --disable-sync --no-first-run --user-data-dir="$PROFILE" --virtual-time-budget=5000)
echo "== loading the dashboard in headless chromium"
timeout 120 chromium "${FLAGS[@]}" --dump-dom "$URL" > "$OUT/dom.html" 2> "$OUT/chromium.log"
timeout 120 chromium "${FLAGS[@]}" --window-size=1200,900 --screenshot="$OUT/dashboard.png" "$URL" >> "$OUT/chromium.log" 2>&1
grep -q 'action="/login"' "$OUT/dom.html" && { echo "FAIL: still on the login page after logging in ($OUT/dom.html)"; exit 1; }
for n in "${NAMES[@]}"; do
  grep -q "<td>$n</td>" "$OUT/dom.html" || { echo "FAIL: job $n not in the dashboard's DOM ($OUT/dom.html)"; exit 1; }
done
grep -q 'class="state-running"' "$OUT/dom.html" || { echo "FAIL: no running job shown"; exit 1; }
grep -q '<polyline' "$OUT/dom.html" || { echo "FAIL: no report chart drawn"; exit 1; }
test -s "$OUT/dashboard.png" || { echo "FAIL: no screenshot"; exit 1; }
echo "dashboard e2e passed: / without a token is the login form (401); logged in through it, ${NAMES[*]} in the DOM; screenshot $OUT/dashboard.png"
