#!/usr/bin/env bash
# The execution environment, built and used as AWX runs it: a base image made here from Debian
# packages (no container registry is reachable from this project's machines), the image built by
# ansible-builder from docs/ee/execution-environment.yml on that base, the collection checked
# inside it, then kvfleet.vllm.deploy run from it with ansible-navigator against the demo fleet
# (bash tests/demo.sh up first). docs/ee/README.md says what it shows and how long it takes.
#   bash tests/ee.sh            build, check, deploy through ansible-navigator
#   bash tests/ee.sh build      build and check only
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
. "$HERE/hosts/env.sh"
mode="${1:-all}"
tools="$KVFLEET_CACHE/tools-ee"
pins="ansible-builder==3.2.0 ansible-navigator==26.11.0"
base="${KVFLEET_EE_BASE:-localhost/kvfleet-ee-base:12}"
image="${KVFLEET_EE_IMAGE:-localhost/kvfleet-ee:dev}"
say() { printf '\n==> [ee %s] %s\n' "$(date +%T)" "$*"; }
t_all=$(date +%s)

if [ "$(cat "$tools/.stamp" 2>/dev/null)" != "$pins" ]; then
  say "ansible-builder and ansible-navigator ($pins)"
  rm -rf "$tools"; python3.11 -m venv "$tools"
  # shellcheck disable=SC2086  # the pins are words
  "$tools/bin/pip" install -q $pins > "$tools.log" 2>&1 || { cat "$tools.log"; exit 1; }
  echo "$pins" > "$tools/.stamp"
fi

# The base: Debian 12's Python with pip, ssh for the managed hosts, the machine's extra CAs (HTTPS
# goes through a re-signing proxy here), pip allowed into the system Python (the image is the
# environment), and dnf's two verbs that ansible-builder's scripts use, on apt.
say "base image $base from the Debian mirror"
bash "$HERE/hosts/setup-host.sh" >/dev/null
mirror="${MIRROR:-http://deb.debian.org/debian}"
hash=$(sed -n '/^  mmdebstrap/,/^      --change/p' "$0" | cat - /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)
if podman image exists "$base" && [ "$(podman image inspect --format '{{ index .Config.Labels "kvfleet.hash" }}' "$base")" = "$hash" ]; then
  echo "$base up to date"
else
  t0=$(date +%s)
  mmdebstrap --mode=root --variant=minbase \
    --include=python3,python3-pip,python3-venv,python3-wheel,openssh-client,ca-certificates,git,sshpass \
    --aptopt='Acquire::Retries "3"' \
    --customize-hook='mkdir -p "$1/usr/local/share/ca-certificates"' \
    --customize-hook='for c in /usr/local/share/ca-certificates/*.crt; do if [ -e "$c" ]; then cp "$c" "$1/usr/local/share/ca-certificates/"; fi; done' \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='printf "%s\n" "#!/bin/sh" "# ansible-builder calls a dnf: its install and clean, on apt" \
        "case \"\$1\" in" \
        "  install) shift; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \$(printf \"%s\\n\" \"\$@\" | grep -v \"^-\") ;;" \
        "  clean) apt-get clean; rm -rf /var/lib/apt/lists/* ;;" \
        "  *) echo \"kvfleet-pkgmgr: \$1 is not known\" >&2; exit 1 ;;" \
        "esac" > "$1/usr/local/bin/kvfleet-pkgmgr" && chmod 0755 "$1/usr/local/bin/kvfleet-pkgmgr"' \
    bookworm - "$mirror" \
  | podman import --change 'CMD ["/bin/bash"]' --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
      --change "LABEL kvfleet.hash=$hash" - "$base" >/dev/null
  echo "$base built in $(( $(date +%s) - t0 ))s"
fi

say "ansible-builder build $image from docs/ee/execution-environment.yml on $base"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
bash "$HERE/setup.sh" tools copy >/dev/null
(cd "$KVFLEET_COLLECTION_COPY" && ansible-galaxy collection build --force --output-path "$work/dist" >/dev/null)
cp -r "$KVFLEET_COLLECTION_COPY/docs/ee" "$work/ee"
cp "$work"/dist/kvfleet-vllm-*.tar.gz "$work/ee/kvfleet-vllm.tar.gz"
# the definition as users get it, with this base and its package manager instead of Fedora's
python3 - "$work/ee/execution-environment.yml" "$base" <<'PY'
import sys, yaml
path, base = sys.argv[1], sys.argv[2]
with open(path) as f:
    ee = yaml.safe_load(f)
ee["images"]["base_image"]["name"] = base
ee.setdefault("options", {})["package_manager_path"] = "/usr/local/bin/kvfleet-pkgmgr"
ee["options"]["skip_pip_install"] = True   # Debian's pip is there; its ensurepip is disabled
with open(path, "w") as f:
    yaml.safe_dump(ee, f, sort_keys=False)
PY
t0=$(date +%s)
(cd "$work/ee" && "$tools/bin/ansible-builder" build -f execution-environment.yml --context "$work/ctx" \
   -t "$image" --container-runtime podman -v 1) > "$work/build.log" 2>&1 ||
  { tail -60 "$work/build.log"; echo "FAIL: ansible-builder build" >&2; exit 1; }
build_s=$(( $(date +%s) - t0 ))
echo "$image built in ${build_s}s ($(podman image inspect --format '{{ .Size }}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"

say "the collection inside the image"
inside=$(podman run --rm "$image" sh -c 'ansible --version | head -n 1; ansible-galaxy collection list kvfleet.vllm 2>/dev/null | grep "^kvfleet.vllm";
  ansible-doc -t module kvfleet.vllm.cache_gate | head -n 1; command -v ssh;
  if python3 -c "import pynvml" 2>/dev/null; then echo "host package: nvidia-ml-py"; fi
  for p in libnuma1 systemd; do if dpkg -s "$p" >/dev/null 2>&1; then echo "host package: $p"; fi; done')
echo "$inside"
grep -q "^kvfleet.vllm" <<<"$inside" || { echo "FAIL: kvfleet.vllm is not in the image" >&2; exit 1; }
grep -q "cache_gate" <<<"$inside" || { echo "FAIL: ansible-doc finds no cache_gate in the image" >&2; exit 1; }
grep -q "/ssh$" <<<"$inside" || { echo "FAIL: the image has no SSH client" >&2; exit 1; }
# the controller's image holds the controller's needs only
! grep -q "^host package" <<<"$inside" || { echo "FAIL: a managed host's package is in the controller's image" >&2; exit 1; }
[ "$mode" = build ] && { echo "EE BUILD PASS in $(( $(date +%s) - t_all ))s"; exit 0; }

# ---- a deploy through ansible-navigator, from the image, against the demo fleet
say "kvfleet.vllm.deploy through ansible-navigator, from $image, against the demo fleet"
eval "$(bash "$HERE/demo.sh" env)"
# The demo reaches its hosts through 'podman exec' (no podman in the image): inside the image they
# are reached over SSH at their addresses, an sshd of their own started for it (stopped after).
# The demo's inventory as it is (groups, group and host vars), the connection changed.
inv="$work/inventory"; mkdir -p "$inv" "$work/keydir"
cp -r "$KVFLEET_DEMO_INVENTORY/group_vars" "$KVFLEET_DEMO_INVENTORY/host_vars" "$inv/"
install -m 0600 "$HOSTS_STATE/ssh/id_ed25519" "$work/keydir/id_ed25519"
hosts=$(python3 - "$KVFLEET_DEMO_INVENTORY/ansible_inventory.yml" "$inv/hosts.yml" <<'PY'
import subprocess, sys, yaml
with open(sys.argv[1]) as f:
    src = yaml.safe_load(f)
out, seen = {}, set()
for group, body in src.items():
    if group == "all" or not (body or {}).get("hosts"):
        continue
    out[group] = {"hosts": {}}
    for host in body["hosts"]:
        seen.add(host)
        address = subprocess.check_output(["podman", "inspect", "--format",
                                           "{{ range .NetworkSettings.Networks }}{{ .IPAddress }}{{ end }}", host],
                                          text=True).strip()
        out[group]["hosts"][host] = {"ansible_host": address}
out["all"] = {"vars": {"ansible_user": "kvops", "ansible_ssh_private_key_file": "/runner/key/id_ed25519",
                       "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                       "ansible_ssh_pipelining": True}}
with open(sys.argv[2], "w") as f:
    yaml.safe_dump(out, f, sort_keys=False)
print(" ".join(sorted(seen)))
PY
)
for h in $hosts; do podman exec "$h" sh -c 'mkdir -p /run/sshd && /usr/sbin/sshd -o UsePAM=no -o PidFile=/run/sshd-ee.pid'; done
stop_sshd() { for h in $hosts; do podman exec "$h" sh -c 'if [ -f /run/sshd-ee.pid ]; then kill "$(cat /run/sshd-ee.pid)"; rm -f /run/sshd-ee.pid; fi'; done; }
trap 'stop_sshd; rm -rf "$work"' EXIT
# the scenario's files that its group vars name on the controller (the model and its manifest)
# at the same path; a change deployed (max_num_seqs, whatever the demo left), batch by batch
seqs=$(podman exec kvfleet-node1 sh -c "tr '\\0' ' ' < /proc/\$(systemctl show -P MainPID vllm-main.service)/cmdline" |
  sed -n 's/.*--max-num-seqs \([0-9]*\).*/\1/p')
new_seqs=$(( seqs == 4 ? 5 : 4 ))
# ansible-navigator refuses podman without /dev/mqueue (POSIX message queues), which a machine
# without systemd may lack: made here, mounted where the kernel allows it
# (navigator checks that the folder exists; where the kernel refuses the mount, as in an
# unprivileged container, the folder alone is what it asks for, and that is said)
if [ ! -d /dev/mqueue ]; then
  mkdir -p /dev/mqueue
  mount -t mqueue mqueue /dev/mqueue 2>/dev/null || echo "note: /dev/mqueue made, not mounted (the kernel refused the mount)"
fi
t0=$(date +%s)
# ansible-navigator hands ANSIBLE_* variables on to the image: this project's collections path and
# the demo's ansible.cfg are the controller's here, not the image's
(cd "$work" && env -u ANSIBLE_COLLECTIONS_PATH -u ANSIBLE_CONFIG "$tools/bin/ansible-navigator" run kvfleet.vllm.deploy -i "$inv" \
   --execution-environment-image "$image" --container-engine podman --pull-policy never --mode stdout \
   --execution-environment-volume-mounts "$work/keydir:/runner/key:Z" \
   --execution-environment-volume-mounts "$MOLECULE_EPHEMERAL_DIRECTORY:$MOLECULE_EPHEMERAL_DIRECTORY:Z" \
   --playbook-artifact-enable false --log-file "$work/navigator.log" \
   -e '{"vllm_deploy_hosts": "vllm", "vllm_deploy_analysis_seconds": 0, "vllm_server_cpu_affinity": ""}' \
   -e "{\"vllm_server_max_num_seqs\": $new_seqs}") > "$work/run.log" 2>&1 || {
  tail -80 "$work/run.log"; echo "FAIL: the deploy through ansible-navigator" >&2; exit 1; }
run_s=$(( $(date +%s) - t0 ))
grep -A6 "PLAY RECAP" "$work/run.log"
grep -q "failed=0" "$work/run.log" && ! grep -E "failed=[1-9]|unreachable=[1-9]" "$work/run.log" >/dev/null ||
  { echo "FAIL: a host failed or was unreachable" >&2; exit 1; }
now=$(podman exec kvfleet-node1 sh -c "tr '\\0' ' ' < /proc/\$(systemctl show -P MainPID vllm-main.service)/cmdline" |
  sed -n 's/.*--max-num-seqs \([0-9]*\).*/\1/p')
[ "$now" = "$new_seqs" ] || { echo "FAIL: node1 runs --max-num-seqs $now after the deploy of $new_seqs" >&2; exit 1; }
echo "EE PASS: built in ${build_s}s; max_num_seqs $seqs -> $new_seqs deployed through ansible-navigator in ${run_s}s; $(( $(date +%s) - t_all ))s in all"
