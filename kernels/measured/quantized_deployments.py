"""What upstream measured on NPU2 for each of its 4-bit deployments in the catalog (Q4NX,
Q4_0, int4-AWQ): the TTFT and the warm decode rate each README states (Phi-4-mini's README
has none, its driver's comment stands in), with the file and the words they are read from.
benchmarks/hardware_fidelity.py (section 7) prints them beside the modeled figures;
kernels.performance.fused_decode calibrates its one end-to-end term on the Llama-3.2-1B row
alone. Every figure here is measured on NPU2 by upstream (Xilinx/mlir-air e972f2942d41,
programming_examples/)."""

from __future__ import annotations

#: what upstream measured on NPU2 for each 4-bit catalog entry, as its README states it (or,
#: where the README has none, its driver)
#: (Xilinx/mlir-air e972f2942d41): TTFT at a 2048 context in seconds, warm decode in tokens/s
#: (None: not published), and the README and the words the figures are read from
QUANTIZED_MEASURED: dict[str, tuple[float, float | None, str]] = {
    "llama32_1b_q4nx": (0.93, 50.0, "llms/llama32_1b_q4nx/README.md, Performance: TTFT @ 2048 "
                        "~0.93 s, decode ~50 tok/s (AMD Strix, turbo)"),
    "llama32_3b_q4nx": (2048 / 824, 18.3, "llms/llama32_3b_q4nx/README.md, Performance: "
                        "prefill ~824 tok/s @ 2048 (TTFT = 2048 / 824), decode ~18.3 tok/s "
                        "(AMD Strix, turbo)"),
    "llama31_8b_q4nx": (6.22, 10.7, "llms/llama31_8b_q4nx/README.md, Performance: TTFT 6.22 s "
                        "at CTX=2048, decode 10.7 tok/s (AMD Strix)"),
    "qwen3_8b_q4nx": (7.72, 10.22, "llms/qwen3_8b_q4nx/README.md, Performance: TTFT 7.72 s at "
                      "CTX=2048, decode 10.22 tok/s (AMD Strix)"),
    "qwen25_7b_q4nx": (9.59, 11.46, "llms/qwen25_7b_q4nx/README.md, Performance: TTFT 9.59 s "
                       "at CTX=2048, decode 11.46 tok/s (Ryzen AI 9 HX 370)"),
    "qwen25_3b_q4": (4.17, 28.2, "llms/qwen25_3b_q4/README.md, Status: warm TTFT 4.17 s @ "
                     "2048, decode 28.2 tok/s at the 2048 default (Ryzen AI 7 350, Krackan)"),
    "llama32_1b_int4": (1.38, None, "llms/llama32_1b_int4/README.md, Performance: 1.38 s "
                        "end-to-end at seq 2048 (bf16 prefill backend); no decode figure (its "
                        "decode driver is a follow-up)"),
    "gemma3_4b_q4nx": (4.5, 12.5, "llms/gemma3_4b_q4nx/README.md, Performance: TTFT 4.5 s at "
                       "CTX=2048, decode 12.5 tok/s (80 ms/token, ATTN_MAXL=2048, 64 tokens; "
                       "AMD Strix, warm; the README calls it conservative, taken before "
                       "W_DUAL_CHAN: programming_examples/fused_decode/README.md measures "
                       "17.1 tok/s dual-channel)"),
    # The README publishes no figures; the driver states the two it was built around.
    "phi4_mini_q4nx": (5.0, 1000 / 60, "llms/phi4_mini_q4nx/phi4_mini_q4nx_inference.py, the "
                       "comment above PREFILL_MIN_TOKENS: prefill ~5 s at seq_len=2048, decode "
                       "~60 ms/token (so 1000/60 tok/s); approximate, and its README.md "
                       "publishes no TTFT or decode figure"),
}
