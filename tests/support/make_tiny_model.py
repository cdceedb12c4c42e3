"""Make a tiny random-weight Llama with a locally trained byte-level BPE tokenizer.

No model hub is needed: the tokenizer is trained on this machine's Python sources. The head
size is 32 because vLLM's CPU attention backend rejects 16. ~2 MB, a few seconds.

float16, not bfloat16: on AMX CPUs vLLM 0.32.0's CPU attention runs bfloat16 through its AMX
kernel (v1/attention/backends/cpu_attn.py, _get_attn_isa), and the worker died with SIGILL
(exit -4) on its first completion. Every consumer serves this folder with dtype "auto", which
keeps a float16 config; a float32 one would be downcast to bfloat16 on CPU
(config/model.py, _resolve_auto_dtype). float16 also keeps KV sizes in blocks as they were.

usage: python make_tiny_model.py OUTDIR
"""

from __future__ import annotations

import glob
import os
import sys
import sysconfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"


def tokenizer(corpus):
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
                                   pad_token=PAD, model_max_length=2048)
    fast.chat_template = (
        "{% for m in messages %}" + BOS + "{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}")
    return fast


def main(out):
    corpus = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:200]
    fast = tokenizer(corpus)
    fast.save_pretrained(out)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         head_dim=32, max_position_embeddings=2048,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=False,
                         torch_dtype="float16")
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float16).save_pretrained(out, safe_serialization=True)
    print("tiny model written to", out)


if __name__ == "__main__":
    main(sys.argv[1])
