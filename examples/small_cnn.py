"""Observation script: a small CNN classifier on images of varying batch and resolution.

Adaptive pooling makes the height and width free: observer-ci infers batch, height and
width as dynamic and probes an unseen resolution.
"""

import torch

import observer_ci


class SmallCNN(torch.nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.head = torch.nn.Linear(16, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


torch.manual_seed(0)
model = SmallCNN().eval()
with torch.no_grad(), observer_ci.observe(model, name="small_cnn"):
    for batch, side in ((2, 32), (3, 40), (4, 48)):
        model(torch.randn(batch, 3, side, side))
