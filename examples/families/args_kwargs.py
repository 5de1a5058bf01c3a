"""Observation script: ``*args`` and ``**kwargs`` signatures.

``forward(self, x, *args)`` takes extra tensors positionally; ``forward(self, x, **kwargs)``
takes named extras. Their dynamic shapes must nest under the ``*args`` / ``**kwargs``
parameter for ``torch.export``.
"""

import torch

import observer_ci


class SumArgs(torch.nn.Module):
    def forward(self, x, *args):
        out = x
        for extra in args:
            out = out + extra
        return out.relu()


class ScaleKwargs(torch.nn.Module):
    def forward(self, x, **kwargs):
        return x * kwargs["scale"] + kwargs["shift"]


torch.manual_seed(0)
varargs, varkw = SumArgs().eval(), ScaleKwargs().eval()
with torch.no_grad(), observer_ci.observe(varargs, name="star_args"):
    for batch in (2, 3, 5):
        varargs(torch.randn(batch, 4), torch.randn(batch, 4), torch.randn(batch, 4))
with torch.no_grad(), observer_ci.observe(varkw, name="star_kwargs"):
    for batch in (2, 3, 5):
        varkw(torch.randn(batch, 4), scale=torch.randn(batch, 4), shift=torch.randn(batch, 4))
