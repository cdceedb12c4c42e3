# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vLLM's LoRA answers, read defensively (the lora_adapter module's parsing).

Facts from vLLM 0.32.0 (entrypoints/openai/models/serving.py, serve/lora/api_router.py):
/v1/models lists each adapter with `root` (its folder) and `parent` (the base model); a load or
unload answers 200 with plain text, an error with {"error": {"message", "code"}}, a route that
is not registered (no VLLM_ALLOW_RUNTIME_LORA_UPDATING) with FastAPI's {"detail": "Not Found"}.
"""

from __future__ import annotations

import json

__all__ = ["answer_text", "completion_text", "loaded_adapters"]


def _json(body):
    try:
        return json.loads(body.decode("utf-8", "replace") if isinstance(body, bytes) else body)
    except (ValueError, RecursionError):
        return None


def loaded_adapters(body):
    """/v1/models -> {adapter name: folder}. Raises ValueError when it is not a model list."""
    data = _json(body)
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        raise ValueError("not an OpenAI model list")
    out = {}
    for item in models:
        # an adapter has a parent (the base model it applies to); the base model has none
        if isinstance(item, dict) and isinstance(item.get("id"), str) and item.get("parent"):
            root = item.get("root")
            out[item["id"]] = root if isinstance(root, str) else None
    return out


def answer_text(status, body, error=None):
    """Why a request failed, in words: vLLM's error message, else the body's start."""
    if status is None:
        return error or "no answer"
    data = _json(body) if body else None
    message = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
        elif isinstance(data.get("detail"), str):
            message = data["detail"]
    if message is None:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
        message = " ".join(text.split())[:300] or error or ""
    return "HTTP %s: %s" % (status, message[:500])


def completion_text(body):
    """The first choice's text of a /v1/completions answer, None when there is none."""
    data = _json(body)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    text = choices[0].get("text")
    return text if isinstance(text, str) else None
