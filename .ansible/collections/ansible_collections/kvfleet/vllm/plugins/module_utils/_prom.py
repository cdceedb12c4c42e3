# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus text exposition format (0.0.4) parser.

Private to the collection. Pure Python, standard library only, so the same file runs inside
modules (shipped by Ansible) and on managed hosts (shipped by the monitor and restart roles).
"""

from __future__ import annotations

import math
import re

__all__ = ["PromParseError", "Sample", "parse", "repeated_series"]


class PromParseError(ValueError):
    """The text is not Prometheus exposition format; the message says what was found."""


class Sample(object):
    __slots__ = ("name", "labels", "value")

    def __init__(self, name, labels, value):
        self.name = name
        self.labels = labels
        self.value = value

    def __repr__(self):
        return "Sample(%r, %r, %r)" % (self.name, self.labels, self.value)

    def __eq__(self, other):
        return (isinstance(other, Sample) and self.name == other.name
                and self.labels == other.labels
                and (self.value == other.value
                     or (math.isnan(self.value) and math.isnan(other.value))))


_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_LABEL_START = _NAME_START - frozenset(":")
_LABEL_CHARS = _LABEL_START | frozenset("0123456789")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_SPECIAL_VALUES = {"nan": float("nan"), "+inf": float("inf"), "inf": float("inf"),
                   "-inf": float("-inf")}


def _excerpt(line, limit=80):
    line = line.strip()
    return line if len(line) <= limit else line[:limit] + "..."


def _what_is(text):
    """A short guess at what a non-metrics body is, for error messages."""
    head = text.lstrip()[:200].lower()
    if head.startswith("<!doctype html") or head.startswith("<html") or "<body" in head:
        return "an HTML page"
    if head.startswith("{") or head.startswith("["):
        return "a JSON document"
    if head.startswith("<"):
        return "an XML/HTML document"
    return "text that is not Prometheus exposition format"


def _read_name(line, pos, start_chars, chars):
    if pos >= len(line) or line[pos] not in start_chars:
        return None, pos
    end = pos + 1
    while end < len(line) and line[end] in chars:
        end += 1
    return line[pos:end], end


def _parse_labels(line, pos, lineno):
    """Parse '{a="b",c="d"}' starting at the '{'. Returns (labels, position after '}')."""
    labels = {}
    pos += 1
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        name, pos = _read_name(line, pos, _LABEL_START, _LABEL_CHARS)
        if pos >= n:
            raise PromParseError("line %d: the line ends inside its label set (truncated?): %r"
                                 % (lineno, _excerpt(line)))
        if name is None:
            raise PromParseError("line %d: bad label name in %r" % (lineno, _excerpt(line)))
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != "=":
            raise PromParseError("line %d: expected '=' after label %r in %r"
                                 % (lineno, name, _excerpt(line)))
        pos += 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != '"':
            raise PromParseError("line %d: label %r has no quoted value in %r"
                                 % (lineno, name, _excerpt(line)))
        pos += 1
        value = []
        while True:
            if pos >= n:
                raise PromParseError("line %d: unterminated label value (truncated?) in %r"
                                     % (lineno, _excerpt(line)))
            ch = line[pos]
            if ch == "\\":
                if pos + 1 >= n:
                    raise PromParseError("line %d: dangling escape in %r" % (lineno, _excerpt(line)))
                nxt = line[pos + 1]
                # Unknown escapes are kept verbatim, as the reference parser does.
                value.append(_ESCAPES.get(nxt, "\\" + nxt))
                pos += 2
                continue
            if ch == '"':
                pos += 1
                break
            value.append(ch)
            pos += 1
        if name in labels:
            raise PromParseError("line %d: duplicate label %r in %r" % (lineno, name, _excerpt(line)))
        labels[name] = "".join(value)
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == ",":
            pos += 1
            continue
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        raise PromParseError("line %d: expected ',' or '}' in label set of %r (truncated?)"
                             % (lineno, _excerpt(line)))


# The common line, matched in one regular expression instead of character by character (the
# parse was most of a fleet gate's CPU): a name, then an optional label set whose values have
# no escape and no space around its names, commas and equal signs. Anything else (and any
# line this does not fully account for) goes the character-by-character way, which decides
# the same lines the same way and says what is wrong with the others.
_LABEL_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_FAST_LINE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:%s(?:,%s)*,?)?)\})?' % (_LABEL_PAIR, _LABEL_PAIR))
_FAST_PAIRS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')


def _fast_head(line, pos):
    """(name, labels, position after them) for a common line, else None."""
    m = _FAST_LINE.match(line, pos)
    if m is None:
        return None
    end = m.end()
    if end < len(line) and line[end] == "{":
        return None   # a label set the expression does not take (escapes, spaces, errors)
    labels = {}
    if m.group(2):
        pairs = _FAST_PAIRS.findall(m.group(2))
        labels = dict(pairs)
        if len(labels) != len(pairs):
            return None   # a duplicate label: the other way names it
    return m.group(1), labels, end


def _parse_value(token, lineno, line):
    special = _SPECIAL_VALUES.get(token.lower())
    if special is not None:
        return special
    try:
        return float(token)
    except ValueError:
        raise PromParseError("line %d: %r is not a number in %r" % (lineno, token, _excerpt(line)))


def parse(text, fast=True):
    """Parse exposition text into (samples, types).

    samples: list of Sample in file order; types: {family name: type} from '# TYPE' lines.
    HELP/TYPE lines and comments may come in any order. Raises PromParseError on anything
    that is not exposition format, naming the line and what was found. `fast` False parses
    every line character by character (the tests compare both ways).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text.strip():
        raise PromParseError("the body is empty")
    samples = []
    types = {}
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            parts = stripped[1:].split(None, 3)
            if len(parts) >= 3 and parts[0] == "TYPE":
                types[parts[1]] = parts[2]
            continue
        pos = len(line) - len(line.lstrip())
        head = _fast_head(line, pos) if fast else None
        if head is not None:
            name, labels, pos = head
        else:
            name, pos = _read_name(line, pos, _NAME_START, _NAME_CHARS)
            if name is None:
                if lineno == 1 or not samples:
                    raise PromParseError("line %d: found %s, starting %r"
                                         % (lineno, _what_is(text), _excerpt(line)))
                raise PromParseError("line %d: bad metric name in %r" % (lineno, _excerpt(line)))
            labels = {}
            if pos < len(line) and line[pos] == "{":
                labels, pos = _parse_labels(line, pos, lineno)
        rest = line[pos:].split()
        if not rest:
            raise PromParseError("line %d: sample %r has no value (truncated?)" % (lineno, name))
        if len(rest) > 2:
            raise PromParseError("line %d: unexpected text after value in %r"
                                 % (lineno, _excerpt(line)))
        value = _parse_value(rest[0], lineno, line)
        if len(rest) == 2:
            # An optional timestamp in milliseconds; it must be an integer.
            try:
                int(rest[1])
            except ValueError:
                raise PromParseError("line %d: bad timestamp %r in %r"
                                     % (lineno, rest[1], _excerpt(line)))
        samples.append(Sample(name, labels, value))
    if not samples:
        raise PromParseError("found only comments, no samples")
    if not text.endswith("\n"):
        # The format ends every line with a newline; a body cut off mid-transfer does not.
        last = text.rsplit("\n", 1)[-1]
        if not last.lstrip().startswith("#"):
            raise PromParseError("the body does not end with a newline (truncated?); last line %r"
                                 % _excerpt(last))
    return samples, types


def repeated_series(samples):
    """Series (one name and label set) that appear more than once in one body, with every value.

    [(name, labels, [values in file order])], in the order of their first line. The format allows
    each series once per exposition; a scraper cannot tell which copy is right. Prometheus keeps
    one copy of a series repeated with a different value and drops the others, logging "Error on
    ingesting samples with different value but same timestamp" (scrape/scrape.go).
    """
    seen = {}
    for s in samples:
        seen.setdefault((s.name, frozenset(s.labels.items())), []).append(s)
    return [(copies[0].name, copies[0].labels, [c.value for c in copies])
            for copies in seen.values() if len(copies) > 1]
