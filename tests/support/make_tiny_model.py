"""Make a tiny random-weight Llama with a locally trained byte-level BPE tokenizer.

No model hub is needed: the tokenizer is trained on this machine's Python sources. The head
size is 32 because vLLM's CPU attention backend rejects 16. ~2 MB, a few seconds.

float16, not bfloat16: on AMX CPUs vLLM 0.32.0's CPU attention runs bfloat16 through its AMX
kernel (v1/attention/backends/cpu_attn.py, _get_attn_isa), and the worker died with SIGILL
(exit -4) on its first completion. Every consumer serves this folder with dtype "auto", which
keeps a float16 config; a float32 one would be downcast to bfloat16 on CPU
(config/model.py, _resolve_auto_dtype). float16 also keeps KV sizes in blocks as they were.

usage: python make_tiny_model.py OUTDIR [--layers N] [--hidden N] [--intermediate N]
                                         [--kv-heads N] [--max-positions N]
The defaults make the 2-layer hidden-128 model that the tests use. A deeper, wider one (e.g.
--layers 8 --hidden 1024 --max-positions 4096) makes one long prefill take many seconds on a
CPU, for fixtures of a long engine step. Heads are hidden / 32 (head size 32 always);
--kv-heads (default: as many as heads) sets grouped-query attention: the KV cache takes
2 x layers x kv_heads x 32 x 2 bytes a token, 1 KiB with the defaults and with
--layers 8 --kv-heads 1, so KV sizes in blocks stay as the fixtures' tests expect.
"""

from __future__ import annotations

import argparse
import glob
import os
import sysconfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"


def tokenizer(corpus, max_length=2048):
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(corpus, trainers.BpeTrainer(vocab_size=2048, special_tokens=[BOS, EOS, PAD],
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                          show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single=BOS + " $A", pair=BOS + " $A " + BOS + " $B",
        special_tokens=[(BOS, tok.token_to_id(BOS))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, model_max_length=max_length)
    fast.chat_template = (
        "{% for m in messages %}" + BOS + "{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}")
    return fast


def main(out, layers=2, hidden=128, intermediate=None, max_positions=2048, kv_heads=None):
    if hidden % 32:
        raise SystemExit("--hidden must be a multiple of 32 (head size 32)")
    corpus = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:200]
    fast = tokenizer(corpus, max_positions)
    fast.save_pretrained(out)
    heads = hidden // 32
    config = LlamaConfig(vocab_size=len(fast), hidden_size=hidden,
                         intermediate_size=intermediate or 2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads or heads,
                         head_dim=32, max_position_embeddings=max_positions,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=False,
                         torch_dtype="float16")
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float16).save_pretrained(out, safe_serialization=True)
    print("tiny model written to", out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="make a tiny random-weight Llama")
    ap.add_argument("outdir")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=None, help="default: 2 * hidden")
    ap.add_argument("--kv-heads", type=int, default=None, help="default: hidden / 32")
    ap.add_argument("--max-positions", type=int, default=2048)
    a = ap.parse_args()
    main(a.outdir, a.layers, a.hidden, a.intermediate, a.max_positions, a.kv_heads)
