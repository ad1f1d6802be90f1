#!/usr/bin/env bash
# Builds the image of docker/Dockerfile, starts every service of
# docker/compose.yaml, and checks what a user relies on:
#   1. every service comes up (healthy where it has a healthcheck);
#   2. a run started in one container completes on the workers, and its events
#      stream back (start_execution -> events() -> wait());
#   3. Flower refuses requests without its password and lists the run's
#      lg.model_turn tasks, whose arguments are ids only;
#   4. a run survives SIGKILL of the whole tools worker in the middle of a tool
#      call: a new container takes the step over after the lease (15 s).
# The services run as the compose project "lg-smoke" (so a stack of your own is
# left alone) and are removed with their volumes at the end (--keep leaves them).
#
#   ops/docker-smoke.sh [--keep]
#
# Needs Docker with Compose (`docker compose`, or `docker-compose` 1.29) and the
# public images the compose file names; without Docker Hub, build local stand-ins
# first with `sudo ops/docker-standins.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1
PROJECT=lg-smoke
export FLOWER_BASIC_AUTH="smoke:$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
export REDIS_PASSWORD="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export POSTGRES_PASSWORD="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export LG_IMPORTS=smokeapp.agents

say() { printf 'docker-smoke: %s\n' "$*"; }
fail() { printf 'docker-smoke: FAILED: %s\n' "$*" >&2; exit 1; }

COMPOSE_FILE_ARGS=(-f docker/compose.yaml)
if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null; then
    # Compose 1.29 does not know the top-level `name:` (the project name is given with -p anyway).
    V1_FILE=$(mktemp --suffix=.yaml)  # removed by finish(), below
    grep -v '^name: ' docker/compose.yaml > "$V1_FILE"
    COMPOSE=(docker-compose)
    COMPOSE_FILE_ARGS=(-f "$V1_FILE")
else
    fail "no Docker Compose (docker compose or docker-compose)"
fi
compose() {
    "${COMPOSE[@]}" -p "$PROJECT" --project-directory "$ROOT/docker" \
        "${COMPOSE_FILE_ARGS[@]}" -f ops/docker-smoke/compose.smoke.yaml "$@"
}
container() { compose ps -q "$1"; }
in_container() { local service=$1; shift; docker exec "$(container "$service")" "$@"; }
finish() {
    local status=$?
    if [ "$status" != 0 ]; then
        say "logs of the last 30 s:"; compose logs --since 30s --tail 40 2>&1 | tail -80 || true
    fi
    if [ "$KEEP" = 1 ]; then say "left running: project $PROJECT (--keep)"; else compose down -v --remove-orphans >/dev/null 2>&1 || true; fi
    [ -n "${V1_FILE:-}" ] && rm -f "$V1_FILE"
    exit "$status"
}
trap finish EXIT

say "building littleghost:latest from docker/Dockerfile"
docker build -q -f docker/Dockerfile -t littleghost:latest . >/dev/null
say "starting the services"
compose up -d --no-build >/dev/null 2>&1 || { compose up -d --no-build; fail "compose up"; }

wait_healthy() {
    local deadline=$((SECONDS + 180)) service id state
    for service in redis postgres worker-orchestrate worker-model worker-tools worker-sandbox scheduler flower; do
        while :; do
            id=$(container "$service")
            state=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id" 2>/dev/null || echo missing)
            [ "$state" = healthy ] || [ "$state" = running ] && break
            [ $SECONDS -lt $deadline ] || fail "$service is $state after 180 s"
            sleep 2
        done
        say "  $service: $state"
    done
}
wait_healthy

json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print($1)"; }

say "2. a run from start_execution to its terminal event"
SUPPORT=$(in_container worker-model python /app/src/drive.py support)
[ "$(echo "$SUPPORT" | json 'd["outcome"]')" = completed ] || fail "support run: $SUPPORT"
echo "$SUPPORT" | json '"tool_execution_stop" in d["events"] and d["events"][-1] == "run_stop"' | grep -q True \
    || fail "support run's events: $SUPPORT"
RUN_ID=$(echo "$SUPPORT" | json 'd["run_id"]')
say "  run $RUN_ID completed: $(echo "$SUPPORT" | json 'len(d["events"])') events, response: $(echo "$SUPPORT" | json 'd["response"]')"

say "3. Flower: a password, and the run's tasks by id"
FLOWER_CHECK=$(cat <<'PY'
import base64, json, os, sys, time, urllib.error, urllib.request
run_id = sys.argv[1]
url = "http://127.0.0.1:5555/api/tasks?limit=100"
try:
    urllib.request.urlopen(url, timeout=10)
    sys.exit("Flower answered without a password")
except urllib.error.HTTPError as error:
    assert error.code == 401, error.code
token = base64.b64encode(os.environ["FLOWER_BASIC_AUTH"].encode()).decode()
request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
for _ in range(30):  # Flower turns task events on every few seconds, then keeps what it sees
    tasks = json.load(urllib.request.urlopen(request, timeout=10)).values()
    ours = [t for t in tasks if t["name"] == "lg.model_turn" and run_id in str(t["args"])]
    if ours:
        break
    time.sleep(1)
else:
    sys.exit(f"Flower lists no lg.model_turn task of run {run_id}")
print(json.dumps({"tasks": len(ours), "args": ours[0]["args"], "state": ours[0]["state"]}))
PY
)
FLOWER=$(in_container flower python -c "$FLOWER_CHECK" "$RUN_ID") || fail "flower: $FLOWER"
say "  $FLOWER"

say "4. SIGKILL of the whole tools worker in the middle of a tool call"
SLOW_ID=$(in_container worker-model python /app/src/drive.py start-slow | json 'd["run_id"]')
sleep 2  # the first 4 s tool call is running now
compose kill -s SIGKILL worker-tools >/dev/null 2>&1
say "  killed worker-tools during run $SLOW_ID; starting a replacement"
compose up -d --no-build worker-tools >/dev/null 2>&1
SLOW=$(in_container worker-model python /app/src/drive.py wait "$SLOW_ID")
[ "$(echo "$SLOW" | json 'd["outcome"]')" = completed ] || fail "killed run: $SLOW"
say "  run $SLOW_ID completed $(echo "$SLOW" | json 'd["waited_s"]') s after the kill; tool events: $(echo "$SLOW" | json '" ".join(d["tool_events"])')"
say "passed"
