"""hyperguard-trainer: make a training job resumable, measurable and fenced under HyperGuard
(docs/trainer.md). PyTorch is optional: the kit uses it where the trainer imported it."""

from hyperguard_trainer.checkpoint import Checkpointer, CheckpointError, Fenced, SaveTimes
from hyperguard_trainer.context import Context, ContextError
from hyperguard_trainer.marker import MARKER, Marker, MarkerError, Shard
from hyperguard_trainer.progress import Progress, Reporter
from hyperguard_trainer.stop import GracefulStop

__all__ = [
    "MARKER",
    "CheckpointError",
    "Checkpointer",
    "Context",
    "ContextError",
    "Fenced",
    "GracefulStop",
    "Marker",
    "MarkerError",
    "Progress",
    "Reporter",
    "SaveTimes",
    "Shard",
]
