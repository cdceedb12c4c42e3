#!/usr/bin/env bash
# The release path: build the collection tarball, check what is (not) in it, install it into an
# empty collections path, and use it from there: ansible-doc on every plugin and role, one module
# run against a real vLLM capture served over HTTP, and the execution-environment definition
# through ansible-builder create.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
# cleanup: the HTTP server may not have been started yet, or already be gone
work=$(mktemp -d); trap 'kill $srv 2>/dev/null || true; rm -rf "$work"' EXIT; srv=
cd "$KVFLEET_COLLECTION_COPY"
ansible-galaxy collection build --force --output-path "$work/dist" >/dev/null
tarball=$(ls "$work"/dist/kvfleet-vllm-*.tar.gz)
echo "built $(basename "$tarball") ($(du -k "$tarball" | cut -f1) KiB, $(tar -tzf "$tarball" | wc -l) entries)"
tar -tzf "$tarball" > "$work/list"
for unwanted in tests/ tools/ molecule/ benchmarks/ .ci/ .git/ collections/ .ansible-lint .whl .pytest_cache; do
  if grep -q "^$unwanted" "$work/list"; then echo "FAIL: $unwanted is in the tarball" >&2; exit 1; fi
done
for wanted in MANIFEST.json FILES.json README.md meta/runtime.yml meta/execution-environment.yml \
    requirements.txt bindep.txt plugins/modules/cache_gate.py plugins/module_utils/_diagnosis.py \
    roles/server/meta/argument_specs.yml roles/server/README.md playbooks/deploy.yml \
    roles/rollout/tasks/lb_hook.yml docs/kv-cache.md changelogs/changelog.yaml CHANGELOG.rst LICENSE; do
  grep -qx "$wanted" "$work/list" || { echo "FAIL: $wanted is missing from the tarball" >&2; exit 1; }
done

# an empty collections path: nothing but the tarball's contents can be found
mkdir -p "$work/empty"
export ANSIBLE_COLLECTIONS_PATH="$work/empty" ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
cd "$work"   # away from the source tree: nothing but the installed copy can be found
ansible-galaxy collection install --offline -p "$work/empty" "$tarball" >/dev/null
test -f "$work/empty/ansible_collections/kvfleet/vllm/plugins/modules/metrics_info.py"
modules=$(ansible-doc -t module -l kvfleet.vllm | awk '{print $1}' | sort | xargs)
[ "$modules" = "kvfleet.vllm.analysis_load kvfleet.vllm.cache_gate kvfleet.vllm.canary_analysis kvfleet.vllm.gpu_info kvfleet.vllm.lora_adapter kvfleet.vllm.metrics_info kvfleet.vllm.model_fetch kvfleet.vllm.model_store" ] ||
  { echo "FAIL: installed modules are: $modules" >&2; exit 1; }
n=0
for t in module filter role; do
  for p in $(ansible-doc -t "$t" -l kvfleet.vllm | grep -o '^kvfleet\.vllm\.[a-z_]*'); do
    ansible-doc -t "$t" "$p" > "$work/doc.txt"
    grep -q "EXAMPLES\|ENTRY POINT\|Entry point" "$work/doc.txt" || { echo "FAIL: $t $p has no examples/entry points" >&2; exit 1; }
    n=$((n + 1))
  done
done
echo "ansible-doc rendered $n plugins and roles from the installed copy"

# the README's other way: straight from a clone, as an infrastructure-as-code repository's
# requirements file names it (type: dir), into a second empty path
mkdir -p "$work/from-clone"
printf -- '---\ncollections:\n  - name: %s\n    type: dir\n' "$KVFLEET_COLLECTION_COPY" > "$work/clone-req.yml"
ANSIBLE_COLLECTIONS_PATH="$work/from-clone" \
  ansible-galaxy collection install --offline -r "$work/clone-req.yml" -p "$work/from-clone" >/dev/null
ANSIBLE_COLLECTIONS_PATH="$work/from-clone" ansible-doc -t filter kvfleet.vllm.vllm_instances | grep -q "one model" ||
  { echo "FAIL: the collection installed from a clone has no vllm_instances filter" >&2; exit 1; }
echo "installed from a clone through a requirements file (type: dir): ansible-doc works there"

# one module, from the installed copy, against a capture of a real vLLM 0.32.0 (cap2 condition)
mkdir -p "$work/www"; cp "$KVFLEET_ROOT/tests/fixtures/metrics/vllm-0.32.0-cpu-cap2-2.txt" "$work/www/metrics"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/www" >/dev/null 2>&1 & srv=$!
for _ in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/metrics')" 2>/dev/null && break; sleep 0.2; done
# only ansible-core's own callback: the empty collections path has no ansible.posix
ANSIBLE_CALLBACK_RESULT_FORMAT=json ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0 \
  ansible localhost -m kvfleet.vllm.metrics_info -a "url=http://127.0.0.1:$port" > "$work/run.txt"
python3 - "$work/run.txt" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
res = json.loads(text[text.index("{"):])
m = res["metrics"]
assert not res.get("failed"), res
assert (m["requests_running"], m["requests_waiting"], m["block_size"], m["num_gpu_blocks"]) == (2, 30, 32, 256), m
print("metrics_info from the installed copy: running=%s waiting=%s kv_cache_usage=%s"
      % (m["requests_running"], m["requests_waiting"], m["kv_cache_usage"]))
PY

# the execution environment definition, as ansible-builder reads it (no image is built here)
cp -r "$KVFLEET_COLLECTION_COPY/docs/ee" "$work/ee-src"; cp "$tarball" "$work/ee-src/kvfleet-vllm.tar.gz"
# `create` has no --container-runtime; its file name otherwise follows which runtime is on PATH
# (Dockerfile when docker is and podman is not): ask for the name, as `create --help` documents.
ansible-builder create -f "$work/ee-src/execution-environment.yml" --context "$work/ee" \
  --output-filename Containerfile >/dev/null
test -f "$work/ee/Containerfile"
grep -q "ansible-galaxy collection install" "$work/ee/Containerfile" || grep -q "install-from-bindep\|assemble" "$work/ee/Containerfile"
test -f "$work/ee/_build/collections/kvfleet-vllm.tar.gz"
echo "ansible-builder create: build context written from docs/ee/execution-environment.yml"
