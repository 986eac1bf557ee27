"""Five of moto's costs cut: listing its own backends, parsing a JSONPath and parsing a state
machine's definition, paid once per process instead of on every use; a handler's methods
looked up by name instead of listed; a JSON template read as JSON."""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any


def cache_backend_lookup() -> None:
    """moto's server finds a request's backend by listing its own package folder and testing
    each entry with isdir, on every request (twice): about 150 stat calls, some 15 ms of CPU
    a call, most of what the twin's AWS calls cost. The folder does not change while the
    process runs, so it is listed once."""
    from moto import backends

    if not hasattr(backends.list_of_moto_modules, "cache_info"):
        listed = tuple(backends.list_of_moto_modules())
        backends.list_of_moto_modules = functools.cache(lambda: listed)


def answer_handler_methods_by_name() -> None:
    """moto lists a handler class's methods with `inspect.getmembers` on every request, only
    to ask whether the action's name is among them: 2 % of an idle twin's own CPU. The twin
    adds methods to handler classes as it goes (SageMaker's and EKS's operations, on a
    twin's start), so a list kept from an earlier request could miss one. The question is
    answered for the one name instead: whether the class has a function by that name now,
    which is what the listing answered."""
    from moto.core import responses

    names = vars(responses)  # the module's own namespace, where call_action looks it up
    if names["method_names_from_class"] is _MethodNames:
        return
    names["method_names_from_class"] = _MethodNames


class _MethodNames:
    """A handler class's methods, as `name in methods` asks of them."""

    __slots__ = ("clazz",)

    def __init__(self, clazz: object) -> None:
        self.clazz = clazz

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and inspect.isfunction(getattr(self.clazz, name, None))


_jsonpath_cached = False


def install_jsonpath_cache() -> None:
    """moto parses every JSONPath again on each use (an EventBridge input transformer, a
    state's InputPath, ResultPath, OutputPath), and jsonpath-ng builds a new yacc parser for
    each parse: a fifth of an idle twin's CPU. Parsed paths are immutable values; the same
    path text is parsed once, in this process."""
    global _jsonpath_cached
    if _jsonpath_cached:  # every test's stack asks; the first one installs
        return
    _jsonpath_cached = True
    import jsonpath_ng.ext
    from jsonpath_ng import parser as plain
    from jsonpath_ng.ext import parser as extended
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    parse_ext = functools.lru_cache(maxsize=4096)(extended.parse)
    parse_plain = functools.lru_cache(maxsize=4096)(plain.parse)
    jsonpath_ng.ext.parse = parse_ext  # type: ignore[attr-defined]  # moto.events imports it per call
    json_path.parse = parse_ext  # type: ignore[attr-defined]
    result_path.parse = parse_plain  # type: ignore[attr-defined]


def parse_json_templates_as_json() -> None:
    """moto reads every CloudFormation template with PyYAML's pure-Python loader, JSON too (a
    JSON document is YAML), and the twin's stack is JSON (`deploy.deploy`): about 0.4 CPU-s a
    stack, 7 % of a twin's start in its own process. JSON is read with the json module, to
    the same mapping; a template that is not JSON goes to moto's YAML reading as before."""
    from moto.cloudformation.models import Stack

    if getattr(Stack.parse_template, "reads_json", False):
        return
    read_yaml = Stack.parse_template

    def parse_template(template: str) -> dict[str, Any]:
        try:
            parsed = json.loads(template)
        except ValueError:
            return read_yaml(template)
        return parsed if isinstance(parsed, dict) else read_yaml(template)

    parse_template.reads_json = True  # type: ignore[attr-defined]
    Stack.parse_template = staticmethod(parse_template)  # type: ignore[method-assign]


def parse_each_state_machine_once() -> None:
    """moto's Step Functions parses a definition with ANTLR's pure-Python runtime when the
    state machine is created and again at the start of each execution: 70-80 ms of CPU for
    NodeRecovery's, which held the first Task of every recovery back by about 100 ms on two
    busy cores (`bench/recovery.py`, D216). The parse tree depends only on the definition's
    text, and the preprocessor only reads it, so a text's tree is kept; each use still builds
    its own evaluation components from it, as before. A definition with syntax errors is
    parsed again each time and refused as before."""
    from antlr4 import CommonTokenStream, InputStream, ParserRuleContext
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLLexer import ASLLexer
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLParser import ASLParser
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
    from moto.stepfunctions.parser.asl.parse.asl_parser import (
        AmazonStateLanguageParser,
        ASLParserException,
        SyntaxErrorListener,
    )
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    if getattr(AmazonStateLanguageParser.parse, "keeps_trees", False):
        return

    @functools.lru_cache(maxsize=64)
    def tree_of(definition: str) -> ParserRuleContext:
        errors = SyntaxErrorListener()  # type: ignore[no-untyped-call]
        parser = ASLParser(CommonTokenStream(ASLLexer(InputStream(definition))))
        parser.removeErrorListeners()
        parser.addErrorListener(errors)
        tree = parser.state_machine()  # type: ignore[no-untyped-call]
        if errors.errors:
            raise ASLParserException(errors=errors.errors)  # not kept: lru_cache keeps values
        return tree

    def parse(definition: str) -> tuple[EvalComponent, ParserRuleContext]:
        tree = tree_of(definition)
        return Preprocessor().visit(tree), tree

    parse.keeps_trees = True  # type: ignore[attr-defined]
    AmazonStateLanguageParser.parse = staticmethod(parse)  # type: ignore[method-assign]
