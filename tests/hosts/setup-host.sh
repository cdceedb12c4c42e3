#!/usr/bin/env bash
# Podman prerequisites for systemd test hosts on this kind of machine (root, no systemd as PID 1,
# hybrid cgroups, no CAP_SYS_RESOURCE). Each setting below answers an observed failure.
set -euo pipefail
. "$(dirname "$0")/env.sh"
need=(podman runc conmon netavark aardvark-dns catatonit iptables uidmap slirp4netns
      fuse-overlayfs mmdebstrap ca-certificates prometheus   # prometheus: for promtool
      openssh-client   # Ansible reaches the test hosts over SSH (tests/hosts/env.sh)
      chromium fonts-dejavu-core)   # headless browser: the fleet scenario renders the HTML report
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mkdir -p "$HOSTS_STATE"/{etc,storage,run,networks}
# put_file DEST: stdin into DEST, only if it differs, by rename: tests/run.sh's two lanes call
# this script while podman in another lane reads these files
put_file() {
  local tmp; tmp=$(mktemp "$1.XXXXXX"); cat > "$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else chmod 0644 "$tmp"; mv -f "$tmp" "$1"; fi
}
# hard RLIMIT_NOFILE here is 20000 and podman's default (1048576) cannot be set without
# CAP_SYS_RESOURCE; same for NPROC.
nofile=$(( $(ulimit -Hn) < 16384 ? $(ulimit -Hn) : 16384 ))
put_file "$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=16384:16384"]
[network]
network_config_dir = "$HOSTS_STATE/networks"
[engine]
# crun refuses this kernel's hybrid cgroup layout; no systemd/journald on the machine itself
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$HOSTS_STATE/run/libpod"
CONF
put_file "$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "overlay"
runroot = "$HOSTS_STATE/run/storage"
graphroot = "$HOSTS_STATE/storage"
CONF
# The key Ansible logs in to the test hosts with (Molecule mounts authorized_keys into them)
mkdir -p "$HOSTS_STATE/ssh"
[ -f "$HOSTS_STATE/ssh/id_ed25519" ] ||
  ssh-keygen -q -t ed25519 -N '' -C kvfleet-test-hosts -f "$HOSTS_STATE/ssh/id_ed25519"
# 0644: sshd reads it as the login user (kvops in the fleet scenario), and root owns the mount
cmp -s "$HOSTS_STATE/ssh/id_ed25519.pub" "$HOSTS_STATE/ssh/authorized_keys" ||
  install -m 0644 "$HOSTS_STATE/ssh/id_ed25519.pub" "$HOSTS_STATE/ssh/authorized_keys"
chmod 0644 "$HOSTS_STATE/ssh/authorized_keys"
echo "podman configured under $HOSTS_STATE"
