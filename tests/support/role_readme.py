"""Write each role's README.md from its meta/argument_specs.yml (the one source of the role's
interface: ansible-doc -t role reads the same file).

  python3 tests/support/role_readme.py          write roles/*/README.md
  python3 tests/support/role_readme.py --check  exit 1 if any README is out of date
"""

from __future__ import annotations

import json
import os
import re
import sys

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ROLES = os.path.join(ROOT, "roles")
INTERNAL = {"hosttools"}   # shipped by other roles; not for direct use
# applied by the collection's playbooks, an entry point per play: how, in a sentence
PLAYBOOK_ROLES = {"rollout": (
    "The `kvfleet.vllm.deploy` and `kvfleet.vllm.rolling_restart` playbooks apply it, one entry point"
    " per play (their batches need the play's `serial`); run those. A playbook of your own applies the"
    " entry points in the same order, as `playbooks/deploy.yml` does (`check`, `stage`, then `batch`):")}
MARKUP = [(re.compile(r"[CMORV]V?\(([^)]*)\)"), r"`\1`"), (re.compile(r"I\(([^)]*)\)"), r"*\1*"),
          (re.compile(r"L\(([^,]*),\s*([^)]*)\)"), r"[\1](\2)"), (re.compile(r"U\(([^)]*)\)"), r"<\1>")]


def text(value):
    """ansible-doc markup -> Markdown, one line."""
    if isinstance(value, list):
        value = " ".join(value)
    value = " ".join(str(value or "").split())
    for pattern, repl in MARKUP:
        value = pattern.sub(repl, value)
    return value.replace("|", "\\|")


def cell_default(spec):
    if "default" not in spec:
        return "**required**" if spec.get("required") else ""
    return "`%s`" % json.dumps(spec["default"]).replace("|", "\\|")


def rows(options, prefix=""):
    for name in sorted(options):
        spec = options[name] or {}
        kind = spec.get("type", "str")
        if spec.get("elements"):
            kind += " of " + spec["elements"]
        if spec.get("choices"):
            kind += " (" + ", ".join(str(c) for c in spec["choices"]) + ")"
        yield "| `%s%s` | %s | %s | %s |" % (
            prefix, name, kind, cell_default(spec), text(spec.get("description")))
        if spec.get("options"):
            sub = prefix + name + ("[]." if spec.get("type") == "list" else ".")
            yield from rows(spec["options"], sub)


def render(role):
    with open(os.path.join(ROLES, role, "meta", "argument_specs.yml"), encoding="utf-8") as f:
        specs = yaml.safe_load(f)["argument_specs"]
    main = specs["main"]
    out = ["# kvfleet.vllm.%s" % role, "",
           "<!-- Generated from meta/argument_specs.yml by tests/support/role_readme.py: edit that"
           " file, then run python3 tests/support/role_readme.py. -->", "",
           text(main.get("short_description")) + ".", ""]
    if role in INTERNAL:
        out += ["Internal: included by the other roles of the collection; not meant to be used"
                " on its own.", ""]
    out += [text(d) + "\n" for d in main.get("description") or []]
    # the login is an ordinary user with sudo (docs/playbooks.md): root for the role, not the play
    if role in PLAYBOOK_ROLES:
        out += ["## Use", "", PLAYBOOK_ROLES[role], "", "```yaml", "- name: Deploy batch by batch",
                "  hosts: gpu", "  serial: [1, \"25%\"]", "  max_fail_percentage: 0", "  tasks:",
                "    - name: Drain, change, verify, put back, judge; roll back on failure",
                "      ansible.builtin.import_role:", "        name: kvfleet.vllm.%s" % role,
                "        tasks_from: batch", "```", "",
                "`ansible-doc -t role kvfleet.vllm.%s` shows the same." % role, ""]
    else:
        out += ["## Use", "", "```yaml", "- name: Apply kvfleet.vllm.%s" % role, "  hosts: gpu",
                "  roles:", "    - role: kvfleet.vllm.%s" % role, "      become: true", "```", "",
                "`ansible-doc -t role kvfleet.vllm.%s` shows the same." % role, ""]
    for entry in ["main"] + sorted(e for e in specs if e != "main"):
        spec = specs[entry]
        title = "Variables" if entry == "main" else "Entry point `%s`" % entry
        out += ["## %s" % title, ""]
        if entry != "main":
            out += ["`tasks_from: %s`: %s." % (entry, text(spec.get("short_description"))), ""]
            out += [text(d) + "\n" for d in spec.get("description") or []]
            if spec.get("options") == main.get("options"):
                out += ["Takes the same variables as `main`.", ""]
                continue
            if not spec.get("options"):
                out += ["Reads the variables of `main`; checks none itself.", ""]
                continue
        out += ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
        out += list(rows(spec.get("options") or {}))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv):
    stale = []
    for role in sorted(os.listdir(ROLES)):
        path = os.path.join(ROLES, role, "README.md")
        want = render(role)
        have = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if have != want:
            stale.append(path)
            if "--check" not in argv:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(want)
    if "--check" in argv and stale:
        print("out of date (run python3 tests/support/role_readme.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
