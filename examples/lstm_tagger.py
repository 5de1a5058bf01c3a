"""Observation script: a recurrent model (``nn.LSTM``) over sequences of varying length.

Returns the per-step tags and the final hidden and cell states; batch and sequence
length are dynamic.
"""

import torch

import observer_ci


class LSTMTagger(torch.nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 16, tags: int = 5):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.lstm = torch.nn.LSTM(dim, dim, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(dim, tags)

    def forward(self, tokens: torch.Tensor):
        states, (h, c) = self.lstm(self.embed(tokens))
        return self.out(states), h, c


torch.manual_seed(0)
model = LSTMTagger().eval()
with torch.no_grad(), observer_ci.observe(model, name="lstm_tagger"):
    for batch, length in ((2, 6), (3, 9), (4, 4)):
        model(torch.randint(0, 50, (batch, length)))
