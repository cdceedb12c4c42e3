#!/usr/bin/env bash
# The local demo: three Podman systemd hosts running real vLLM CPU with a tiny model, deployed by
# kvfleet.vllm.deploy and diagnosed by kvfleet.vllm.diagnose.
#   bash tests/demo.sh up      (first run on a fresh machine: ~15 min, mostly downloads)
#   bash tests/demo.sh down    (removes the three hosts)
#   bash tests/demo.sh env     (the demo fleet's inventory and the exports that reach it)
#   bash tests/demo.sh play PLAYBOOK [ansible-playbook args]
#                              (any of the collection's playbooks against the demo fleet, e.g.
#                               play diagnose -e vllm_diagnose_report_dir=./report)
# The report lands in $KVFLEET_DEMO_REPORT (default ./kvfleet-report).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
. "$HERE/hosts/env.sh"
export KVFLEET_DEMO_REPORT="${KVFLEET_DEMO_REPORT:-$PWD/kvfleet-report}"
say() { printf '\n==> [demo %s] %s\n' "$(date +%T)" "$*"; }
# molecule_fleet STEP [-- ansible-playbook args]. Molecule 26 looks up a 'default' scenario for
# shared state on every scenario command and logs "CRITICAL 'molecule/default/molecule.yml' glob
# failed" when there is none (there is none here; it carries on): that one line is dropped, and
# pipefail keeps molecule's exit status. grep -v exits 1 when every line was dropped, which is
# fine; 2 (grep itself failed) is not.
molecule_fleet() {
  (export HOME="$HOSTS_STATE/home"; mkdir -p "$HOME"; cd "$KVFLEET_COLLECTION_COPY" &&
   molecule "$1" -s fleet "${@:2}" 2>&1 |
     { grep --line-buffered -v "^CRITICAL 'molecule/default/molecule.yml' glob failed" || [ $? -eq 1 ]; })
}

# The fleet scenario's Molecule state: Molecule 26 keeps it in $ANSIBLE_HOME (default
# $HOME/.ansible)/tmp/molecule.<checksum of the project folder's name>.<scenario>
# (molecule/scenario.py, ephemeral_directory), older Molecule in
# $HOME/.cache/molecule/<project>/<scenario>; HOME is the one molecule_fleet gives it. Its
# inventory/ folder is what Molecule passes to ansible-playbook, its ansible.cfg the settings.
demo_state() {
  local home="$HOSTS_STATE/home" found
  found=$(ls -1dt "${ANSIBLE_HOME:-$home/.ansible}"/tmp/molecule.*.fleet \
             "$home/.cache/molecule/$(basename "$KVFLEET_COLLECTION_COPY")/fleet" 2>/dev/null | head -n 1)
  if [ -z "$found" ] || [ ! -f "$found/inventory/ansible_inventory.yml" ]; then
    echo "no demo fleet: bring it up first with bash tests/demo.sh up" >&2; return 1
  fi
  printf '%s\n' "$found"
}
# The exports ansible-playbook needs to reach the demo hosts as Molecule does: its config, this
# collection's copy, podman's configuration (the SSH ProxyCommand runs podman exec) and the tools.
demo_env() {
  local state
  state=$(demo_state) || return 1
  printf 'export %s=%q\n' HOME "$HOSTS_STATE/home" ANSIBLE_CONFIG "$state/ansible.cfg" \
    ANSIBLE_COLLECTIONS_PATH "$KVFLEET_COLLECTIONS" MOLECULE_EPHEMERAL_DIRECTORY "$state" \
    CONTAINERS_CONF "$CONTAINERS_CONF" CONTAINERS_STORAGE_CONF "$CONTAINERS_STORAGE_CONF" \
    PATH "$PATH" KVFLEET_DEMO_INVENTORY "$state/inventory"
}

# The demo's deploys as users get them. The scenario's group vars turn the canary analysis off
# (its sections judge by the gate alone, or set their own windows) and pin every vLLM to core 1
# (CI runs the server scenario on core 0 beside it): the demo undoes both. Its three servers then
# share the machine's two cores alike: three cannot each have a core of their own on two, and
# sharing alike puts the canary and its baseline under the same contention; what a host's
# neighbours cost it before the change, the window before the change takes off the verdict
# (docs/canary-analysis.md).
DEMO_VARS='{"vllm_deploy_analysis_seconds": 300, "vllm_server_cpu_affinity": ""}'

case "${1:-up}" in
  up)
    say "1/6 tools, vLLM CPU wheels and the tiny model (cached after the first run)"
    bash "$HERE/setup.sh" tools vllm model wheelhouse copy
    say "2/6 Podman and the Debian 12 systemd image"
    bash "$HERE/hosts/setup-host.sh"
    bash "$HERE/hosts/build-image.sh"
    bash "$HERE/hosts/build-vllm-image.sh"
    say "3/6 three hosts: kvfleet-node1..3"
    molecule_fleet create
    molecule_fleet prepare
    say "4/6 ansible-playbook kvfleet.vllm.deploy (installs vLLM CPU, starts it, warms up, gates): a canary, then the rest"
    # the scenario deploys all three at once to save test time; extra vars beat its import vars
    molecule_fleet converge -- -e '{"vllm_deploy_serial": [1, "100%"]}' -e "$DEMO_VARS"
    say "5/6 a harmless change deployed as users get it (max_num_seqs 4 -> 5): node1 first, then the rest, each judged under traffic against the hosts not changed yet (the fleet is idle: the deploy sends its own bounded load; ~15 min)"
    mkdir -p "$KVFLEET_DEMO_REPORT"
    # a verdict that stops the deploy is a result the demo shows, not the end of the demo
    (eval "$(demo_env)" &&
     ansible-playbook -i "$KVFLEET_DEMO_INVENTORY" kvfleet.vllm.deploy -e "$DEMO_VARS" \
       -e '{"vllm_server_max_num_seqs": 5, "vllm_deploy_serial": [1, "100%"]}' \
       -e "vllm_deploy_report_dir=$KVFLEET_DEMO_REPORT") ||
      say "the deploy stopped: its summary above and the report say which host and why"
    say "6/6 node3 under a bounded load at its cap, then ansible-playbook kvfleet.vllm.diagnose"
    molecule_fleet side-effect
    say "reports: $KVFLEET_DEMO_REPORT/kvfleet-vllm-deploy.html (each host's canary verdict) and kvfleet-vllm-diagnosis.html (and .json)"
    say "try: . tests/hosts/env.sh && podman exec kvfleet-node1 kvfleet-vllm gate --url http://10.88.0.61:8000"
    say "or:  bash tests/demo.sh play kvfleet.vllm.rolling_restart   (any playbook; bash tests/demo.sh env for the inventory)"
    say "stop it with: bash tests/demo.sh down"
    ;;
  down)
    say "removing the demo hosts"
    molecule_fleet destroy
    ;;
  env)
    # eval "$(bash tests/demo.sh env)", then ansible-playbook -i "$KVFLEET_DEMO_INVENTORY" ...
    demo_env
    ;;
  play)
    [ $# -ge 2 ] || { echo "usage: bash tests/demo.sh play PLAYBOOK [ansible-playbook args]" >&2; exit 2; }
    playbook=$2
    # a playbook of the collection by its short name (diagnose) or full name; a file as it is
    [ -f "$playbook" ] || [[ $playbook == *.* ]] || playbook="kvfleet.vllm.$playbook"
    exports=$(demo_env) || exit 1
    eval "$exports"
    say "ansible-playbook -i $KVFLEET_DEMO_INVENTORY $playbook ${*:3}"
    exec ansible-playbook -i "$KVFLEET_DEMO_INVENTORY" "$playbook" "${@:3}"
    ;;
  *)
    echo "usage: bash tests/demo.sh up|down|env|play PLAYBOOK [args]" >&2; exit 2 ;;
esac
