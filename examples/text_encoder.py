"""Observation script: keyword inputs, an optional input and a constant flag.

The first call has no ``memory`` (like a prefill without cache); later calls do,
with other batch and sequence sizes. observer-ci aligns the calls, fills the
absent ``memory`` with an empty tensor on its dynamic dimension, infers batch and
sequence as dynamic, and exports one graph; ``normalize=True`` is a constant.
"""

import torch

import observer_ci


class TextEncoder(torch.nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)

    def forward(self, input_ids, attention_mask, memory=None, normalize: bool = False):
        h = self.embed(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)
        if memory is not None:
            h = torch.cat([memory, h], dim=1)
        h = self.mix(h)
        pooled = h.mean(dim=1)
        if normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return {"hidden": h, "pooled": pooled}


def batch(size: int, length: int) -> dict:
    return {
        "input_ids": torch.randint(0, 100, (size, length)),
        "attention_mask": torch.ones(size, length, dtype=torch.int64),
    }


torch.manual_seed(0)
model = TextEncoder().eval()
with torch.no_grad(), observer_ci.observe(model, name="text_encoder"):
    model(**batch(2, 7), normalize=True)
    model(**batch(3, 9), memory=torch.randn(3, 4, 32), normalize=True)
    model(**batch(4, 5), memory=torch.randn(4, 6, 32), normalize=True)
