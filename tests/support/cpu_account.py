"""Where a test run's CPU goes, by program, from the kernel's process accounting (acct(2)).

  python tests/support/cpu_account.py run FILE -- COMMAND [ARG ...]
      turn accounting on into FILE, run COMMAND, turn it off, print the table
  python tests/support/cpu_account.py report FILE [--top N]
      print the table of a FILE written before

Every process that ends while accounting is on is counted, in the Podman hosts too (the kernel
writes a container's processes to the accounting of every PID namespace above them), with its
user and system CPU, its command name (16 characters) and its user ID. A process still running
when accounting stops is not counted: run the command to its end (a section run leaves its hosts
up, so their vLLM servers are not in the table). acct(2) needs root (CAP_SYS_PACCT).

The table is by command name and user: on the test hosts `python3.11` as root is Ansible's
modules, `ansible-playboo` is the controller (the playbook and one forked worker per task and
host), vLLM runs as its service user. docs/testing.md shows what it found.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys

# struct acct_v3 (linux/acct.h): 64 bytes; CPU times as comp_t (13-bit mantissa, 3-bit base-8
# exponent) in units of AHZ (100 a second)
RECORD = 64
AHZ = 100.0


def comp_t(value):
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def records(data):
    """(command, uid, user seconds, system seconds) of each acct_v3 record."""
    for off in range(0, len(data) - RECORD + 1, RECORD):
        rec = data[off:off + RECORD]
        if rec[1] & 0x0F != 3:   # ac_version; the high bit is the byte order
            continue
        uid = struct.unpack_from("<I", rec, 8)[0]
        utime, stime = struct.unpack_from("<HH", rec, 32)
        command = rec[48:64].split(b"\0")[0].decode("utf-8", "replace")
        yield command, uid, comp_t(utime) / AHZ, comp_t(stime) / AHZ


def table(path, top=25):
    with open(path, "rb") as f:
        data = f.read()
    total = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for command, uid, user, system in records(data):
        row = total[(command, uid)]
        row[0] += user
        row[1] += system
        row[2] += 1
    cpu = sum(row[0] + row[1] for row in total.values())
    lines = ["| program | uid | processes | user s | system s | share |", "|---|---|---|---|---|---|"]
    for (command, uid), (user, system, count) in sorted(total.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        share = 100.0 * (user + system) / cpu if cpu else 0
        lines.append("| %s | %d | %d | %.1f | %.1f | %.0f%% |" % (command, uid, count, user, system, share))
    lines.append("")
    lines.append("%d processes, %.0f s of CPU" % (sum(row[2] for row in total.values()), cpu))
    return "\n".join(lines)


def accounting(path):
    """Turn process accounting on into path, or off (None)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "acct(%s): %s (needs root)" % (path, os.strerror(err)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run")
    run.add_argument("file")
    run.add_argument("command", nargs=argparse.REMAINDER)
    report = sub.add_parser("report")
    report.add_argument("file")
    for p in (run, report):
        p.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.what == "report":
        print(table(args.file, args.top))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run FILE -- COMMAND: no command")
    open(args.file, "ab").close()
    accounting(args.file)
    try:
        rc = subprocess.call(command)
    finally:
        accounting(None)
    print(table(args.file, args.top))
    return rc


if __name__ == "__main__":
    sys.exit(main())
