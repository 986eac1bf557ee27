"""The objects of a sharded checkpoint, through torch.distributed.checkpoint (DCP): every
rank writes its own part (`__<rank>_<n>.distcp`), rank 0 the `.metadata` that says where
each tensor's pieces are, so that another number of ranks can load them (resharding).
The kit lists each part in its marker like any shard (`dcp/<file>`, size, checksum).

An object here is what DCP takes: a tensor dict, or anything with `state_dict()` and
`load_state_dict()` (DCP's `Stateful`). For an FSDP model and its optimizer, wrap them as
PyTorch's DCP tutorial does (an app state whose `state_dict` calls
`torch.distributed.checkpoint.state_dict.get_state_dict`), so that the optimizer's state is
keyed by parameter names rather than positions."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperguard_trainer.marker import Shard

FOLDER = "dcp"
_PART = re.compile(r"__(\d+)_\d+\.distcp")


def save(objects: Mapping[str, Any], path: Path, rank: int) -> list[tuple[str, Path, Shard]]:
    """A collective: DCP writes `objects` into `path`; this rank's files, each with its shard
    entry (named relative to the checkpoint folder)."""
    import torch.distributed.checkpoint as dcp

    path.mkdir(parents=True, exist_ok=True)
    dcp.save(dict(objects), checkpoint_id=str(path))
    files = []
    for file in sorted(path.iterdir()):
        part = _PART.fullmatch(file.name)
        if (part is not None and int(part.group(1)) == rank) or (
            file.name == ".metadata" and rank == 0
        ):
            data = file.read_bytes()
            name = f"{FOLDER}/{file.name}"
            files.append((name, file, Shard(name, len(data), hashlib.sha256(data).hexdigest())))
    return files


def load(objects: Mapping[str, Any], path: Path) -> None:
    """A collective: DCP loads `objects` in place from the parts in `path`."""
    import torch.distributed.checkpoint as dcp

    dcp.load(dict(objects), checkpoint_id=str(path))
