"""A rank's state as bytes and back: the objects the trainer names (anything with
`state_dict()` / `load_state_dict()`, such as a model, an optimizer, a scheduler or a
sampler, or a plain value such as a data position) and every random generator the process
draws from (Python's, NumPy's global one and torch's CPU and CUDA ones, where installed).

With torch installed the shard is `torch.save`d (tensors stay tensors, without a pickle
copy of their storage); without it, pickled. Loading unpickles: read only checkpoints your
own job wrote (the job's checkpoint bucket)."""

from __future__ import annotations

import io
import pickle
import random
import sys
from collections.abc import MutableMapping
from typing import Any

_FORMAT = 2


def _torch() -> Any | None:
    return sys.modules.get("torch")  # imported by the trainer, never by the kit


def capture(state: MutableMapping[str, Any], step: int) -> dict[str, Any]:
    """The state to save at `step`: each named object's state dict (or the value itself)
    and the random generators' states."""
    return {
        "format": _FORMAT,
        "step": step,
        "state": {
            name: obj.state_dict() if hasattr(obj, "state_dict") else obj
            for name, obj in state.items()
        },
        "rng": rng_state(),
    }


def restore(state: MutableMapping[str, Any], saved: dict[str, Any]) -> int:
    """Load `saved` into the named objects (values that have no `load_state_dict` are
    replaced in `state`) and the generators; the step it was saved at. Every name in
    `state` must be in the checkpoint: a forgotten one would resume silently wrong."""
    missing = sorted(set(state) - set(saved["state"]))
    if missing:
        raise KeyError(f"the checkpoint has no state for {', '.join(missing)}")
    for name, obj in state.items():
        if hasattr(obj, "load_state_dict"):
            obj.load_state_dict(saved["state"][name])
        else:
            state[name] = saved["state"][name]
    set_rng_state(saved["rng"])
    return int(saved["step"])


def rng_state() -> dict[str, Any]:
    states: dict[str, Any] = {"python": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    torch = _torch()
    if torch is not None:
        states["torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_state(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy" in states:
        numpy.random.set_state(states["numpy"])
    torch = _torch()
    if torch is not None and "torch" in states:
        torch.set_rng_state(states["torch"])
        if "cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(states["cuda"])


def dumps(saved: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch = _torch()
    if torch is not None:
        torch.save(saved, buffer)
    else:
        pickle.dump(saved, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    return buffer.getvalue()


def loads(data: bytes, *, map_location: Any = None) -> dict[str, Any]:
    torch = _torch()
    if torch is not None and data[:2] == b"PK":  # torch.save's zip format
        saved = torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
    else:
        saved = pickle.loads(data)
    if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
        raise ValueError("not a hyperguard-trainer shard")
    return saved
