"""The first divergence on real exports: torch.onnx.export(dynamo=True), onnxruntime, hooks.

Each model disagrees with its graph for one ordinary reason (a branch only taken while
exporting, tied top-k scores, a branch on a size fixed at export); the localisation must
name the module, its class, the ONNX op and the source line, and stay silent on a correct
model.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnxruntime as ort
import pytest
import torch

from observer_ci.core.constants import DEFAULT_OPSET, KNOWN_OP_CASE_NEXT_STEPS, PADDING_FAST_PATH
from observer_ci.observing.observer import InputObserver
from observer_ci.pipeline.divergence import locate_first_divergence
from observer_ci.pipeline.export import as_module
from observer_ci.pipeline.onnx_exporter import onnx_export
from observer_ci.pipeline.probe import run_probe

THIS_FILE = Path(__file__).name
ATOL, RTOL = 1e-4, 0.1


def line_of(marker: str) -> int:
    """The line of this file carrying ``marker`` (a comment at the end of a model line)."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    (number,) = [k + 1 for k, line in enumerate(lines) if line.rstrip().endswith(marker)]
    return number


def exporting() -> bool:
    return torch.compiler.is_exporting()


class Block(torch.nn.Module):
    """Linear, GELU and a residual; ``check`` (when set) adds 0.01 only while exporting."""

    def __init__(self, width: int = 8, check=None) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.act = torch.nn.GELU()
        self.check = check

    def forward(self, x):
        y = self.act(self.lin(x))
        if self.check is not None and self.check():
            y = y + 0.01  # export-only branch
        return y + x


class Stack(torch.nn.Module):
    def __init__(self, depth: int = 3, bad: tuple[int, ...] = (1,), check=exporting) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            Block(check=check if k in bad else None) for k in range(depth)
        )
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def export(model, args, tmp_path, *, kwargs=None, dynamic_shapes=None, external=False) -> str:
    program = onnx_export(model, args, kwargs, dynamic_shapes, DEFAULT_OPSET)
    path = tmp_path / "model.onnx"
    program.save(str(path), external_data=external)
    return str(path)


def feeds_of(path: str, tensors: list[torch.Tensor]) -> dict:
    names = [i.name for i in ort.InferenceSession(path).get_inputs()]
    return {n: t.numpy() for n, t in zip(names, tensors)}


def locate(model, x, tmp_path, **kwargs):
    path = export(model, (x,), tmp_path)
    return locate_first_divergence(model, path, (x,), {}, feeds_of(path, [x]), ATOL, RTOL, **kwargs)


def source_line(source: str) -> tuple[str, int]:
    file, line, _ = source.split(":", 2)
    return os.path.basename(file), int(line)


@pytest.mark.parametrize(
    "check", [torch.compiler.is_exporting, torch.onnx.is_in_onnx_export], ids=lambda c: c.__name__
)
def test_an_export_only_branch_names_its_block_class_and_line(tmp_path, check):
    model = Stack(bad=(1,), check=check).eval()
    found = locate(model, torch.randn(2, 8), tmp_path, call_index=0)
    assert found is not None
    assert (found.module, found.module_class) == ("blocks.1", "Block")
    assert source_line(found.source) == (THIS_FILE, line_of("# export-only branch"))
    assert found.source.endswith("y = y + 0.01  # export-only branch")
    assert found.onnx_ops[0] == "Add" and found.onnx_nodes[0]
    assert 0.005 < found.abs < 0.05 and found.call_index == 0 and found.where == "replay"
    assert "did not run this line" in found.note and found.known_case is None


class TiedTopK(torch.nn.Module):
    """Scores with many ties (a count of positive features), top-k, then a gather."""

    def forward(self, x):
        scores = (x > 0).float().sum(-1)
        index = scores.topk(4, dim=-1).indices  # tied top-k
        return torch.gather(x, 1, index[..., None].expand(-1, -1, x.shape[-1]))


def test_tied_topk_is_a_known_case_at_the_topk_op(tmp_path):
    x = torch.randn(2, 16, 3, generator=torch.Generator().manual_seed(0))
    found = locate(TiedTopK(), x, tmp_path)
    assert found is not None
    assert (found.module, found.module_class) == ("", "TiedTopK")
    assert found.onnx_ops == ["TopK"]
    assert source_line(found.source) == (THIS_FILE, line_of("# tied top-k"))
    assert found.known_case == "topk_ties"
    assert found.next_step == KNOWN_OP_CASE_NEXT_STEPS["topk_ties"]
    assert found.abs > 0.1 and found.op_abs >= 1  # indices differ by whole positions


class Attention(torch.nn.Module):
    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(y.transpose(1, 2).reshape(b, s, w))


class Correct(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Attention() for _ in range(2))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x).softmax(-1)


def test_a_correct_model_has_no_divergence(tmp_path):
    assert locate(Correct().eval(), torch.randn(2, 5, 16), tmp_path) is None


class Inner(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            return x * 1.01  # inner export-only
        return x


class Stage(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.inner = Inner()

    def forward(self, x):
        return self.inner(torch.relu(self.lin(x)))


class Nested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stages = torch.nn.ModuleList(Stage() for _ in range(3))

    def forward(self, x):
        for stage in self.stages:
            x = stage(x) + x
        return x


def test_only_the_earliest_of_nested_wrong_modules_is_reported(tmp_path):
    # every stage's inner module is wrong; the later ones' inputs already disagree, and
    # the stage around the first one only carries its error: the innermost first is named
    found = locate(Nested().eval(), torch.randn(2, 8) + 1, tmp_path)
    assert found is not None
    assert (found.module, found.module_class) == ("stages.0.inner", "Inner")
    assert source_line(found.source) == (THIS_FILE, line_of("# inner export-only"))
    assert found.onnx_ops == ["Mul"]


class FeedsWrong(torch.nn.Module):
    """The parent shifts its input while exporting, then calls a correct child."""

    def __init__(self) -> None:
        super().__init__()
        self.first = Block()
        self.child = Block()

    def forward(self, x):
        x = self.first(x)
        if torch.compiler.is_exporting():
            x = x - 0.5  # parent export-only
        return self.child(x)


def test_a_module_fed_diverging_inputs_is_not_blamed(tmp_path):
    found = locate(FeedsWrong().eval(), torch.randn(2, 8), tmp_path)
    assert found is not None
    assert (found.module, found.module_class) == ("", "FeedsWrong")  # not "child"
    assert source_line(found.source) == (THIS_FILE, line_of("# parent export-only"))


class SizeBranch(torch.nn.Module):
    def __init__(self, branch: bool) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.branch = branch

    def forward(self, x):
        y = self.lin(x)
        if self.branch and x.shape[0] > 4:
            return y * 2
        return y + x  # the observed sizes' side


class SizeStack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(SizeBranch(k == 1) for k in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_the_probe_names_the_block_whose_size_branch_the_graph_fixed(tmp_path):
    model = SizeStack().eval()
    observer = InputObserver()
    with torch.no_grad(), observer(model):
        for batch in (2, 3, 4):
            model(torch.randn(batch, 4))
    args, kwargs = observer.infer_arguments(as_args_kwargs=True)
    path = export(
        model, args, tmp_path, kwargs=kwargs, dynamic_shapes=observer.infer_dynamic_shapes()
    )
    unseen: list[tuple] = []  # what the probe hands the diagnosis (family_server)
    probe = run_probe(
        observer, model, ort.InferenceSession(path), on_mismatch=lambda *call: unseen.append(call)
    )
    assert probe.ran and probe.success is False and len(unseen) == 1
    found = locate_first_divergence(model, path, *unseen[0], ATOL, RTOL, where="probe")
    assert found is not None and found.where == "probe" and found.call_index is None
    assert (found.module, found.module_class) == ("blocks.1", "SizeBranch")
    assert source_line(found.source) == (THIS_FILE, line_of("# the observed sizes' side"))
    assert "unseen size" in found.note


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = Stack(depth=2, bad=(0,))

    def encode(self, x):
        return self.body(x)


def test_a_method_graph_with_external_weights_is_located(tmp_path):
    model = Encoder().eval()
    x = torch.randn(3, 8)
    path = export(as_module(model, "encode"), (x,), tmp_path, external=True)
    assert any(p.name.endswith(".data") for p in tmp_path.iterdir())  # weights beside it
    found = locate_first_divergence(
        model, path, (x,), {}, feeds_of(path, [x]), ATOL, RTOL, method_name="encode"
    )
    assert found is not None
    assert (found.module, found.module_class) == ("body.blocks.0", "Block")


def test_a_graph_that_cannot_run_raises_for_the_diagnosis_to_keep_as_a_note(tmp_path):
    x = torch.randn(5, 8)
    with pytest.raises(Exception, match="missing.onnx"):
        locate_first_divergence(
            Stack().eval(), str(tmp_path / "missing.onnx"), (x,), {}, {"x": x.numpy()}, ATOL, RTOL
        )


class Shared(torch.nn.Module):
    """One block called twice from two lines, wrong each time."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block(check=exporting)

    def forward(self, x):
        x = self.block(x)
        return self.block(x) * 2


def test_a_module_called_twice_is_told_apart_by_its_calling_line(tmp_path):
    found = locate(Shared().eval(), torch.randn(2, 8), tmp_path)
    assert found is not None
    assert (found.module, found.module_class) == ("block", "Block")
    assert source_line(found.source) == (THIS_FILE, line_of("# export-only branch"))


def test_the_padding_fast_path_is_named_at_the_first_attention(tmp_path):
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2).eval()  # nested tensors by default
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])  # the second row padded
    kwargs = {"src_key_padding_mask": mask}
    path = export(model, (x,), tmp_path, kwargs=kwargs)
    feeds = feeds_of(path, [x, mask])
    found = locate_first_divergence(model, path, (x,), kwargs, feeds, ATOL, RTOL)
    assert found is not None
    assert (found.module, found.module_class) == ("layers.0.self_attn", "MultiheadAttention")
    assert found.known_case == PADDING_FAST_PATH
    assert "enable_nested_tensor=False" in found.next_step


class Downsample(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.interpolate(
            x, scale_factor=0.6, mode="bilinear", antialias=True
        )  # antialiased resize


class SegmentationHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.down = Downsample()
        self.classify = torch.nn.Conv2d(4, 3, 1)

    def forward(self, x):
        return self.classify(self.down(torch.relu(self.stem(x))))


def test_an_antialiased_resize_is_an_interpolation_case_at_its_module(tmp_path):
    found = locate(SegmentationHead().eval(), torch.randn(1, 2, 9, 13), tmp_path)
    assert found is not None
    assert (found.module, found.module_class) == ("down", "Downsample")
    assert found.onnx_ops[0] == "Resize" and found.known_case == "interpolation"
    assert "antialias" in found.next_step
    assert found.source.split(":")[0].endswith(THIS_FILE)
