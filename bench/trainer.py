"""What the trainer kit costs a training loop: checkpoint snapshot and write times, the loop's
wait with background saves, and the time to resume, for the reference trainer's GPT at a
given size. JSON on stdout.

Needs PyTorch (not in the dev environment: CI installs no multi-GB torch build). Run it with
a Python that has torch, from the repository root:

    PYTHONPATH=trainer:examples/gpt /path/to/torch/python bench/trainer.py --width 768 --layers 12

On a GPU machine it measures on the GPU (state copied to host by torch.save); elsewhere on
the CPU. The checkpoint goes to a local directory (`--location`, default a temporary one):
what is measured is the kit's serialisation and the file system's write, not S3's.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import torch
from torch.nn import functional as F
from train import GPT, Stream

import hyperguard_trainer as kit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--location")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = GPT(args.vocab, args.width, args.layers, args.heads, args.context).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    stream = Stream(args.vocab, args.context, args.batch, 0, 1)

    def step() -> float:
        start = time.perf_counter()
        batch = stream.next().to(device)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    step()  # the optimizer's state exists from here
    state = {"model": model, "optimizer": optimizer, "data": stream}
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory() as scratch:
        location = args.location or scratch
        context = kit.Context(job_id="bench")
        sync = kit.Checkpointer(location, context=context)
        rows: dict[str, list[float]] = {k: [] for k in ("step_s", "snapshot_s", "write_s")}
        for i in range(args.repeats):
            rows["step_s"].append(step())
            sync.save(10 + i, state)
            rows["snapshot_s"].append(sync.times.snapshot_s)
            rows["write_s"].append(sync.times.write_s)
        background = kit.Checkpointer(location, context=context, background=True)
        blocked: list[float] = []
        for i in range(args.repeats):
            step()
            background.save(100 + i, state)
            blocked.append(background.times.snapshot_s + background.times.blocked_s)
        background.close()
        size = sum(kit.storage.LocalTarget(location).listing("step-00000010/").values())
        resume_s = []
        for _ in range(args.repeats):
            fresh = {"model": model, "optimizer": optimizer, "data": stream}
            start = time.perf_counter()
            kit.Checkpointer(location, context=context).resume(fresh, map_location=device)
            first = step()
            resume_s.append(time.perf_counter() - start - first)
    result: dict[str, Any] = {
        "date": datetime.now(UTC).date().isoformat(),
        "machine": platform.machine(),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "parameters": params,
        "checkpoint_bytes": size,
        "repeats": args.repeats,
        "median": {
            "train_step_s": _median(rows["step_s"]),
            "sync_snapshot_s": _median(rows["snapshot_s"]),
            "sync_write_s": _median(rows["write_s"]),
            "background_loop_wait_s": _median(blocked),
            "resume_load_s": _median(resume_s),
        },
    }
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2], 4)


if __name__ == "__main__":
    sys.exit(main())
