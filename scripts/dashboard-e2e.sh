#!/usr/bin/env bash
# End-to-end check of the dashboard with a real browser: starts `pacer serve` on a
# loopback port, submits three jobs, checks that `/` without a credential is the 401
# login form, then logs in headless Chromium through that form (`/#token=…`: the login
# page puts the fragment's token in its form and submits it; `POST /login` sets the
# session cookie and redirects to `/`) and checks that every job name and a cost is in the
# rendered DOM.
# Then cross-site request forgery: the same browser, logged in, opens an attacker's page
# served from ANOTHER 127.0.0.1 port that posts job specs to the API with the session
# cookie (a fetch with credentials: 'include' and text/plain, a form with
# enctype=text/plain, a fetch with application/toml); the check fails if any job was
# created or any of their commands ran. Last, the dashboard's own way (cookie, its
# origin and the page's CSRF token) is checked to still work with curl. Installs
# Debian's chromium when it is missing (apt-get, needs root). Keeps the DOMs and a
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
ATTACK=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
EVIL_PORT=$(free_port)
EVIL=
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
  if [ -n "$EVIL" ]; then kill "$EVIL" 2>/dev/null || true; wait "$EVIL" 2>/dev/null || true; fi
  rm -rf "$STATE" "$PROFILE" "$ATTACK"
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
grep -Eq '<td class="cost">[0-9]+\.[0-9]{3} device-h</td>' "$OUT/dom.html" || { echo "FAIL: no job's cost (device-hours held) shown"; exit 1; }
grep -q '<polyline' "$OUT/dom.html" || { echo "FAIL: no report chart drawn"; exit 1; }
grep -Eq 'name="pacer-csrf" content="[0-9a-f]{64}"' "$OUT/dom.html" || { echo "FAIL: the dashboard carries no CSRF token"; exit 1; }
grep -q '<button>cancel</button>' "$OUT/dom.html" || { echo "FAIL: no cancel button on a running job"; exit 1; }
test -s "$OUT/dashboard.png" || { echo "FAIL: no screenshot"; exit 1; }

# Cross-site request forgery from another port of the same host (the same "site", so
# the browser sends the SameSite=Strict cookie along). The attacker's page logs the
# browser in first, in a frame, through the real login form (as a user who has the
# dashboard open in another tab), then attacks in three ways; each job's command would
# leave a file in $STATE.
echo "== attacker page on 127.0.0.1:$EVIL_PORT against the dashboard on 127.0.0.1:$PORT"
T="http://127.0.0.1:$PORT"
cat > "$ATTACK/attack.html" <<HTML
<!doctype html>
<html><body>
<div id="log">started</div>
<iframe id="victim" src="$T/#token=$(cat "$STATE/token")"></iframe>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="post" action="$T/v1/jobs" enctype="text/plain" target="sink">
<input type="hidden" id="field" value="x">
</form>
<script>
"use strict";
const log = (m) => { document.getElementById("log").textContent += " | " + m; };
const spec = (n) => 'name = "csrf-' + n + '"\ncommand = ["touch", "$STATE/pwned-' + n + '"]\n';
let loads = 0, attacked = false;
async function attack() {
  if (attacked) { return; }
  attacked = true;
  log("attacking after " + loads + " loads of the victim frame");
  try {
    await fetch("$T/v1/jobs", { method: "POST", mode: "no-cors", credentials: "include",
      headers: { "Content-Type": "text/plain" }, body: spec("fetch") });
    log("fetch text/plain sent");
  } catch (e) { log("fetch text/plain failed: " + e); }
  try {
    const r = await fetch("$T/v1/jobs", { method: "POST", credentials: "include",
      headers: { "Content-Type": "application/toml" }, body: spec("toml") });
    log("fetch application/toml answered " + r.status);
  } catch (e) { log("fetch application/toml failed: " + e); }
  // text/plain form: the body is NAME=VALUE; the '=' lands in a TOML comment.
  const field = document.getElementById("field");
  field.name = spec("form") + "#";
  document.getElementById("sink").onload = () => { log("form posted"); document.body.appendChild(Object.assign(document.createElement("div"), { id: "done", textContent: "done" })); };
  document.getElementById("f").submit();
}
// The frame's load event: the dashboard, once the login page has posted the token
// (the login page's own load may come before this handler is set).
document.getElementById("victim").onload = () => { loads += 1; setTimeout(attack, 1000); };
setTimeout(attack, 60000);
</script>
</body></html>
HTML
LOGINS_BEFORE=$(grep -c 'dashboard login: session cookie set' "$OUT/service.log" || true)
python3 -m http.server "$EVIL_PORT" --bind 127.0.0.1 --directory "$ATTACK" > "$OUT/attacker-server.log" 2>&1 &
EVIL=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$EVIL_PORT/attack.html" >/dev/null && break; sleep 0.1; done
# A fresh browser profile: the only login is the one the attacker's page makes happen.
ATTACK_FLAGS=("${FLAGS[@]/--virtual-time-budget=5000/--virtual-time-budget=90000}")
ATTACK_FLAGS=("${ATTACK_FLAGS[@]/--user-data-dir=$PROFILE/--user-data-dir=$ATTACK/profile}")
timeout 120 chromium "${ATTACK_FLAGS[@]}" --dump-dom \
  "http://127.0.0.1:$EVIL_PORT/attack.html" > "$OUT/attack-dom.html" 2>> "$OUT/chromium.log"
grep -q 'id="done"' "$OUT/attack-dom.html" || { echo "FAIL: the attacker page did not finish its attacks ($OUT/attack-dom.html)"; exit 1; }
# The attack is only a test if the browser was logged in: the service logs each login.
LOGINS=$(grep -c 'dashboard login: session cookie set' "$OUT/service.log" || true)
[ "$LOGINS" -gt "$LOGINS_BEFORE" ] || { echo "FAIL: the attacker's frame did not log the browser in ($OUT/attack-dom.html)"; exit 1; }
sleep 3   # two rounds: a created job would have run by now
"$PACER" jobs --json --token-file "$STATE/token" > "$OUT/jobs-after-attack.json"
if grep -q 'csrf-' "$OUT/jobs-after-attack.json" || ls "$STATE"/pwned-* >/dev/null 2>&1; then
  echo "FAIL: a page on another port created a job with the dashboard's cookie:"
  grep -o '"name": *"csrf-[a-z]*"' "$OUT/jobs-after-attack.json" || true
  ls "$STATE"/pwned-* 2>/dev/null || true
  exit 1
fi

# The dashboard's own way still works: cookie + its origin + the page's CSRF token.
JAR="$ATTACK/jar"
curl -s -o /dev/null -c "$JAR" -d "token=$(cat "$STATE/token")" "$T/login"
CSRF=$(curl -s -b "$JAR" "$T/" | grep -o 'name="pacer-csrf" content="[0-9a-f]*"' | grep -o '[0-9a-f]\{64\}')
CODE=$(curl -s -o /dev/null -w '%{http_code}' -b "$JAR" -H "Origin: $T" -X POST "$T/v1/jobs/job-3/cancel")
[ "$CODE" = 403 ] || { echo "FAIL: a cookie-authenticated cancel without the CSRF token answered $CODE"; exit 1; }
CODE=$(curl -s -o /dev/null -w '%{http_code}' -b "$JAR" -H "Origin: $T" -H "X-Pacer-CSRF: $CSRF" -X POST "$T/v1/jobs/job-3/cancel")
[ "$CODE" = 202 ] || { echo "FAIL: the dashboard's cancel (cookie, origin, CSRF token) answered $CODE"; exit 1; }

echo "dashboard e2e passed: / without a token is the login form (401); logged in through it, ${NAMES[*]} in the DOM; screenshot $OUT/dashboard.png"
echo "CSRF: a logged-in browser on a page of 127.0.0.1:$EVIL_PORT (fetch text/plain with credentials, fetch application/toml, text/plain form) created no job; the dashboard's token cancels"
