"""The canonical prompts every gate runs, and the prefill sequence-length setting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: Prefill lengths the deployment targets; the reference deployment runs 2048
#: (docs/hardware-facts.md#reference-deployment).
MAX_SEQ_LEN = 2048
DEFAULT_SEQ_LEN = 128

CAPITAL_QUESTION = "What is the capital of France?"

_FILLER = ("The array streams tiles of activations from memory into the compute cores, "
           "multiplies them with the weights held close by, and sends the sums back out. ")


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    chat: bool = False      # wrap in the tokenizer's chat template as a user turn
    fill_to: int = 0        # repeat the text up to this many tokens (a prefill-length prompt)

    def token_ids(self, tokenizer: Any) -> torch.Tensor:
        """The prompt as a 1-D tensor of token ids."""
        if self.chat:
            if not getattr(tokenizer, "chat_template", None):
                raise ValueError(f"prompt {self.name!r} needs a chat template and the "
                                 "tokenizer has none")
            ids = tokenizer.apply_chat_template([{"role": "user", "content": self.text}],
                                                add_generation_prompt=True, return_dict=True,
                                                )["input_ids"]
        else:
            ids = tokenizer(self.text)["input_ids"]
        if self.fill_to:
            while len(ids) < self.fill_to:
                ids = ids + tokenizer(self.text)["input_ids"]
            ids = ids[:self.fill_to]
        return torch.tensor(ids, dtype=torch.long)


def canonical_prompts(seq_len: int = DEFAULT_SEQ_LEN, *, chat: bool = True) -> list[Prompt]:
    """Short prompts, the chat question, and one prompt of exactly `seq_len` tokens."""
    if not 1 <= seq_len <= MAX_SEQ_LEN:
        raise ValueError(f"seq_len must be in 1..{MAX_SEQ_LEN}, got {seq_len}")
    prompts = [
        Prompt("capital", CAPITAL_QUESTION, chat=True),
        Prompt("story", "Once upon a time, in a small village by the sea,"),
        Prompt("npu", "A neural processing unit is"),
        Prompt(f"prefill-{seq_len}", _FILLER, fill_to=seq_len),
    ]
    return prompts if chat else [p for p in prompts if not p.chat]
