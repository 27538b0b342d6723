"""Constraint expressions over parameters, parsed safely (no eval).

The language is a small subset of Python expressions: parameter names, numbers, strings,
True/False/None, lists/tuples of those, arithmetic (+ - * / // % **), comparisons
(< <= > >= == != in, not in, chained), and/or/not, `a if cond else b` and parentheses.
Anything else is refused when the space file is loaded, not when a trial runs. Arithmetic is
bounded (MAX_EXPONENT, MAX_INT_BITS, MAX_REPEAT), so a typo cannot hang the controller, and a
comparison of values that do not compare (a string with a number) is an ExprError, not a TypeError.
"""

from __future__ import annotations

import ast
import itertools
import operator
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

MAX_EXPONENT = 64
MAX_INT_BITS = 1024
MAX_REPEAT = 10_000  # 'a' * n, (1, 2) * n


class ExprError(ValueError):
    pass


def _bounded_pow(base, exponent):
    if isinstance(exponent, (int, float)) and abs(exponent) > MAX_EXPONENT:
        raise ExprError(f"** is limited to exponents up to {MAX_EXPONENT} (got {exponent!r})")
    return operator.pow(base, exponent)


def _bounded_mul(left, right):
    for seq, count in ((left, right), (right, left)):
        if isinstance(seq, (str, tuple)) and isinstance(count, int) and count > MAX_REPEAT:
            raise ExprError(f"a repetition is limited to {MAX_REPEAT} (got {count})")
    return operator.mul(left, right)


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _bounded_mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: _bounded_pow,
}
_COMPARE = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


class Missing(Exception):
    """A name the expression needs is absent from the config (its condition is off)."""


@dataclass(frozen=True)
class Expr:
    source: str
    tree: ast.expr
    names: frozenset[str]

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        return _evaluate(self.tree, values)


def parse_expr(source: str, known_names: set[str] | None = None) -> Expr:
    """Parse and check an expression; raise ExprError with a reason a user can act on."""
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {source!r}: {exc.msg}") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif not isinstance(node, _ALLOWED_NODES):
            raise ExprError(f"{type(node).__name__} is not allowed in {source!r}")
    names -= {"True", "False", "None"}
    if known_names is not None and (unknown := sorted(names - known_names)):
        raise ExprError(f"unknown parameter {', '.join(unknown)} in {source!r}")
    return Expr(source, tree, frozenset(names))


_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.BinOp, ast.Compare, ast.Constant, ast.Name, ast.Load, ast.List, ast.Tuple, ast.IfExp,
    *_BINARY, *_COMPARE,
)


def _evaluate(node: ast.expr, values: Mapping[str, Any]) -> Any:
    match node:
        case ast.Constant(value=value):
            return value
        case ast.Name(id=name):
            if name not in values:
                raise Missing(name)
            return values[name]
        case ast.List(elts=elts) | ast.Tuple(elts=elts):
            return tuple(_evaluate(e, values) for e in elts)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return not _evaluate(operand, values)
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_evaluate(operand, values)
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return +_evaluate(operand, values)
        case ast.BoolOp(op=ast.And(), values=parts):
            return all(_evaluate(p, values) for p in parts)
        case ast.BoolOp(op=ast.Or(), values=parts):
            return any(_evaluate(p, values) for p in parts)
        case ast.IfExp(test=test, body=body, orelse=orelse):
            return _evaluate(body, values) if _evaluate(test, values) else _evaluate(orelse, values)
        case ast.BinOp(left=left, op=op, right=right):
            try:
                result = _BINARY[type(op)](_evaluate(left, values), _evaluate(right, values))
            except (ZeroDivisionError, TypeError, OverflowError) as exc:
                raise ExprError(str(exc)) from None
            if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
                raise ExprError(f"a result above 2**{MAX_INT_BITS} is refused")
            return result
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            current = _evaluate(left, values)
            for op, right_node in zip(ops, comparators):
                right = _evaluate(right_node, values)
                try:
                    holds = _COMPARE[type(op)](current, right)
                except TypeError:
                    raise ExprError(f"cannot compare {current!r} with {right!r}") from None
                if not holds:
                    return False
                current = right
            return True
    raise ExprError(f"unsupported expression node {type(node).__name__}")


MAX_PROBES = 4096


def first_type_error(expr: Expr, domains: Mapping[str, Sequence[Any]]) -> str | None:
    """Why `expr` fails on some combination of its names' possible values (each name's domain: a
    categorical's choices, a range's ends and middle), or None. Run when the space is loaded, so a
    comparison of 'auto' with 3 is refused there rather than mid-sweep; guards such as
    `x != None and x > 2` pass, since evaluation short-circuits as it will at run time."""
    names = sorted(n for n in expr.names if n in domains)
    for combo in itertools.islice(itertools.product(*(domains[n] for n in names)), MAX_PROBES):
        values = dict(zip(names, combo))
        try:
            expr.evaluate(values)
        except Missing:
            continue
        except ExprError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
            return f"{exc} (when {shown})"
    return None
