"""`hyperguard plan`: what failures cost a training run (hyperguard.planning), offline.

`plan` with its options computes one run (with `--from-deployment`, at the failure rate and
downtime the deployment's own incidents measured); `plan mtbf` and `plan reduction` print grids
over cluster sizes and failure rates; `plan commitment` prices a demand profile over commitment
sizes (hyperguard.planning.commitment). Every number is checked as argparse reads it, so a
value out of range is a usage error (exit status 2), never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from hyperguard import planning
from hyperguard.cli import options
from hyperguard.cli.output import print_json, print_renderable, print_table, table
from hyperguard.planning import MIN_INCIDENTS
from hyperguard.policies.prices import DEFAULT_REGION, REGIONS

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
        except planning.PlanInputError as exc:  # in the words the user typed: "1e7", not 1e+07
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
            planning.check_list("", values, check)
        except planning.PlanInputError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None
        return values

    return argument


def _bounded(low: float, high: float, *, low_open: bool) -> Callable[[str, float], float]:
    return lambda field, value: planning.check_range(field, value, low, high, low_open=low_open)


SIZE = _checked(options.whole, planning.check_size)
RATE = _checked(_number, planning.check_rate)
DOWNTIME = _checked(_number, planning.check_downtime)


# ---- commands -----------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.help_of
    given = {name: getattr(args, name) for name in PLAN_OPTIONS}
    if all(value is None for value in given.values()):
        parser.print_help()  # a bare `plan`: what it takes, and its subcommands
        return 0
    measured: dict[str, Any] | None = None
    if args.from_deployment:
        measured_names = ("failure_rate", "downtime_min")
        if any(given[name] is not None for name in measured_names):
            parser.error("--from-deployment measures --failure-rate and --downtime-min: omit them")
        measured = _deployment_inputs(args)
        given |= {name: measured[name]["value"] for name in measured_names}
    missing = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is None]
    if missing:
        parser.error(f"missing {', '.join(missing)}")
    try:
        inputs = planning.PlanInputs(
            **given, replacement_min=args.replacement_min, target=args.target
        )
    except planning.PlanInputError as exc:
        parser.error(str(exc))
    result = planning.plan(inputs)
    if measured is not None:
        result["inputs"] = measured
    if args.json:
        print_json(result)
    else:
        print_renderable(_render_plan(inputs, result))
    return 0


def _deployment_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """The failure rate and downtime the deployment's incidents measured (or the published
    ones where they are too few), read from the stack's tables as `incidents list` reads them."""
    from datetime import timedelta

    from hyperguard.models import utcnow
    from hyperguard.planning import measured

    end = utcnow()
    incident_store, node_store = args.deployment_stores(args)
    incidents = incident_store.recent(args.incidents_limit)
    nodes = node_store.all()
    inputs = measured.deployment_inputs(
        incidents, nodes, end - timedelta(days=args.window_days), end, args.deployment_instance_type
    )
    return measured.to_json(inputs) | {"window_days": args.window_days}


def _render_plan(inputs: planning.PlanInputs, result: dict[str, Any]) -> Any:
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
        *_measured_lines(result.get("inputs")),
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


def _measured_lines(measured: dict[str, Any] | None) -> list[str]:
    """Where `--from-deployment`'s two inputs came from, and how many incidents they rest on."""
    if measured is None:
        return []
    lines = [
        f"inputs for {measured['instance_type']} from the deployment's last "
        f"{measured['window_days']} days: {measured['incidents_considered']} unplanned "
        f"incident(s); a figure needs {measured['min_incidents']} or it is the published one"
    ]
    for name, unit in (("failure_rate", "failures per instance-hour"), ("downtime_min", "min")):
        figure = measured[name]
        label = "MEASURED" if figure["source"] == "measured" else "PUBLISHED (too few incidents)"
        lines.append(
            f"  {name.replace('_', ' ')}: {figure['value']:g} {unit} — {label}, "
            f"{figure['incidents']} incident(s)"
        )
    for row in measured["instance_types"]:
        total = row["recovery_s"]["total"]
        lines.append(
            f"  {row['instance_type']}: {row['instance_hours']:,.1f} instance-hours, "
            f"{row['incidents']} incident(s), MTBF {row['mtbf_hours'] or '-'} h, recovery "
            f"P50 {total['p50'] or '-'} s, P90 {total['p90'] or '-'} s"
        )
    return [*lines, ""]


def _grid_command(
    compute: Callable[[argparse.Namespace], dict[str, Any]], title: str
) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        parser: argparse.ArgumentParser = args.help_of
        _refuse_plan_options(args)
        try:
            result = compute(args)
        except planning.PlanInputError as exc:
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
    lambda a: planning.mtbf_grid(a.sizes, a.rates),
    "cluster MTBF, hours (rounded up)",
)
cmd_plan_reduction = _grid_command(
    lambda a: planning.reduction_grid(
        a.sizes, a.rates, a.reduction_downtime_min, a.reduction_baseline_downtime_min
    ),
    "% of training time saved",
)


# ---- plan commitment ----------------------------------------------------------------------
SPOT_INTERRUPTIONS_PER_HOUR = 0.01
"""Assumed (no published figure per instance type): one interruption per 100 spot
instance-hours."""
SPOT_LOST_HOURS = 0.5
"""Assumed: work since the last checkpoint plus the restart, per interruption."""
CURVE_ROWS_SHOWN = 40
"""The table shows every size up to this many, else evenly spaced ones and the minima."""
PRICE_OPTIONS = (
    ("committed", "ec2-capacity-block", "--committed-usd-per-hour"),
    ("on_demand", "ec2-on-demand", "--on-demand-usd-per-hour"),
    ("spot", "ec2-spot", "--spot-usd-per-hour"),
)
"""Each price, the purchase option (hyperguard.policies.prices) whose published price is its
default, and the option that sets it. The committed default is an EC2 Capacity Block, the
only commitment with a published per-instance rate found (D146): a HyperPod commitment (a
SageMaker Savings Plan, a flexible training plan) is priced per account or per offering, so
its rate is given with --committed-usd-per-hour."""


def cmd_plan_commitment(args: argparse.Namespace) -> int:
    from hyperguard.planning import commitment

    parser: argparse.ArgumentParser = args.help_of
    _refuse_plan_options(args)
    text = _demand_text(args.demand, parser)
    try:
        prices, sources = _prices(args)
        plan = commitment.plan_commitment(
            commitment.parse_demand(text), args.commitment_gpus_per_instance, prices
        )
    except commitment.DemandInputError as exc:
        parser.error(f"{args.demand}: {exc}")
    result = {
        "instance_type": args.instance_type,
        "region": args.region,
        **commitment.to_json(plan),
        "price_sources": sources,
    }
    if args.json:
        print_json(result)
    else:
        print_renderable(_render_commitment(result))
    return 0


def _demand_text(path: str, parser: argparse.ArgumentParser) -> str:
    from hyperguard.planning.commitment import MAX_FILE_BYTES

    try:
        with open(path, "rb") as demand:
            data = demand.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        parser.error(f"{path}: {exc.strerror or exc}")
    if len(data) > MAX_FILE_BYTES:
        parser.error(f"{path}: the file is larger than {MAX_FILE_BYTES // 1024 // 1024} MiB")
    try:
        return data.decode()
    except UnicodeDecodeError:
        parser.error(f"{path}: not UTF-8 text")


def _prices(args: argparse.Namespace) -> tuple[Any, dict[str, dict[str, object]]]:
    """The options' prices, else the published ones for the instance type in the region; and
    where each came from."""
    from hyperguard.catalogue import ec2_name
    from hyperguard.planning.commitment import Prices
    from hyperguard.policies.prices import PurchaseOption, price_of

    parser: argparse.ArgumentParser = args.help_of
    chosen: dict[str, float] = {}
    sources: dict[str, dict[str, object]] = {}
    for name, option, flag in PRICE_OPTIONS:
        given = getattr(args, f"{name}_usd_per_hour")
        if given is not None:
            chosen[name] = given
            sources[name] = {"option": "given", "usd_per_hour": given, "source": flag}
            continue
        published = price_of(PurchaseOption(option), ec2_name(args.instance_type), args.region)
        if published is None:
            parser.error(
                f"no published {option} price for {args.instance_type} in {args.region}: "
                f"give {flag}"
            )
        chosen[name] = published.usd_per_hour
        sources[name] = published.describe()
    prices = Prices(
        **chosen,
        spot_interruptions_per_hour=args.spot_interruptions_per_hour,
        spot_lost_hours=args.spot_lost_hours,
    )
    return prices, sources


def _render_commitment(result: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.text import Text

    prices = result["prices"]
    lines = [
        f"{result['span_hours']:,.1f} h of demand for {result['instance_type']} "
        f"({result['gpus_per_instance']} GPUs each): peak {result['peak_instances']} instances, "
        f"{result['demanded_instance_hours']:,.1f} instance-hours demanded",
        f"prices per instance-hour in {result['region']}: committed "
        f"${prices['committed_usd_per_hour']:g} (paid every hour, used or not), burst "
        f"on-demand ${prices['on_demand_usd_per_hour']:g}, spot ${prices['spot_usd_per_hour']:g}"
        f" (${prices['spot_effective_usd_per_hour']:g} with its interruptions' lost work)",
        *(f"  {name}: {_source(s)}" for name, s in result["price_sources"].items()),
        f"the peak committed all the time costs ${result['peak_committed_usd']:,.2f}",
    ]
    for kind in ("on_demand", "spot"):
        best = result[f"best_{kind}"]
        lines.append(
            f"burst on {kind.replace('_', '-')}: commit {best['committed_instances']} → "
            f"${best['total_usd']:,.2f}{_saving(best['saving_vs_peak_committed_pct'])}, "
            f"{best['burst_instance_hours']:,.1f} burst instance-hours over "
            f"{best['burst_hours']:,.1f} h; {_break_even(best['break_even_utilisation'])}"
        )
    lines.append(_why(result))
    minima = {
        result["best_on_demand"]["committed_instances"],
        result["best_spot"]["committed_instances"],
    }
    curve = result["curve"]
    step = max(1, -(-len(curve) // CURVE_ROWS_SHOWN))
    shown = [
        row
        for row in curve
        if row["committed_instances"] % step == 0
        or row["committed_instances"] in minima
        or row is curve[-1]
    ]
    rows = [{**row, "best": "◀" if row["committed_instances"] in minima else ""} for row in shown]
    columns = [
        ("committed_instances", "COMMITTED"),
        ("committed_usd", "COMMITTED $"),
        ("burst_instance_hours", "BURST INSTANCE-H"),
        ("burst_hours", "BURST H"),
        ("total_on_demand_usd", "TOTAL $ (ON-DEMAND BURST)"),
        ("total_spot_usd", "TOTAL $ (SPOT BURST)"),
        ("best", "MIN"),
    ]
    curve_table = table(rows, columns, title="\nthe cost curve (a model: docs/decisions.md)")
    return Group(Text("\n".join(lines)), curve_table)


def _saving(pct: float | None) -> str:
    return "" if pct is None else f" ({pct} % less than the peak committed)"


def _break_even(utilisation: float | None) -> str:
    if utilisation is None or utilisation >= 1:
        return "committing never pays at these prices: burst costs no more per instance-hour"
    return (
        f"an instance committed pays where demand reaches it more than "
        f"{100 * utilisation:.1f} % of the time"
    )


def _source(source: dict[str, Any]) -> str:
    if source["option"] == "given":
        return f"${source['usd_per_hour']:g}, given ({source['source']})"
    text = (
        f"${source['usd_per_hour']:g}, {source['option']}: {source['source']} "
        f"<{source['url']}>, read {source['read_on']}"
    )
    return text + (f" (an assumption: {source['assumed']})" if source["assumed"] else "")


def _why(result: dict[str, Any]) -> str:
    """Why the on-demand minimum commits what it does, from how often demand reaches each
    instance."""
    best = result["best_on_demand"]
    utilisation = best["break_even_utilisation"]
    if utilisation is None or utilisation >= 1:
        return (
            "why: a committed instance here costs at least what bursting it costs every hour "
            "it is needed, so no commitment pays; a cheaper commitment rate changes that"
        )
    span = float(result["span_hours"]) or 1.0
    curve = result["curve"]
    k = best["committed_instances"]

    def reached(n: int) -> float:
        """% of the span during which at least n instances are demanded."""
        return 100 * float(curve[n - 1]["burst_hours"]) / span

    text = (
        "why: a committed instance costs its rate every hour of the span and saves the "
        f"on-demand rate each hour demand reaches it, so it pays where demand reaches it more "
        f"than {100 * utilisation:.1f} % of the time"
    )
    if k:
        text += f"; demand reaches instance {k} {reached(k):.1f} % of the time: commit {k}"
    if k < result["peak_instances"]:
        text += (
            f"; instance {k + 1} only {reached(k + 1):.1f} % (the peaks): burst the rest on demand"
        )
    return text


def _refuse_plan_options(args: argparse.Namespace) -> None:
    """`plan`'s own options given before a subcommand are misplaced, not silently ignored."""
    stray = [f"--{n.replace('_', '-')}" for n in PLAN_OPTIONS if getattr(args, n) is not None]
    if args.from_deployment:
        stray.append("--from-deployment")
    if stray:
        args.help_of.error(
            f"{', '.join(stray)} given before `{args.cmd}`: its options go after its name"
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
        type=_listed(options.whole, planning.check_size),
        metavar="N,N,…",
        help=f"cluster sizes in instances, comma-separated (1 to {planning.MAX_GRID} of them)",
    )
    p.add_argument(
        "--rates",
        required=True,
        type=_listed(_number, planning.check_rate),
        metavar="R,R,…",
        help="failure rates per instance-hour, comma-separated fractions (0.0005 or 0.05%%)",
    )


def add_plan_parser(
    groups: Any, deployment_stores: Callable[[argparse.Namespace], tuple[Any, Any]]
) -> None:
    """`groups` is main's subparsers; `deployment_stores(args)` gives the stack's incident
    and node stores (`--from-deployment` reads them)."""
    text = "what failures cost a training run, with and without fast recovery (offline)"
    plan = groups.add_parser(
        "plan",
        help=text,
        description=f"{text}. Given its options, `plan` computes one run; `plan mtbf` and "
        "`plan reduction` print grids over cluster sizes and failure rates.",
    )
    plan.set_defaults(func=cmd_plan, help_of=plan, deployment_stores=deployment_stores)
    plan.add_argument("--instances", type=SIZE, metavar="N", help="instances in the cluster")
    plan.add_argument(
        "--gpus-per-instance",
        type=_checked(options.whole, planning.check_gpus_per_instance),
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
            _number, _bounded(planning.MIN_GPU_HOURS, planning.MAX_GPU_HOURS, low_open=False)
        ),
        metavar="H",
        help="GPU-hours the training needs",
    )
    _downtime_options(plan)
    plan.add_argument(
        "--gpu-hour-cost",
        type=_checked(_number, _bounded(0, planning.MAX_GPU_HOUR_COST, low_open=False)),
        metavar="C",
        help="price of one GPU-hour, USD",
    )
    plan.add_argument(
        "--replacement-min",
        type=_checked(_number, _bounded(0, planning.MAX_DOWNTIME_MIN, low_open=True)),
        default=planning.PUBLISHED_REPLACEMENT_MIN,
        metavar="M",
        help="minutes to replace a failed node, for the hot spares (default "
        f"{planning.PUBLISHED_REPLACEMENT_MIN:g}: HyperPod's published time)",
    )
    plan.add_argument(
        "--target",
        type=_checked(_number, _bounded(planning.MIN_TARGET, 0.5, low_open=False)),
        default=planning.DEFAULT_SPARE_TARGET,
        metavar="P",
        help="acceptable chance of running out of hot spares during one replacement "
        f"(default {planning.DEFAULT_SPARE_TARGET:g})",
    )
    _deployment_options(plan)
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

    p = sub.add_parser(
        "commitment",
        help="committed instances to buy for a demand profile, burst paying for the rest",
        description="The cost of a demand profile for each commitment size from 0 to its peak "
        "(committed instances paid all the time, the rest bought as on-demand or spot burst), "
        "the cheapest size and the burst hours it implies. A model: docs/decisions.md.",
    )
    _commitment_options(p)
    _json_option(p, inherited=True)
    p.set_defaults(func=cmd_plan_commitment, help_of=p)


def _deployment_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from-deployment",
        action="store_true",
        help="take --failure-rate and --downtime-min from the deployment's own incidents "
        f"(published ones where fewer than {MIN_INCIDENTS} support a figure)",
    )
    p.add_argument(
        "--endpoint",
        help="with --from-deployment: twin URL, or 'aws' (default $HYPERGUARD_ENDPOINT or "
        "http://127.0.0.1:4566)",
    )
    p.add_argument("--stack", default="hyperguard", help="CloudFormation stack name")
    p.add_argument(
        "--window-days",
        type=options.bounded_int(1, 366),
        default=30,
        metavar="D",
        help="with --from-deployment: the days of incidents and instance-hours (default 30)",
    )
    p.add_argument(
        "--incidents-limit",
        type=options.bounded_int(1, 10_000),
        default=1000,
        metavar="N",
        help="with --from-deployment: the newest incidents read at most (default 1000)",
    )
    p.add_argument(
        "--deployment-instance-type",
        metavar="TYPE",
        help="with --from-deployment: whose figures to plan with (default: the type with "
        "the most instance-hours)",
    )


def _commitment_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--demand",
        required=True,
        metavar="FILE",
        help="CSV: a `timestamp,gpus` header, then rows of an ISO 8601 time with offset and "
        "the GPUs demanded from then on (docs/cli.md)",
    )
    p.add_argument(
        "--instance-type",
        default="ml.p5.48xlarge",
        help="the instance type committed; its prices default to the published ones for its "
        "EC2 name in --region (default ml.p5.48xlarge)",
    )
    p.add_argument(
        "--region",
        choices=REGIONS,
        default=DEFAULT_REGION,
        help=f"the region whose published prices are the defaults (default {DEFAULT_REGION})",
    )
    p.add_argument(
        "--gpus-per-instance",
        dest="commitment_gpus_per_instance",
        type=options.bounded_int(1, planning.MAX_GPUS),
        default=8,
        metavar="G",
        help="GPUs per instance (default 8: ml.p5.48xlarge)",
    )
    price = _checked(_number, _bounded(0, planning.MAX_GPU_HOUR_COST, low_open=False))
    for name, kind, option in PRICE_OPTIONS:
        p.add_argument(
            option,
            type=price,
            metavar="USD",
            help=f"{name.replace('_', '-')} price per instance-hour (default: the published "
            f"{kind} price of the instance type in --region)",
        )
    p.add_argument(
        "--spot-interruptions-per-hour",
        type=options.number_between(0, 1),
        default=SPOT_INTERRUPTIONS_PER_HOUR,
        metavar="R",
        help=f"spot interruptions per instance-hour (default {SPOT_INTERRUPTIONS_PER_HOUR:g}, "
        "assumed)",
    )
    p.add_argument(
        "--spot-lost-hours",
        type=options.number_between(0, 24),
        default=SPOT_LOST_HOURS,
        metavar="H",
        help=f"hours of work lost per interruption (default {SPOT_LOST_HOURS:g}, assumed)",
    )
