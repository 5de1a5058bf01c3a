"""The helpers vision-language exports lean on: the ONNX translations registered once
(checked against torch), the export patches (scoped to the export), and the families
``missing=`` and sparse inputs give."""

import onnxruntime as ort
import pytest
import torch

from observer_ci.observing.families import plan_families
from observer_ci.observing.observer import InputObserver
from observer_ci.pipeline.export_patches import applicable_patches, export_patches
from observer_ci.pipeline.onnx_exporter import onnx_export, onnx_registry
from observer_ci.pipeline.onnx_translations import translated_op_names, translation_table


class AllAny(torch.nn.Module):
    def forward(self, x):
        positive = x > 0
        all_true = torch.ops.aten._is_all_true(positive)
        any_true = torch.ops.aten._is_any_true(positive)
        return all_true.to(torch.int64) + 2 * any_true.to(torch.int64) + x.sum() * 0


@pytest.fixture(scope="module")
def all_any_session(tmp_path_factory):
    path = tmp_path_factory.mktemp("translations") / "all_any.onnx"
    x = torch.randn(2, 3)
    program = onnx_export(AllAny(), (x,), None, ({0: torch.export.Dim.DYNAMIC},), 18)
    program.save(str(path))
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    "x",
    [
        torch.ones(2, 3),  # all and any
        -torch.ones(3, 3),  # neither
        torch.tensor([[1.0, -1.0, 2.0]]),  # any, not all
        torch.ones(0, 3),  # all of nothing is True, any of nothing False
    ],
)
def test_is_all_true_and_is_any_true_match_torch(all_any_session, x):
    expected = AllAny()(x)
    (got,) = all_any_session.run(None, {all_any_session.get_inputs()[0].name: x.numpy()})
    assert int(got) == int(expected)


def test_translations_live_in_the_registry_built_once():
    registry = onnx_registry(18)
    assert registry is onnx_registry(18)
    for target in translation_table():
        assert registry.is_registered(target)
    assert translated_op_names() == ["aten._is_all_true", "aten._is_any_true"]


class Projector(torch.nn.Module):
    def forward(self, x):
        return x * 2


class ListsImages(torch.nn.Module):
    """LLaVA's construct: one tensor per image, then concatenated."""

    def __init__(self):
        super().__init__()
        self.multi_modal_projector = Projector()

    def get_image_features(self, pixel_values, **kwargs):
        image_features = self.multi_modal_projector(pixel_values)
        image_features = list(image_features)
        return image_features

    def forward(self, pixel_values):
        return torch.cat(self.get_image_features(pixel_values), dim=0)


def test_list_of_images_patch_keeps_the_number_of_images_dynamic_only_while_exporting():
    model = ListsImages()
    original = ListsImages.__dict__["get_image_features"]
    assert [cls for cls, _, _ in applicable_patches(model)] == [ListsImages]
    x = torch.randn(3, 4, 5)
    with pytest.raises(Exception, match="(?i)specializ|static|constant"):
        torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    with export_patches(model) as applied:
        assert applied == ["ListsImages.get_image_features"]
        program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    assert ListsImages.__dict__["get_image_features"] is original  # restored
    for n in (1, 2, 5):
        y = torch.randn(n, 4, 5)
        assert torch.equal(program.module()(y), model(y))
    assert applicable_patches(Projector()) == []


class Prefill(torch.nn.Module):
    def forward(self, input_ids, past_key_values=None, token_type_ids=None, pixel_values=None):
        return input_ids.float().sum()


def observe_generate(missing=None):
    obs = InputObserver(missing=missing)
    model = Prefill()
    with obs(model):
        model(
            torch.ones(2, 9, dtype=torch.int64),
            past_key_values=[],
            token_type_ids=torch.zeros(2, 9, dtype=torch.int64),
            pixel_values=torch.randn(2, 3, 8, 8),
        )
        for length in (3, 4):
            model(
                torch.ones(2, 1, dtype=torch.int64), past_key_values=[torch.randn(2, 1, length, 4)]
            )
    return obs


@pytest.mark.parametrize("missing", [False, True])
def test_image_prefill_and_decode_get_a_family_each(missing):
    fill = dict(
        pixel_values=torch.zeros(2, 3, 8, 8), token_type_ids=torch.zeros(2, 9, dtype=torch.int64)
    )
    obs = observe_generate(fill if missing else None)
    prefill, decode = plan_families(obs)
    assert (prefill.name, prefill.indices) == ("decoder_model", [0])
    assert (decode.name, decode.indices) == ("decoder_with_past_model", [1, 2])
    assert decode.without_missing is missing
    assert ("missing=" in decode.reason) is missing
    sub = obs.subset(decode.indices, without_missing=decode.without_missing)
    assert "pixel_values" not in sub.leaf_names()
    # the prefill's token_type_ids follows input_ids' dynamic length, though only it passed
    first = obs.subset(prefill.indices)
    dims = dict(zip(first.leaf_names(), first.dynamic_dims()))
    assert dims["token_type_ids"] == [1] and dims["input_ids"] == [1]
    assert dims["pixel_values"] == []  # no size matched a dynamic dim
