"""A quantized deployment's weights, as data: the format its projections are stored in, which
tensors are quantized and which stay bf16, and what the decode's LM head reads. A catalog
entry carries one (`CatalogEntry.weights`) and its `ModelArgs.weights` hands it to the plans,
which launch the format's 4-bit kernel for the decode projections
(kernels.emulation.kernel_fields `KERNEL_OF`).

Upstream (Xilinx/mlir-air e972f2942d41, programming_examples/llms/*/README.md and
*_weights.py) quantizes every layer's seven projections and keeps the embedding, the norms
and the q/k/v biases in bf16 (llms/qwen25_7b_q4nx/README.md: "Norms and the q/k/v biases stay
bf16"; llms/qwen25_3b_q4/README.md: "QKV bias is not quantized"). Prefill de-quantizes the
projections to bf16 on the host at load and runs bf16 GEMMs
(llms/llama31_8b_q4nx/llama31_8b_q4nx_weights.py `load_q4nx_weights`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: `--weights` choices beside bf16: what each does, for the help and the errors
CHOICES = {
    "q4nx": "every projection quantized into Q4NX (groups of 32, w = scale*q + min)",
    "q4": "a GGUF's own 4-bit blocks, repacked for the NPU (Q4_1 -> Q4NX, Q4_0 -> Q4_0)",
}
#: between a model and its weights in a run's model spec: `smollm2-135m@q4`
SEP = "@"

#: every layer's quantized tensors, by the plans' roles
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class QuantizedWeights:
    """`format`: a formats name the decode's kernel reads ("q4nx", "q4_0-container",
    "awq-int4"); `group`: the columns sharing a scale. `lm_head_quantized`: whether the
    decode's LM head reads a 4-bit copy (the fused decode requantizes its LM head into Q4NX:
    the tied bf16 embedding, or an untied model's own Q4NX lm_head) or the bf16 matrix.
    `lm_head`: where that comes from, in words, with its source; `source`: the upstream
    files the rest is read from."""

    format: str
    group: int
    lm_head_quantized: bool
    lm_head: str
    source: str

    def quantized_tensors(self) -> tuple[str, ...]:
        """The tensors the decode reads in `format`: each layer's projections, and the LM
        head where it is quantized."""
        return PROJECTIONS + (("lm_head",) if self.lm_head_quantized else ())

    def bf16_tensors(self, qkv_bias: bool, qk_norm: bool,
                     sandwich_norms: bool = False) -> tuple[str, ...]:
        """The tensors that stay bf16: the embedding, the norms (Gemma 3's two post-sublayer
        norms too, llms/gemma3_4b_q4nx/gemma3_4b_q4nx_weights.py `layer_rms`), the q/k/v
        biases and the QK norms where the architecture has them, and the LM head where it is
        not quantized."""
        out = ["embed", "attn_norm", "ffn_norm", "final_norm"]
        out += ["post_attn_norm", "post_ffn_norm"] if sandwich_norms else []
        out += ["q_bias", "k_bias", "v_bias"] if qkv_bias else []
        out += ["q_norm", "k_norm"] if qk_norm else []
        out += [] if self.lm_head_quantized else ["lm_head"]
        return tuple(out)


def split_spec(spec: str) -> tuple[str, str | None]:
    """`MODEL@WEIGHTS` -> (MODEL, WEIGHTS); a spec without a known suffix -> (spec, None)."""
    base, sep, weights = spec.rpartition(SEP)
    if sep and base and weights in CHOICES:
        return base, weights
    return spec, None


def with_weights(model: str, weights: str) -> str:
    """The run's model spec for `model` deployed with `weights` (bf16: the model itself)."""
    if weights == "bf16":
        return model
    if weights not in CHOICES:
        raise ValueError(f"--weights {weights!r} is not one of bf16, {', '.join(CHOICES)}")
    return f"{model}{SEP}{weights}"
