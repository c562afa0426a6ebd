"""Config-only models with seeded random weights, saved as real Hugging Face directories.

Tests and planning need models of every supported architecture without a
download. Each is built from transformers' own config class, initialised from
a fixed seed, and saved with `save_pretrained` next to a small byte-level BPE
tokenizer trained here, so it is loaded through exactly the path a real
checkpoint takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: A ChatML template, the format SmolLM2 and Qwen use.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOKENIZER_VOCAB = 512

# Sized for upstream's kernels, as a deployment on the (simulated) NPU runs them: ffn 192
# (mv.cc sums the down GEMV's rows of K = ffn in 64-wide vectors) and head_dim 64 (attn_npu2.cc
# compiles its softmax scale for head_dim 64, 128, 256 or 512 only; rope_halfsplit.cc takes
# rows of a multiple of 32).
_BASE = dict(hidden_size=128, num_hidden_layers=2, intermediate_size=192,
             vocab_size=TOKENIZER_VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-6,
             bos_token_id=0, eos_token_id=2, pad_token_id=0)

#: name -> (transformers config class name, its arguments, what the model exercises)
RANDOM_MODELS: dict[str, tuple[str, dict[str, Any], str]] = {
    "tiny-llama": ("LlamaConfig", dict(
        _BASE, num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
        "Llama with GQA, tied embeddings and Llama 3 rope scaling"),
    "tiny-llama-mha": ("LlamaConfig", dict(
        _BASE, num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        "Llama with MHA and an untied LM head"),
    "tiny-qwen2": ("Qwen2Config", dict(
        _BASE, num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "Qwen2.5-style: QKV bias"),
    "tiny-qwen3": ("Qwen3Config", dict(
        _BASE, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "Qwen3-style: per-head QK RMSNorm, q_dim 256 != hidden 64"),
    "tiny-qwen2-hd128": ("Qwen2Config", dict(
        _BASE, hidden_size=256, intermediate_size=320, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "Qwen2.5-1.5B-style: QKV bias at head_dim 128 (head-first attention)"),
    # Gemma 3 4B's layer in miniature: one sliding and one global layer (the 4B: 5 to 1,
    # window 1024; here 64, a whole K chunk as attn_npu2.py requires), the global layer's
    # theta 1e6 with linear x8 and the sliding one's 1e4,
    # query_pre_attn_scalar = head_dim as on the 4B (attention scale 1/sqrt(head_dim)).
    "tiny-gemma3": ("Gemma3TextConfig", dict(
        _BASE, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        query_pre_attn_scalar=64, sliding_window=64, tie_word_embeddings=True,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        "Gemma 3-style: sandwich norms, QK norm, GELU-tanh, sliding window 64 on layer 0, "
        "dual-theta RoPE, embedding scale"),
    # Phi-4-mini's head in miniature: head_dim 128 with 96 dims rotated, LongRoPE with its
    # attention factor (here sqrt(1 + ln 64 / ln 64): 4096 positions over an original 64,
    # so a prompt past 64 tokens switches to the long factors), fused projections.
    "tiny-phi3": ("Phi3Config", dict(
        _BASE, hidden_size=256, intermediate_size=320, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True, original_max_position_embeddings=64,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.75,
                         "short_factor": [1.0 + 0.02 * i for i in range(48)],
                         "long_factor": [1.0 + 1.0 * i for i in range(48)]}),
        "Phi-4-mini-style: partial rotary 96/128, LongRoPE, fused qkv and gate-up"),
    # Whole Q4NX blocks in every projection (32 rows x 256 columns: hidden and ffn multiples
    # of 256, kv_dim 64 two row blocks), so `tiny-llama-q4@q4nx` deploys with the 4-bit decode.
    "tiny-llama-q4": ("LlamaConfig", dict(
        _BASE, hidden_size=256, intermediate_size=512, num_attention_heads=4,
        num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
        "Llama at the 4-bit kernels' block sizes: deploy it as tiny-llama-q4@q4nx"),
}

#: The random models whose architecture the FP32 oracle runs but the NPU path does not yet
#: (kernels.plans.plan.unplannable says what each lacks; a test holds the two together):
#: they load, and pass phase 0, but are not offered for deployment.
ORACLE_ONLY: tuple[str, ...] = ()
#: The random models that deploy, in the order the new-deployment form offers them.
DEPLOYABLE = tuple(name for name in RANDOM_MODELS if name not in ORACLE_ONLY)

_CORPUS = (
    "What is the capital of France? The capital of France is Paris. "
    "A spatial NPU is an array of compute tiles with local memory, connected by streams. "
    "The kernel multiplies a tile of the matrix and accumulates the result in FP32. "
    "Once upon a time, a small model learned to answer questions about the world. "
    "Prefill runs the whole prompt; decode adds one token at a time from the cache. "
    "The quick brown fox jumps over the lazy dog, 0123456789 times."
)


def build_tokenizer() -> Any:
    """A deterministic byte-level BPE tokenizer of TOKENIZER_VOCAB tokens, with ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([_CORPUS] * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_random_model(name: str, directory: Path, seed: int = 0) -> Path:
    """Save the random model `name` as a Hugging Face directory; returns the directory."""
    import torch  # here, not at the top: the TUI's new-deployment form lists the names
    import transformers

    transformers.utils.logging.disable_progress_bar()
    cls_name, kwargs, _ = RANDOM_MODELS[name]
    config = getattr(transformers, cls_name)(**kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # transformers starts norm weights at 1 and biases at 0, which a reference that
    # skipped them would still match: jitter them so that such a slip is caught.
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight") or pname.endswith(".bias"):
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    build_tokenizer().save_pretrained(directory)
    return directory
