"""How the incident, execution and watch commands reach the service: built by main from
--endpoint/--stack, handed to each command module (which so never imports main)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


class Deps:
    """How the commands reach the service (main builds these from --endpoint/--stack)."""

    def __init__(
        self,
        service: Callable[[argparse.Namespace], Any],
        incidents: Callable[[argparse.Namespace], Any],
        operator: Callable[[argparse.Namespace], Any],
    ) -> None:
        self.service, self.incidents, self.operator = service, incidents, operator
