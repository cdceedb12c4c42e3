"""tests/support/cpu_account.py: the kernel's acct_v3 records read back into a table by program."""

from __future__ import annotations

import importlib.util
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location(
    "cpu_account", os.path.join(HERE, "..", "..", "support", "cpu_account.py"))
cpu_account = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cpu_account)


def record(command, uid, utime, stime, version=3):
    """One acct_v3 record, CPU given as comp_t."""
    head = struct.pack("<BBHIIIIIIf", 0, version, 0, 0, uid, 0, 1, 1, 0, 0.0)
    return head + struct.pack("<HHHHHHHH", utime, stime, 0, 0, 0, 0, 0, 0) + command.encode().ljust(16, b"\0")


def test_comp_t_is_a_base_8_float():
    assert cpu_account.comp_t(150) == 150
    # exponent 1: mantissa x 8
    assert cpu_account.comp_t((1 << 13) | 1000) == 8000


def test_records_and_the_table(tmp_path):
    data = (record("ansible-playboo", 0, 250, 50) + record("ansible-playboo", 0, (1 << 13) | 100, 0)
            + record("python3.11", 999, 700, 100) + record("odd", 0, 9999, 0, version=2))
    assert list(cpu_account.records(data)) == [
        ("ansible-playboo", 0, 2.5, 0.5), ("ansible-playboo", 0, 8.0, 0.0), ("python3.11", 999, 7.0, 1.0)]
    path = tmp_path / "acct"
    path.write_bytes(data)
    lines = cpu_account.table(str(path)).splitlines()
    assert lines[2] == "| ansible-playboo | 0 | 2 | 10.5 | 0.5 | 58% |"
    assert lines[3] == "| python3.11 | 999 | 1 | 7.0 | 1.0 | 42% |"
    assert lines[-1] == "3 processes, 19 s of CPU"
