"""Two training processes with the gloo backend on the CPU, as torchrun runs them.

One spawn runs every check, to pay the processes' start-up once. Each rank builds its pipeline
with no shard argument (the shard comes from torch.distributed), and the ranks save what they
saw; the assertions run here, in the test process:
- exactly-once coverage: the valid indices of all ranks (all_gather'ed) are the dataset, once,
  every epoch, and every rank gets the same number of batches;
- training: DDP steps on pipeline batches give finite losses, change the parameters, and leave
  them identical on both ranks;
- resume: a run checkpointed mid-epoch (model, optimizer, pipeline position) and continued in
  fresh objects sees the same indices and identical image tensors as an uninterrupted run, and
  ends with the same parameters.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from helpers import varied_images
from torch import nn

import pixelpipe as pp

WORLD = 2
N, BS = 37, 4  # 19 + 18 samples: 5 batches per rank, the last ones padded
EPOCHS = 2
STOP = 3  # the interrupted run checkpoints after this many batches (mid epoch 0)


def samples() -> list[tuple[torch.Tensor, int]]:
    return [(img, i % 5) for i, img in enumerate(varied_images(N, seed=5))]


def pipeline() -> pp.Pipeline:
    ops = [pp.RandomResizedCrop(16), pp.RandomFlip(), pp.ColorJitter(0.2, 0.2),
           pp.Normalize([0.5] * 3, [0.25] * 3)]
    return pp.Pipeline(samples(), ops, batch_size=BS, seed=3, num_threads=1)


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


def step(ddp: nn.Module, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> float:
    w = batch["valid"].to(torch.float32)
    loss = (F.cross_entropy(ddp(batch["image"]), batch["label"], reduction="none") * w).sum() / w.sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def flat(m: nn.Module) -> torch.Tensor:
    """The parameters, then the floating buffers (BatchNorm's running statistics: DDP copies
    rank 0's at the start of each forward, so after a step they differ between ranks)."""
    params = [p.detach().flatten() for p in m.parameters()]
    return torch.cat(params + [b.flatten() for b in m.buffers() if b.is_floating_point()])


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def gather(obj: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _worker(rank: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=WORLD)
    try:
        result: dict[str, Any] = {}
        # coverage: the shard comes from torch.distributed
        pipe = pipeline()
        result["shard"] = (pipe.rank, pipe.world)
        epochs = []
        for _ in range(EPOCHS):
            batches = list(pipe)
            valid = [i for b in batches for i in b["index"][b["valid"]].tolist()]
            epochs.append({"valid": gather(valid), "batches": gather(len(batches)), "len": len(pipe)})
        result["coverage"] = epochs
        pipe.close()

        # an uninterrupted run: DDP training on every batch of EPOCHS epochs
        net = model()
        ddp = nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        start = flat(net)
        pipe, stream, losses = pipeline(), [], []
        for _ in range(EPOCHS):
            for b in pipe:
                stream.append((b["index"], b["image"]))
                losses.append(step(ddp, opt, b))
        pipe.close()
        result["losses"] = losses
        result["changed"] = not torch.equal(start, flat(net))
        result["params"] = gather(flat(net))
        result["n_params"] = n_params(net)

        # the same run, checkpointed after STOP batches and continued in fresh objects
        net = model()
        ddp = nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        pipe, resumed = pipeline(), []
        for b in pipe:
            resumed.append((b["index"], b["image"]))
            step(ddp, opt, b)
            if len(resumed) == STOP:
                break
        ckpt = os.path.join(out, f"ckpt{rank}.pt")
        torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "pipe": pipe.state_dict()}, ckpt)
        pipe.close()
        del net, ddp, opt, pipe
        state = torch.load(ckpt, weights_only=False)
        net = model()
        net.load_state_dict(state["model"])
        ddp = nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        opt.load_state_dict(state["opt"])
        pipe = pipeline()
        pipe.load_state_dict(state["pipe"])
        for epoch in range(EPOCHS):
            for b in pipe:
                resumed.append((b["index"], b["image"]))
                step(ddp, opt, b)
        pipe.close()
        result["stream"], result["resumed"] = stream, resumed
        result["resumed_params"] = flat(net)
        torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    assert [r["shard"] for r in ranks] == [(0, 2), (1, 2)]

    # exactly once per epoch across the ranks, the same number of batches everywhere
    for epoch in range(EPOCHS):
        seen = ranks[0]["coverage"][epoch]
        assert seen == ranks[1]["coverage"][epoch]
        every = [i for part in seen["valid"] for i in part]
        assert sorted(every) == list(range(N)), f"epoch {epoch}"
        assert seen["batches"] == [seen["len"]] * WORLD == [5, 5]
    assert ranks[0]["coverage"][0]["valid"] != ranks[0]["coverage"][1]["valid"]  # reshuffled

    # training ran, and DDP kept the replicas equal
    for r in ranks:
        assert len(r["losses"]) == EPOCHS * 5
        assert all(torch.isfinite(torch.tensor(r["losses"])))
        assert r["changed"]
    a, b = ranks[0]["params"]
    k = ranks[0]["n_params"]
    assert torch.equal(a[:k], b[:k])

    # resuming continues the same data stream and the same training
    for r in ranks:
        assert len(r["resumed"]) == len(r["stream"]) == EPOCHS * 5
        for j, ((i0, x0), (i1, x1)) in enumerate(zip(r["stream"], r["resumed"])):
            assert torch.equal(i0, i1), f"batch {j}"
            assert torch.equal(x0, x1), f"batch {j}"
    for rank, r in enumerate(ranks):
        assert torch.equal(r["resumed_params"], r["params"][rank])  # parameters and statistics
    assert not torch.equal(ranks[0]["stream"][0][0], ranks[1]["stream"][0][0])  # different shards
