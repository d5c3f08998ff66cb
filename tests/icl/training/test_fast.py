"""The static-shape training step (icdl.icl.training.fast) and the train.cuda_graph key's CPU fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from icdl.config import load_config
from icdl.icl.models import build_model
from icdl.icl.tasks import net_spec
from icdl.icl.training.fast import DeviceSampler, StaticStep, longest_points
from icdl.icl.training.train import step_shape, train
from icdl.nets import forward


def _losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_cuda_graph_key_falls_back_on_cpu_and_trains_the_same(tmp_path: Path, capsys) -> None:
    over = ["train.steps=30", "train.log_every=10", "train.device=cpu"]
    plain = train(load_config("tiny", over), tmp_path / "plain", quiet=True)
    graph = train(load_config("tiny", [*over, "train.cuda_graph=true"]), tmp_path / "graph")
    assert "train.cuda_graph needs a single CUDA device" in capsys.readouterr().err
    assert graph.step == plain.step == 30
    assert _losses(tmp_path / "graph") == _losses(tmp_path / "plain")
    assert graph.loss == plain.loss
    assert _losses(tmp_path / "plain")[-1] < _losses(tmp_path / "plain")[0]  # it does train


def test_device_sampler_labels_are_the_target_network_of_masked_inputs() -> None:
    task = load_config("cpu-small", ["task.dim=6", "task.depth=3", "task.width=8"]).task
    g = torch.Generator().manual_seed(0)
    s = DeviceSampler(task, 16, 9, "cpu", generator=g)
    mask = torch.tensor([1.0, 1, 1, 1, 0, 0])
    xs, ys, w = s.sample(mask)
    assert xs.shape == (16, 9, 6) and ys.shape == (16, 9, 1) and w.shape == (16, net_spec(task).num_params)
    assert torch.all(xs[..., 4:] == 0)
    torch.testing.assert_close(ys, forward(net_spec(task), w, xs))
    # He scaling: the first layer's weights have variance 2 / d.
    first = w[:, : task.width * task.dim]
    assert abs(first.var().item() * task.dim / 2 - 1) < 0.15
    assert abs(xs[..., :4].mean().item() + 2) < 0.1  # the paper's N(-2, I) inputs


def test_device_sampler_standardises_each_task() -> None:
    task = load_config("cpu-centred").task
    s = DeviceSampler(task, 256, 200, "cpu", generator=torch.Generator().manual_seed(1))
    _, ys, _ = s.sample(torch.ones(task.dim))
    # Standardised on independent reference inputs: per task mean ~ 0 and variance ~ 1 on average.
    assert abs(ys.mean().item()) < 0.05
    assert abs(ys.var(dim=1).mean().item() - 1) < 0.1


def test_masked_padded_step_equals_the_unpadded_step() -> None:
    """Causality: the loss and gradient on the first n points of a padded prompt equal those of the
    n-point prompt, so one fixed shape serves every curriculum stage."""
    cfg = load_config(
        "cpu-centred",
        [
            "train.batch_size=8",
            "train.grad_clip=null",
            "model.layers=2",
            "model.d_model=32",
            "model.d_mlp=64",
        ],
    )
    assert longest_points(cfg) == 31
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.task.dim, 1)
    ref = build_model(cfg.model, cfg.task.dim, 1)
    ref.load_state_dict(model.state_dict())
    step = StaticStep(model, cfg, torch.device("cpu"), generator=torch.Generator().manual_seed(3))
    n, d = 16, 5
    step._set(1e-3, n, d)
    # Recompute the same prompts with a twin generator and train `ref` on the unpadded prefix.
    twin = DeviceSampler(cfg.task, 8, 31, "cpu", generator=torch.Generator().manual_seed(3))
    xs, ys, _ = twin.sample((torch.arange(cfg.task.dim) < d).float())
    loss_ref = F.mse_loss(ref(xs[:, :n], ys[:, :n]), ys[:, :n])
    loss_ref.backward()
    step.optimizer.zero_grad(set_to_none=True)
    step._body()
    torch.testing.assert_close(step.loss, loss_ref.detach())
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        if q.grad is None:
            continue  # positions beyond the prefix
        # The graph step has already applied AdamW; compare the gradient it used.
        assert p.grad is not None, name
        if "wpe" in name:
            torch.testing.assert_close(p.grad[: 2 * n], q.grad[: 2 * n], atol=1e-6, rtol=1e-4)
            assert torch.all(p.grad[2 * n :] == 0)
        else:
            torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4)
    assert step.sums[3].item() == 8 * n  # labels counted: the prefix only
    assert step.sums[0].item() == pytest.approx(loss_ref.item(), rel=1e-5)


def test_static_step_trains_on_cpu_without_capture() -> None:
    cfg = load_config("tiny", ["train.steps=40"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.task.dim, 1)
    step = StaticStep(model, cfg, torch.device("cpu"), generator=torch.Generator().manual_seed(0))
    first = []
    for i in range(40):
        step.run(3e-3, *step_shape(cfg, i))
        first.append(step.loss.item())
    assert step.graph is None
    assert sum(first[-5:]) < sum(first[:5])
    assert step.first_bad.item() == cfg.train.steps + 1


def test_points_max_draws_lengths_from_the_step() -> None:
    cfg = load_config("tiny", ["train.points_max=16"])
    lengths = [step_shape(cfg, s)[0] for s in range(200)]
    assert lengths == [step_shape(cfg, s)[0] for s in range(200)]  # pure function of the step
    assert min(lengths) == cfg.task.points and max(lengths) == 16
    assert longest_points(cfg) == 16


def test_points_max_below_the_task_length_is_an_input_error() -> None:
    from icdl.errors import InputError

    with pytest.raises(InputError, match="points_max"):
        load_config("tiny", ["train.points_max=5"])


def test_centred_presets_are_the_centred_task() -> None:
    for name, dim, examples in (("cpu-centred", 8, 30), ("gpu-centred", 20, 50)):
        cfg = load_config(name)
        t = cfg.task
        assert (t.dim, t.examples, t.depth) == (dim, examples, 3)
        assert t.inputs.means == [0.0] and t.standardize == "task" and cfg.model.attention == "softmax"
        cur = cfg.train.curriculum
        assert cur.dims is not None and cur.points is not None
        # The curriculum reaches the full task before the run ends.
        assert cur.dims.value(cfg.train.steps - 1) == dim
        assert cur.points.value(cfg.train.steps - 1) == t.points
    assert load_config("gpu-centred").model.layers == 12
