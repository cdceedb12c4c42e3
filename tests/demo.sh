#!/usr/bin/env bash
# The local demo: three Podman systemd hosts running real vLLM CPU with a tiny model, deployed by
# kvfleet.vllm.deploy and diagnosed by kvfleet.vllm.diagnose.
#   bash tests/demo.sh up      (first run on a fresh machine: ~15 min, mostly downloads)
#   bash tests/demo.sh down    (removes the three hosts)
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

case "${1:-up}" in
  up)
    say "1/5 tools, vLLM CPU wheels and the tiny model (cached after the first run)"
    bash "$HERE/setup.sh" tools vllm model wheelhouse copy
    say "2/5 Podman and the Debian 12 systemd image"
    bash "$HERE/hosts/setup-host.sh"
    bash "$HERE/hosts/build-image.sh"
    say "3/5 three hosts: kvfleet-node1..3"
    molecule_fleet create
    molecule_fleet prepare
    say "4/5 ansible-playbook kvfleet.vllm.deploy (installs vLLM CPU, starts it, warms up, gates): a canary, then the rest"
    # the scenario deploys all three at once to save test time; extra vars beat its import vars
    molecule_fleet converge -- -e '{"vllm_deploy_serial": [1, "100%"]}'
    say "5/5 ansible-playbook kvfleet.vllm.diagnose"
    molecule_fleet side-effect
    say "report: $KVFLEET_DEMO_REPORT/kvfleet-vllm-diagnosis.html (and .json)"
    say "try: . tests/hosts/env.sh && podman exec kvfleet-node1 kvfleet-vllm gate --url http://10.88.0.61:8000"
    say "stop it with: bash tests/demo.sh down"
    ;;
  down)
    say "removing the demo hosts"
    molecule_fleet destroy
    ;;
  *)
    echo "usage: bash tests/demo.sh up|down" >&2; exit 2 ;;
esac
