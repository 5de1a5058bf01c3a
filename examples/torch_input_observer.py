"""Observation script written for torch.onnx.InputObserver, registered with observer-ci.

The model takes a dict positionally through a method other than ``forward``; the observer
is torch's own, and ``observer_ci.register`` takes over the calls it stored.
"""

import torch

import observer_ci


class BagEncoder(torch.nn.Module):
    def __init__(self, n_features: int = 8, hidden: int = 16):
        super().__init__()
        self.proj = torch.nn.Linear(n_features, hidden)

    def encode(self, batch: dict) -> torch.Tensor:
        hidden = torch.tanh(self.proj(batch["features"]))
        return (hidden * batch["weights"].unsqueeze(-1)).sum(dim=1)

    def forward(self, batch: dict) -> torch.Tensor:
        return self.encode(batch)


torch.manual_seed(0)
model = BagEncoder().eval()
observer = torch.onnx.InputObserver()
with torch.no_grad(), observer(model, method_name="encode"):
    for batch, items in ((2, 3), (3, 5), (4, 4)):
        model.encode(
            {"features": torch.randn(batch, items, 8), "weights": torch.rand(batch, items)}
        )
observer_ci.register(model, observer, name="torch_input_observer", method_name="encode")
