"""Observation script: a dict passed positionally, to ``forward`` and to ``encode``.

``model({"ids": ..., "mask": ...})`` and ``model.encode(batch)`` take one dict argument;
``torch.onnx.export`` would read a trailing dict in ``args`` as keyword arguments, so the
dict must stay the value of its parameter.
"""

import torch

import observer_ci


class DictEncoder(torch.nn.Module):
    def __init__(self, vocab: int = 60, dim: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.proj = torch.nn.Linear(dim, dim)

    def encode(self, batch: dict) -> torch.Tensor:
        h = self.embed(batch["ids"]) * batch["mask"].unsqueeze(-1).to(torch.float32)
        return self.proj(h).sum(dim=1)

    def forward(self, batch: dict) -> torch.Tensor:
        return torch.tanh(self.encode(batch))


def make(size: int, length: int) -> dict:
    return {
        "ids": torch.randint(0, 60, (size, length)),
        "mask": torch.ones(size, length, dtype=torch.int64),
    }


torch.manual_seed(0)
model = DictEncoder().eval()
with torch.no_grad(), observer_ci.observe(model, name="dict_forward"):
    for size, length in ((2, 5), (3, 7), (4, 6)):
        model(make(size, length))
with torch.no_grad(), observer_ci.observe(model, name="dict_encode", method_name="encode"):
    for size, length in ((2, 5), (3, 7), (4, 6)):
        model.encode(make(size, length))
