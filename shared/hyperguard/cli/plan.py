"""`hyperguard plan`: what failures cost a training run (hyperguard.planner), offline.

`plan` with its options computes one run; `plan mtbf` and `plan reduction` print grids
over cluster sizes and failure rates. Every number is checked as argparse reads it, so a
value out of range is a usage error (exit status 2), never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from hyperguard import planner
from hyperguard.cli import options
from hyperguard.cli.output import print_json, print_renderable, print_table, table

PLAN_OPTIONS = (
    "instances",
    "gpus_per_instance",
    "failure_rate",
    "gpu_hours",
    "downtime_min",
    "baseline_downtime_min",
    "gpu_hour_cost",
)
"""The bare `plan`'s inputs, all required there (`--replacement-min`, `--target` default)."""


# ---- argument types: planner's ranges, as usage errors -----------------------------------
def _number(text: str) -> float:
    """A number; `0.05%` is 0.0005, so a rate can be typed as the reference prints it."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a number") from None


def _checked[N: (int, float)](
    parse: Callable[[str], N], check: Callable[[str, N], N]
) -> Callable[[str], N]:
    def argument(text: str) -> N:
        try:
            return check("", parse(text))
        except planner.PlanInputError as exc:  # in the words the user typed: "1e7", not 1e+07
            raise argparse.ArgumentTypeError(f"{text} {exc.reason}") from None

    return argument


def _listed[N: (int, float)](
    parse: Callable[[str], N], check: Callable[[str, N], N]
) -> Callable[[str], list[N]]:
    """A comma-separated list: `4,8,16`."""
    one = _checked(parse, check)

    def argument(text: str) -> list[N]:
        items = [item.strip() for item in text.split(",")]
        if "" in items:
            raise argparse.ArgumentTypeError(f"{text!r} has an empty value")
        values = [one(item) for item in items]
        try:
            planner.check_list("", values, check)
        except planner.PlanInputError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None
        return values

    return argument


def _bounded(low: float, high: float, *, low_open: bool) -> Callable[[str, float], float]:
    return lambda field, value: planner.check_range(field, value, low, high, low_open=low_open)


SIZE = _checked(options.whole, planner.check_size)
RATE = _checked(_number, planner.check_rate)
DOWNTIME = _checked(_number, planner.check_downtime)


# ---- commands -----------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.help_of
    given = {name: getattr(args, name) for name in PLAN_OPTIONS}
    if all(value is None for value in given.values()):
        parser.print_help()  # a bare `plan`: what it takes, and its subcommands
        return 0
    missing = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is None]
    if missing:
        parser.error(f"missing {', '.join(missing)}")
    try:
        inputs = planner.PlanInputs(
            **given, replacement_min=args.replacement_min, target=args.target
        )
    except planner.PlanInputError as exc:
        parser.error(str(exc))
    result = planner.plan(inputs)
    if args.json:
        print_json(result)
    else:
        print_renderable(_render_plan(inputs, result))
    return 0


def _render_plan(inputs: planner.PlanInputs, result: dict[str, Any]) -> Any:
    gpus = inputs.instances * inputs.gpus_per_instance
    rows = [
        {
            "figure": "days lost to failures",
            "with": f"{result['days_lost']:,.1f}",
            "without": f"{result['days_lost_baseline']:,.1f}",
        },
        {
            "figure": "days to train",
            "with": f"{result['days_to_train']:,.1f}",
            "without": f"{result['days_to_train_baseline']:,.1f}",
        },
    ]
    columns = [
        ("figure", ""),
        ("with", f"WITH ({inputs.downtime_min:g} MIN/FAILURE)"),
        ("without", f"WITHOUT ({inputs.baseline_downtime_min:g} MIN/FAILURE)"),
    ]
    lines = [
        f"{inputs.gpu_hours:,.0f} GPU-hours on {inputs.instances} instances ({gpus} GPUs): "
        f"{result['compute_days']:,.1f} days of compute if nothing failed",
        f"MTBF {result['mtbf_hours']:,.2f} h: {result['failures_per_hour']:g} failures per "
        f"hour, {result['expected_failures']:,.0f} over the run",
    ]
    summary = [
        f"{result['improvement_pct']:.1f} % less training time: {result['days_saved']:,.1f} "
        f"days and ${result['cost_saved_usd']:,.0f} saved at "
        f"${inputs.gpu_hour_cost:g} per GPU-hour",
        f"hot spares: {result['hot_spares']} (chance that more nodes fail during one "
        f"{inputs.replacement_min:g}-minute replacement: "
        f"{100 * result['hot_spares_shortfall_probability']:.3g} %, target "
        f"{100 * inputs.target:g} %)",
    ]
    comparison = table(rows, columns)  # first: the clear message when rich is missing
    by_strategy = table(
        [
            {
                "strategy": name,
                "downtime": f"{figures['downtime_min']:.1f}",
                "lost": f"{figures['days_lost']:,.1f}",
                "improvement": f"{figures['improvement_pct']:.1f}",
            }
            for name, figures in result["strategies"].items()
        ],
        [
            ("strategy", "HYPERGUARD STRATEGY"),
            ("downtime", "MIN/FAILURE"),
            ("lost", "DAYS LOST"),
            ("improvement", "% LESS TIME THAN WITHOUT"),
        ],
        title="\neach strategy's downtime per failure (published component times + "
        "HyperGuard's measured overhead)",
    )
    from rich.console import Group
    from rich.text import Text

    return Group(Text("\n".join(lines) + "\n"), comparison, Text("\n".join(summary)), by_strategy)


def _grid_command(
    compute: Callable[[argparse.Namespace], dict[str, Any]], title: str
) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        parser: argparse.ArgumentParser = args.help_of
        stray = [f"--{n.replace('_', '-')}" for n in PLAN_OPTIONS if getattr(args, n) is not None]
        if stray:
            parser.error(
                f"{', '.join(stray)} given before `{args.cmd}`: its options go after its name"
            )
        try:
            result = compute(args)
        except planner.PlanInputError as exc:
            parser.error(str(exc))
        if args.json:
            print_json(result)
        else:
            _print_grid(result, title)
        return 0

    return command


def _print_grid(result: dict[str, Any], title: str) -> None:
    sizes: Sequence[int] = result["sizes"]
    rows = [
        {"rate": rate, **{str(size): value for size, value in zip(sizes, values, strict=True)}}
        for rate, values in result["grid"].items()
    ]
    columns = [("rate", "RATE \\ INSTANCES"), *((str(s), str(s)) for s in sizes)]
    print_table(rows, columns, title)


cmd_plan_mtbf = _grid_command(
    lambda a: planner.mtbf_grid(a.sizes, a.rates),
    "cluster MTBF, hours (rounded up)",
)
cmd_plan_reduction = _grid_command(
    lambda a: planner.reduction_grid(
        a.sizes, a.rates, a.reduction_downtime_min, a.reduction_baseline_downtime_min
    ),
    "% of training time saved",
)


# ---- parser -------------------------------------------------------------------------------
def _json_option(p: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    # a subcommand's --json must not reset the one given before it (`plan --json mtbf`)
    default = argparse.SUPPRESS if inherited else False
    p.add_argument("--json", action="store_true", default=default, help="print JSON only")


def _downtime_options(p: argparse.ArgumentParser, dest_prefix: str = "") -> None:
    """Required by the subcommand (`dest_prefix`: its own names, so that one given to `plan`
    itself is seen as misplaced); `plan` checks its own."""
    for name, metavar, text in (
        ("downtime_min", "D", "minutes lost per failure with fast recovery (HyperPod: 40)"),
        ("baseline_downtime_min", "B", "minutes lost per failure without it (published: 280)"),
    ):
        p.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"{dest_prefix}{name}",
            required=bool(dest_prefix),
            type=DOWNTIME,
            metavar=metavar,
            help=text,
        )


def _grid_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sizes",
        required=True,
        type=_listed(options.whole, planner.check_size),
        metavar="N,N,…",
        help=f"cluster sizes in instances, comma-separated (1 to {planner.MAX_GRID} of them)",
    )
    p.add_argument(
        "--rates",
        required=True,
        type=_listed(_number, planner.check_rate),
        metavar="R,R,…",
        help="failure rates per instance-hour, comma-separated fractions (0.0005 or 0.05%%)",
    )


def add_plan_parser(groups: Any) -> None:
    """`groups` is main's subparsers."""
    text = "what failures cost a training run, with and without fast recovery (offline)"
    plan = groups.add_parser(
        "plan",
        help=text,
        description=f"{text}. Given its options, `plan` computes one run; `plan mtbf` and "
        "`plan reduction` print grids over cluster sizes and failure rates.",
    )
    plan.set_defaults(func=cmd_plan, help_of=plan)
    plan.add_argument("--instances", type=SIZE, metavar="N", help="instances in the cluster")
    plan.add_argument(
        "--gpus-per-instance",
        type=_checked(options.whole, planner.check_gpus_per_instance),
        metavar="G",
        help="GPUs per instance (ml.p5.48xlarge: 8)",
    )
    plan.add_argument(
        "--failure-rate",
        type=RATE,
        metavar="R",
        help="failures per instance-hour, a fraction in (0, 1]: 0.0005 or 0.05%%",
    )
    plan.add_argument(
        "--gpu-hours",
        type=_checked(
            _number, _bounded(planner.MIN_GPU_HOURS, planner.MAX_GPU_HOURS, low_open=False)
        ),
        metavar="H",
        help="GPU-hours the training needs",
    )
    _downtime_options(plan)
    plan.add_argument(
        "--gpu-hour-cost",
        type=_checked(_number, _bounded(0, planner.MAX_GPU_HOUR_COST, low_open=False)),
        metavar="C",
        help="price of one GPU-hour, USD",
    )
    plan.add_argument(
        "--replacement-min",
        type=_checked(_number, _bounded(0, planner.MAX_DOWNTIME_MIN, low_open=True)),
        default=planner.PUBLISHED_REPLACEMENT_MIN,
        metavar="M",
        help="minutes to replace a failed node, for the hot spares (default "
        f"{planner.PUBLISHED_REPLACEMENT_MIN:g}: HyperPod's published time)",
    )
    plan.add_argument(
        "--target",
        type=_checked(_number, _bounded(planner.MIN_TARGET, 0.5, low_open=False)),
        default=planner.DEFAULT_SPARE_TARGET,
        metavar="P",
        help="acceptable chance of running out of hot spares during one replacement "
        f"(default {planner.DEFAULT_SPARE_TARGET:g})",
    )
    _json_option(plan)
    sub = plan.add_subparsers(dest="cmd", metavar="COMMAND", title="grids (instead of one run)")

    p = sub.add_parser("mtbf", help="cluster MTBF in hours (rounded up) per size and rate")
    _grid_options(p)
    _json_option(p, inherited=True)
    p.set_defaults(func=cmd_plan_mtbf, help_of=p)

    p = sub.add_parser("reduction", help="%% of training time saved per size and rate")
    _grid_options(p)
    _downtime_options(p, "reduction_")
    p.set_defaults(func=cmd_plan_reduction, help_of=p)
    _json_option(p, inherited=True)
