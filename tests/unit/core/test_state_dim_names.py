"""Dim names of a state-space cache's leaves: ``conv_state`` and ``ssm_state``, never the
cache's ``past_sequence_length``."""

import torch

from observer_ci import InputObserver
from observer_ci.core.dim_names import name_dims


class Stateful(torch.nn.Module):
    def forward(self, input_ids, past_key_values):
        return input_ids.sum() + sum(t.sum() for ts in past_key_values.values() for t in ts)


def test_state_axes_get_their_own_names():
    obs = InputObserver()
    model = Stateful()
    with obs(model):
        for batch, kernel, state in ((2, 3, 5), (3, 4, 6)):
            model(
                torch.ones(batch, 1, dtype=torch.int64),
                {
                    "conv_states": [torch.zeros(batch, 8, kernel)],
                    "recurrent_states": [torch.zeros(batch, 8, state)],
                },
            )
    assert dict(zip(obs.leaf_names(), name_dims(obs))) == {
        "input_ids": {0: "batch_size"},
        "past_key_values_conv_states_0": {0: "batch_size", 2: "conv_state"},
        "past_key_values_recurrent_states_0": {0: "batch_size", 2: "ssm_state"},
    }
