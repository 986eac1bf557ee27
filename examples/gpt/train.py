"""A small GPT-style trainer made HyperGuard-ready with hyperguard-trainer (docs/trainer.md).

Run it as HyperGuard runs it: one process per rank (torchrun, or the training operator),
with HyperGuard's variables set. On a GPU it trains in bf16 with NCCL; on a CPU in fp32 with
gloo. Every call to the kit is marked `# kit:`.

    torchrun --nproc-per-node 8 examples/gpt/train.py --steps 2000 --checkpoint-every 100

The data is a deterministic synthetic token stream (a seeded Markov chain), so that a run and
its resumption can be compared step by step; its position is saved with the model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

import hyperguard_trainer as kit
import hyperguard_trainer.marker
import hyperguard_trainer.storage


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, 0.1) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as GPT-2
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)  # GPT-2's initialisation

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        length = idx.shape[1]
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool, device=idx.device), 1)
        x = self.tokens(idx) + self.positions(torch.arange(length, device=idx.device))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


class Stream:
    """Batches of a seeded Markov chain over the vocabulary; `position` is the next batch."""

    def __init__(self, vocab: int, context: int, batch: int, rank: int, world: int) -> None:
        table = np.random.default_rng(1234).dirichlet(np.full(vocab, 0.05), size=vocab)
        self.cumulative = torch.tensor(np.cumsum(table, axis=1), dtype=torch.float64)
        self.context, self.batch, self.rank, self.world = context, batch, rank, world
        self.position = 0

    def next(self) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.position * self.world + self.rank)
        self.position += 1
        rows = torch.zeros(self.batch, self.context + 1, dtype=torch.long)
        rows[:, 0] = torch.randint(0, self.cumulative.shape[0], (self.batch,), generator=generator)
        draws = torch.rand(self.batch, self.context, generator=generator, dtype=torch.float64)
        for t in range(self.context):
            previous = self.cumulative[rows[:, t]]
            rows[:, t + 1] = torch.searchsorted(previous, draws[:, t : t + 1].contiguous()).squeeze(
                1
            )
        return rows.clamp_(max=self.cumulative.shape[0] - 1)

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=int(os.environ.get("HYPERGUARD_MAX_STEPS", 200))
    )
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument(
        "--location", default=os.environ.get("HYPERGUARD_CHECKPOINT_URI", "./checkpoints")
    )
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument(
        "--background", action="store_true", help="write checkpoints in the background"
    )
    parser.add_argument("--losses", help="append each step's loss here (JSON lines)")
    parser.add_argument(
        "--slowdown",
        type=int,
        default=1,
        help="repeat this rank's forward pass N times (a slow GPU)",
    )
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument(
        "--sharded",
        action="store_true",
        help="save the model and optimizer through torch.distributed.checkpoint (resumable "
        "by another number of ranks)",
    )
    parser.add_argument(
        "--heartbeat-every", type=int, default=10, help="steps between heartbeats to HyperGuard"
    )
    parser.add_argument(
        "--die-in-checkpoint",
        type=int,
        default=-1,
        help="fault injection: SIGKILL this process once its shard of this step is written, "
        "before the marker (a node lost mid-checkpoint)",
    )
    return parser.parse_args()


class Dying:
    """A checkpoint target that kills its process right after writing one step's shard."""

    def __init__(self, target: kit.storage.Target, step: int) -> None:
        self.target, self.folder = target, kit.marker.folder(step)

    def __getattr__(self, name: str) -> object:
        return getattr(self.target, name)

    def put(self, key: str, data: bytes) -> None:
        self.target.put(key, data)
        if key.startswith(self.folder) and not key.endswith(kit.MARKER):
            os.kill(os.getpid(), signal.SIGKILL)


def train_step(
    model: GPT,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    batch: torch.Tensor,
    args: argparse.Namespace,
    progress: kit.Progress,
) -> float:
    """One step: forward and backward timed as this rank's compute, then the gradient
    all-reduce (outside the compute time), the optimizer and the schedule; the mean loss."""
    context, cuda = progress.context, batch.is_cuda
    with progress.compute():  # kit: forward and backward only, device synchronised
        with torch.autocast(batch.device.type, dtype=torch.bfloat16, enabled=cuda):
            if context.rank == args.slow_rank:
                with torch.no_grad():
                    for _ in range(args.slowdown - 1):
                        model(batch[:, :-1])
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    if context.world_size > 1:
        for parameter in model.parameters():
            if parameter.grad is not None:
                dist.all_reduce(parameter.grad)
                parameter.grad /= context.world_size
        dist.all_reduce(mean := loss.detach().clone())
        loss = mean / context.world_size
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    return float(loss.item())


def weights(model: nn.Module) -> float:
    """A fingerprint of the weights: their sum, in double precision."""
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main() -> int:
    args = parse()
    context = kit.Context.from_env()  # kit: job, run, attempt, rank, resume point
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if context.world_size > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)  # the same initial weights on every rank
    random.seed(context.rank)
    model = GPT(args.vocab, args.width, args.layers, args.heads, args.context).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
        ),
    )
    stream = Stream(args.vocab, args.context, args.batch, context.rank, context.world_size)
    state = {"model": model, "optimizer": optimizer, "schedule": schedule, "data": stream}

    progress = kit.Progress(context)  # kit: compute time per rank
    reporter = kit.Reporter(context) if context.api_url else None  # kit: reports to the API

    def completed(step: int, uri: str) -> None:  # rank 0, once the marker is written
        if reporter is not None:
            reporter.checkpoint(step, uri, timings.get(step))

    timings: dict[int, dict[str, float] | None] = {}
    target = kit.storage.target_for(args.location)
    if args.die_in_checkpoint >= 0:
        target = Dying(target, args.die_in_checkpoint)
    checkpointer = kit.Checkpointer(  # kit: contract v2 checkpoints
        target,
        context=context,
        background=args.background,
        on_complete=completed,
        sharded=args.sharded,
    )
    stop = kit.GracefulStop(context)  # kit: SIGTERM finishes the step, saves, exits
    started = time.perf_counter()
    step = checkpointer.resume(state, map_location=device)  # kit: 0 on a first run
    if context.rank == 0:
        print(
            json.dumps(
                {
                    "resumed_at": step,
                    "resume_s": round(time.perf_counter() - started, 3),
                    "weights": weights(model),
                }
            ),
            flush=True,
        )
    losses = args.losses if context.rank == 0 else None
    model.train()
    while step < args.steps:
        loss = train_step(model, optimizer, schedule, stream.next().to(device), args, progress)
        step += 1
        if losses is not None:
            with open(losses, "a") as out:
                out.write(json.dumps({"step": step, "loss": loss, "run": context.run}) + "\n")
        stopping = stop.requested
        if context.world_size > 1:  # every rank stops at the same step, whichever was told
            flag = torch.tensor([int(stopping)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stopping = bool(flag.item())
        beat = step % args.heartbeat_every == 0
        save = step % args.checkpoint_every == 0 or stopping or step == args.steps
        if beat or save:
            timings[step] = progress.node_step_seconds()  # kit: a collective
        if beat and reporter is not None and context.rank == 0:
            reporter.heartbeat(step, timings[step])  # kit: pace and stalls in minutes
        if save:
            checkpointer.save(step, state)  # kit: a collective
            if context.rank == 0:
                times = checkpointer.times
                snapshot = {"snapshot_s": round(times.snapshot_s, 4)}
                print(json.dumps({"step": step, **snapshot}), flush=True)
        if stopping:
            break
    checkpointer.close()  # kit: the last save is written before the process exits
    if context.rank == 0:
        print(json.dumps({"final_step": step, "weights": weights(model)}), flush=True)
    if context.world_size > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
