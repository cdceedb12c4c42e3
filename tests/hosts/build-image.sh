#!/usr/bin/env bash
# Build the Debian 12 systemd test-host image from the Debian mirror (no registry needed).
# Rebuilt only when this script or the machine's extra CA certificates change.
set -euo pipefail
. "$(dirname "$0")/env.sh"
mirror="${MIRROR:-http://deb.debian.org/debian}"
hash=$(cat "$0" /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)
if podman image exists "$KVFLEET_IMAGE" && [ "$(podman image inspect --format \
    '{{ index .Config.Labels "kvfleet.hash" }}' "$KVFLEET_IMAGE")" = "$hash" ]; then
  echo "$KVFLEET_IMAGE up to date"; exit 0
fi
t0=$(date +%s)
# Hooks: trust the machine's extra CAs (HTTPS goes through a re-signing proxy), keep apt timers
# from grabbing the lock mid-test, empty machine-id (made at boot), and an old apt stamp so that
# cache_valid_time does not skip the first update on an image without package lists.
mmdebstrap --mode=root --variant=minbase \
  --include=systemd,systemd-sysv,dbus,python3,python3-venv,python3-apt,python3-packaging,cron,sudo,iproute2,curl,ca-certificates,procps,libnuma1,libgomp1,openssh-server,prometheus-node-exporter \
  --aptopt='Acquire::Retries "3"' \
  --customize-hook='mkdir -p "$1/usr/local/share/ca-certificates"' \
  --customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/" 2>/dev/null || true' `# none to copy is fine` \
  --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
  --customize-hook='chroot "$1" systemctl disable apt-daily.timer apt-daily-upgrade.timer' \
  --customize-hook='chroot "$1" systemctl mask getty@tty1.service' \
  `# sshd is not a service here: Ansible reaches a host through 'podman exec -i HOST sshd -i'` \
  `# (the scenarios' connection_options); the host keys are made once, in the image` \
  --customize-hook='chroot "$1" systemctl disable ssh.service ssh.socket' \
  --customize-hook='chroot "$1" ssh-keygen -A >/dev/null' \
  `# the login of the fleet scenario: an administrator (group sudo) that escalates with sudo, no password` \
  `# ('*', not the locked '!': sshd without PAM refuses a locked account even with a key)` \
  --customize-hook='chroot "$1" useradd --create-home --shell /bin/bash --groups sudo --password "*" kvops' \
  --customize-hook='install -d -m 0700 "$1/home/kvops/.ssh" && chroot "$1" chown kvops:kvops /home/kvops/.ssh' \
  --customize-hook='echo "kvops ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/kvops" && chmod 0440 "$1/etc/sudoers.d/kvops"' \
  `# node_exporter serves the monitor's textfiles to the fleet scenario's Prometheus (port 9100)` \
  --customize-hook='chroot "$1" systemctl enable prometheus-node-exporter.service' \
  --customize-hook=': > "$1/etc/machine-id"' \
  --customize-hook='mkdir -p "$1/var/lib/apt/periodic" && touch -d @0 "$1/var/lib/apt/periodic/update-success-stamp"' \
  bookworm - "$mirror" \
| podman import --change 'CMD ["/lib/systemd/systemd"]' --change 'STOPSIGNAL SIGRTMIN+3' \
    --change 'ENV container=podman' --change "LABEL kvfleet.hash=$hash" - "$KVFLEET_IMAGE"
podman image prune -f >/dev/null
echo "image $KVFLEET_IMAGE built in $(( $(date +%s) - t0 ))s"
