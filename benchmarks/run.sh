#!/usr/bin/env bash
# Benchmarks of kvfleet.vllm against the alternatives, in the same run. README "Benchmarks".
#   bash benchmarks/run.sh                 all but the fleet rollout; writes benchmarks/RESULTS.md + results.json
#   bash benchmarks/run.sh --fleet         also the rollout and the router on the demo fleet (bash tests/demo.sh up first)
#   bash benchmarks/run.sh --smoke --out DIR   one repetition, smallest sizes (what CI runs)
#   bash benchmarks/run.sh --only scrape,capacity
#   bash benchmarks/run.sh --only fleetdiag  diagnose per host vs from the controller, 100 and 1000 hosts (~10 min)
#   bash benchmarks/run.sh --only fleetcheck --fleetcheck-sizes 100   deploy --check over aliases of the demo fleet
#   ... --baseline REV   rollout, fleetcheck and fleetdiag also with the collection as it was at REV
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/../tests/env.sh"
. "$HERE/../tests/hosts/env.sh"   # the rollout benchmark reaches the demo fleet through podman
bash "$HERE/../tests/setup.sh" tools vllm model copy >/dev/null
export PYTHONPATH="$KVFLEET_COLLECTIONS:$KVFLEET_ROOT/tests/support"
exec "$KVFLEET_TOOLS/bin/python" -u "$HERE/bench.py" "$@"
