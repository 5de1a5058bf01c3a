"""Observation script written for ``torch.onnx.InputObserver`` (torch >= 2.13), registered.

The script uses torch's own observer; ``observer_ci.register`` takes over its stored calls
so the runner exports, replays and probes them like any other model.
"""

import torch

import observer_ci


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
        )

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
model = TinyMLP().eval()
observer = torch.onnx.InputObserver()
with torch.no_grad(), observer(model):
    for batch in (2, 3, 5):
        model(torch.randn(batch, 8))
observer_ci.register(model, observer, name="torch_input_observer")
