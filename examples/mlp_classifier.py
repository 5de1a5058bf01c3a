"""Observation script: a small classifier called on batches of different sizes."""

import torch

import observer_ci


class Classifier(torch.nn.Module):
    def __init__(self, n_features: int = 16, n_classes: int = 4):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(n_features, 32), torch.nn.GELU(), torch.nn.Linear(32, n_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).softmax(dim=-1)


torch.manual_seed(0)
model = Classifier().eval()
with torch.no_grad(), observer_ci.observe(model, name="mlp_classifier"):
    for batch in (2, 3, 5):
        model(torch.randn(batch, 16))
