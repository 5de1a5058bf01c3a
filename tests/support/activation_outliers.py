"""A model whose activations have outlier channels (as LLM activations do): int8 dynamic
quantisation gives all of a tensor one scale, so the outliers crush every other value."""

import torch

import observer_ci


class Outliers(torch.nn.Module):
    def __init__(self, outlier: float) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 64)
        self.down = torch.nn.Linear(64, 8)
        scale = torch.ones(64)
        scale[:2] = outlier  # two outlier channels
        self.register_buffer("scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # /10 keeps the int8 error over 0.1 with or without VNNI (u8s8 saturation on AVX2
        # only adds to it): 0.16 on an AVX512-VNNI EPYC, 4e-4 for the twin without outliers
        return self.down(torch.relu(self.up(x)) * self.scale) / 10.0


torch.manual_seed(0)
for name, outlier in (("outliers", 1000.0), ("no_outliers", 1.0)):
    model = Outliers(outlier).eval()
    with torch.no_grad(), observer_ci.observe(model, name=name):
        for batch in (2, 3, 5):
            model(torch.randn(batch, 16))
