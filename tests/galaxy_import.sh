#!/usr/bin/env bash
# Galaxy's own importer on the built tarball, as Galaxy runs it on upload (galaxy-importer, with
# ansible-lint; ansible-test is off: it needs a container registry), before a release
# (docs/release.md). Fails on any warning or error line of its log.
#   bash tests/galaxy_import.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/env.sh"
importer="$KVFLEET_CACHE/tools-importer"
version="${KVFLEET_IMPORTER_VERSION:-0.4.44}"
if [ "$(cat "$importer/.stamp" 2>/dev/null)" != "$version" ]; then
  rm -rf "$importer"; python3.11 -m venv "$importer"
  "$importer/bin/pip" install -q "galaxy-importer==$version" > "$importer.log" 2>&1 ||
    { cat "$importer.log"; exit 1; }
  echo "$version" > "$importer/.stamp"
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
bash "$HERE/setup.sh" tools copy >/dev/null
(cd "$KVFLEET_COLLECTION_COPY" && ansible-galaxy collection build --force --output-path "$work" >/dev/null)
mkdir -p "$work/tmp"
cat > "$work/importer.cfg" <<EOF
[galaxy-importer]
RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_LINT = True
RUN_FLAKE8 = False
TMP_ROOT_DIR = $work/tmp
EOF
# its own venv first on PATH: the importer runs ansible-doc and ansible-lint from there
(cd "$work" && PATH="$importer/bin:$PATH" GALAXY_IMPORTER_CONFIG="$work/importer.cfg" \
  "$importer/bin/python" -m galaxy_importer.main "$work"/kvfleet-vllm-*.tar.gz) > "$work/import.log" 2>&1 ||
  { cat "$work/import.log"; echo "FAIL: galaxy-importer refused the tarball" >&2; exit 1; }
if grep -iE "warning|error" "$work/import.log"; then
  echo "FAIL: galaxy-importer warned (above)" >&2; exit 1
fi
grep -q "Importer processing completed successfully" "$work/import.log"
echo "GALAXY IMPORT PASS: galaxy-importer $version, $(grep -c '^Loading ' "$work/import.log") contents, no warning"
