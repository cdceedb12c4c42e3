# Source me: points podman (and molecule, which shells out to it) at this project's podman config.
# The machine has no systemd of its own, so podman state lives in a folder of ours.
export HOSTS_STATE="${HOSTS_STATE:-${KVFLEET_CACHE:-/var/tmp/kvfleet}/podman}"
export CONTAINERS_CONF="$HOSTS_STATE/etc/containers.conf"
export CONTAINERS_STORAGE_CONF="$HOSTS_STATE/etc/storage.conf"
export KVFLEET_IMAGE="${KVFLEET_IMAGE:-localhost/kvfleet-debian-systemd:12}"
# the fleet scenario's hosts: the same with the pinned vLLM CPU in its venv (build-vllm-image.sh)
export KVFLEET_VLLM_IMAGE="${KVFLEET_VLLM_IMAGE:-localhost/kvfleet-debian-systemd-vllm:12}"
