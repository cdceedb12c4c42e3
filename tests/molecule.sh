#!/usr/bin/env bash
# Molecule scenarios on Podman systemd hosts.
#   bash tests/molecule.sh [scenario ...]                 molecule test, each scenario
#   bash tests/molecule.sh --section SCENARIO NAME[,NAME]  molecule converge (create and prepare
#       first when the hosts are not there), then only those sections of its verify.yml (their
#       tags); the hosts stay up for the next rerun (bash tests/demo.sh down or molecule destroy)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
. "$HERE/hosts/env.sh"
bash "$HERE/hosts/setup-host.sh"
bash "$HERE/hosts/build-image.sh"
# the fleet's hosts start with the pinned vLLM in place (one install, not one per host)
if [[ " $* " == *" fleet "* ]] || [ $# -eq 0 ]; then bash "$HERE/hosts/build-vllm-image.sh"; fi
# Molecule keeps its state under $HOME (.ansible/tmp, .cache): give it one of ours
export HOME="$HOSTS_STATE/home"; mkdir -p "$HOME"
[ -z "$KVFLEET_ARTIFACTS" ] || mkdir -p "$KVFLEET_ARTIFACTS"
scenarios="${*:-server fleet}"
# the fleet scenario's verify starts a router host of its own (not a Molecule platform); only a
# run of that scenario removes it (tests/run.sh runs the two scenarios side by side)
if [[ " $scenarios " == *" fleet "* ]]; then
  # cleanup only: verify.yml removes the host itself when it passes, so it is usually gone; the
  # scenario's own result is molecule's exit code, which this trap does not change
  trap 'podman rm -f -t 5 kvfleet-router >/dev/null 2>&1 || true' EXIT
fi
cd "$KVFLEET_COLLECTION_COPY"
# the time before each task, play and handler line: a CI log then shows where a scenario's time went
stamp() {
  local l
  while IFS= read -r l; do
    case $l in "TASK ["*|"PLAY ["*|"RUNNING HANDLER ["*|INFO*) printf '%(%T)T %s\n' -1 "$l" ;; *) printf '%s\n' "$l" ;; esac
  done
}
if [ "${1:-}" = --section ]; then
  s=$2; tags=$3
  molecule converge -s "$s" 2>&1 | stamp
  # the scenario's ephemeral folder, where Molecule (26) keeps its inventory and ansible.cfg
  roots=(); for r in "${ANSIBLE_HOME:-$HOME/.ansible}/tmp" "$HOME/.cache"; do [ ! -d "$r" ] || roots+=("$r"); done
  eph=; [ ${#roots[@]} -eq 0 ] || eph=$(find "${roots[@]}" -maxdepth 3 -type d -name "molecule.*.$s" -print -quit)
  [ -n "$eph" ] && [ -f "$eph/ansible.cfg" ] || { echo "no Molecule state for scenario $s under $HOME/.ansible/tmp" >&2; exit 1; }
  t0=$(date +%s)
  # what Molecule's verify sets, with the sections' tags (tags are no Molecule option)
  ANSIBLE_CONFIG="$eph/ansible.cfg" MOLECULE_EPHEMERAL_DIRECTORY="$eph" MOLECULE_SCENARIO_NAME="$s" \
    MOLECULE_SCENARIO_DIRECTORY="$PWD/molecule/$s" MOLECULE_PROJECT_DIRECTORY="$PWD" \
    ansible-playbook -i "$eph/inventory" "molecule/$s/verify.yml" --tags "$tags" 2>&1 | stamp
  echo "TIMING molecule $s sections $tags $(( $(date +%s) - t0 ))s"
  exit 0
fi
for s in $scenarios; do
  t0=$(date +%s)
  if [ "${MOLECULE_STEPS:-}" = 1 ]; then
    # `molecule check` alone runs a converge first; a check-mode converge on the fresh host is
    # what `molecule test` does with this scenario's test_sequence.
    for step in destroy create prepare check converge idempotence verify destroy; do
      t=$(date +%s)
      if [ "$step" = check ]; then molecule converge -s "$s" -- --check; else molecule "$step" -s "$s"; fi 2>&1 | stamp
      echo "TIMING molecule $s $step $(( $(date +%s) - t ))s"
    done
  else
    molecule test -s "$s" 2>&1 | stamp
  fi
  echo "TIMING molecule $s $(( $(date +%s) - t0 ))s"
done
