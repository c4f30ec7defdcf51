#!/usr/bin/env python3
"""Writes tiny-llama.gguf, the random-weight model the backfill tests give llama-server.

A llama-architecture GGUF (2 layers, 64 dimensions, 4 heads, feed-forward 128, F32, ~130k
parameters), so that llama-server's answers are real generations (real tokenizer, sampling, slots,
cancellation) of nonsense words, in milliseconds on one CPU core. The file is deterministic (a fixed
seed) and kept beside this script as a fixture: CI needs no Python packages to have it. To write it
again, with Debian's python3-gguf (sid, pure Python), python3-numpy and python3-yaml on the path
(unpacked privately as ../shared/notes/llama-server.md says):

    python3 tests/integration/data/make_tiny_gguf.py tests/integration/data/tiny-llama.gguf

Only word tokens have output weights, scaled up, so replies are readable word lists; the end token
is never sampled, so every request must bound its length (max_tokens): each answer then has exactly
max_tokens completion tokens, which the tests count on.
"""
import sys

import gguf
import numpy as np

WORDS = """the a of and to in is it that was for on are with as his they be at one have this from or had
by word but what some we can out other were all there when up use your how said an each she which do
their time if will way about many then them write would like so these her long make thing see him two
has look more day could go come did number sound no most people my over know water than call first who
may down side been now find""".split()
EMBD, LAYERS, HEADS, FF, CONTEXT = 64, 2, 4, 128, 2048
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def vocabulary():
    """(tokens, scores, types): SentencePiece-style, with byte fallback."""
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
             gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    types += [gguf.TokenType.NORMAL] * 27
    first_word = len(tokens)
    tokens += ["\u2581" + w for w in WORDS]
    types += [gguf.TokenType.NORMAL] * len(WORDS)
    scores = [0.0] * first_word + [float(-i) for i in range(len(WORDS))]
    return tokens, scores, types, first_word


def main(path):
    rng = np.random.default_rng(16)
    tokens, scores, types, first_word = vocabulary()
    n_vocab = len(tokens)

    def weights(*shape, scale=0.1):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tarmac-tiny-random")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(EMBD)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(EMBD // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template(CHATML)

    w.add_tensor("token_embd.weight", weights(n_vocab, EMBD))
    w.add_tensor("output_norm.weight", np.ones(EMBD, dtype=np.float32))
    output = np.zeros((n_vocab, EMBD), dtype=np.float32)
    output[first_word:] = weights(n_vocab - first_word, EMBD, scale=2.0)  # words only, and far above 0
    w.add_tensor("output.weight", output)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", weights(EMBD, EMBD))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weights(FF, EMBD))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weights(FF, EMBD))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weights(EMBD, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama.gguf")
