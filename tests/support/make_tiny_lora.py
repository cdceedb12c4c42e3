"""Write a tiny, deterministic PEFT-format LoRA adapter for the kvfleet tiny Llama.

Usage: make_tiny_lora.py OUTDIR [SEED] [--base BASE_MODEL_DIR] [--rank R]
                         [--targets q_proj,v_proj] [--scale S]

Writes OUTDIR/adapter_config.json and OUTDIR/adapter_model.safetensors with
PEFT's key naming (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight,
...lora_B.weight). Shapes are read from BASE_MODEL_DIR/config.json (default: the
tiny Llama: hidden 128, 2 layers, 4 heads, head_dim 32). Needs only stdlib,
torch and safetensors; no peft, no model download. Same seed -> same bytes.

lora_A: [r, in_features], lora_B: [out_features, r] (PEFT/nn.Linear layout).
Unlike a fresh PEFT adapter (lora_B = 0), lora_B is random non-zero so the
adapter actually changes the output (useful to see that it was applied).
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file

DEFAULT_BASE = "/var/tmp/kvfleet/tiny-llama"
# Llama module -> (in_features, out_features) from config
ATTN = {"q_proj", "k_proj", "v_proj", "o_proj"}
MLP = {"gate_proj", "up_proj", "down_proj"}


def shapes(cfg, mod):
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // nh
    nkv = cfg.get("num_key_value_heads", nh)
    inter = cfg["intermediate_size"]
    return {
        "q_proj": (h, nh * hd),
        "k_proj": (h, nkv * hd),
        "v_proj": (h, nkv * hd),
        "o_proj": (nh * hd, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }[mod]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outdir")
    p.add_argument("seed", nargs="?", type=int, default=0)
    p.add_argument("--base", default=DEFAULT_BASE,
                   help="base model dir (its config.json gives the shapes; "
                        "written as base_model_name_or_path)")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--alpha", type=int, default=16)
    p.add_argument("--targets", default="q_proj,v_proj")
    p.add_argument("--scale", type=float, default=0.05,
                   help="std of the random weights")
    a = p.parse_args(argv)

    with open(os.path.join(a.base, "config.json")) as f:
        cfg = json.load(f)
    targets = [t.strip() for t in a.targets.split(",") if t.strip()]
    for t in targets:
        if t not in ATTN | MLP:
            sys.exit(f"unsupported target module {t!r}")
    parent = {t: ("self_attn" if t in ATTN else "mlp") for t in targets}

    g = torch.Generator().manual_seed(a.seed)
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for t in targets:
            fin, fout = shapes(cfg, t)
            pre = f"base_model.model.model.layers.{layer}.{parent[t]}.{t}"
            tensors[f"{pre}.lora_A.weight"] = (
                torch.randn(a.rank, fin, generator=g) * a.scale).to(torch.float32)
            tensors[f"{pre}.lora_B.weight"] = (
                torch.randn(fout, a.rank, generator=g) * a.scale).to(torch.float32)

    conf = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": a.base,
        "r": a.rank,
        "lora_alpha": a.alpha,
        "lora_dropout": 0.0,
        "target_modules": targets,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
        "revision": None,
    }
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "adapter_config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(tensors, os.path.join(a.outdir, "adapter_model.safetensors"),
              metadata={"format": "pt"})
    # safetensors creates the file 0600; make both files world-readable so a
    # server running as another user (e.g. a vllm service account) can read them.
    for n in ("adapter_config.json", "adapter_model.safetensors"):
        os.chmod(os.path.join(a.outdir, n), 0o644)
    print(f"wrote {a.outdir}: {len(tensors)} tensors, r={a.rank}, "
          f"targets={targets}, seed={a.seed}")


if __name__ == "__main__":
    main()
