#!/usr/bin/env bash
# Device check (a machine with an NVIDIA GPU; not CI): gpu_info and the GPU preflight against
# real NVML. Carries ansible-core as wheels in .whl/ (see tests/device/README.md).
set -uo pipefail
OUT="${OUT:-/tmp/kvfleet-device}"; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"
mkdir -p /tmp/ac/ansible_collections/kvfleet && ln -sfn "$PWD" /tmp/ac/ansible_collections/kvfleet/vllm
export ANSIBLE_COLLECTIONS_PATH=/tmp/ac ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0
{ nvidia-smi; python3 -c 'import pynvml, sys; print("nvidia-ml-py", pynvml.__file__, sys.version)'; } 2>&1 | tee "$OUT/env.txt"
start=$(date +%s)
python3 /tmp/site/bin/ansible localhost -m kvfleet.vllm.gpu_info -e ansible_python_interpreter=python3 2>&1 | tee "$OUT/gpu_info_adhoc.txt"
echo "gpu_info ad hoc: $(( $(date +%s) - start )) s" | tee -a "$OUT/timing.txt"
start=$(date +%s)
python3 /tmp/site/bin/ansible-playbook tests/device/gpu_check.yml -e ansible_python_interpreter=python3 2>&1 | tee "$OUT/playbook.txt"
rc=${PIPESTATUS[0]}
echo "playbook rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/timing.txt"
exit "$rc"
