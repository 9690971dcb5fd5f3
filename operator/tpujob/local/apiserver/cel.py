"""A subset of CEL for CRD `x-kubernetes-validations` rules.

Rules are translated to a Python expression tree and walked by a whitelisting evaluator: literals,
`self`/`oldSelf`, field access, indexing, `has()`, `size()`, `int()`, `string()`, `double()`,
the methods `size`, `startsWith`, `endsWith`, `contains`, `matches`, the macros `all`, `exists`,
`exists_one`, `map`, `filter`, the operators `== != < <= > >= && || ! in + - * / %` and
`cond ? a : b`. A rule using anything else is not evaluated (`compile_rule` returns None)."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from typing import Any

_TOKENS = re.compile(r"""\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|&&|\|\||!=|==|<=|>=|[!?:]|"""
                     r"""[A-Za-z_][A-Za-z0-9_]*|\d+\.\d+|\d+u?|[-+*/%<>()\[\].,{}]""")


class CelError(Exception):
    """Evaluation failed (for example a field the rule reads is absent)."""


def _translate(rule: str) -> str | None:
    out, pos = [], 0
    while pos < len(rule):
        match = _TOKENS.match(rule, pos)
        if not match:
            return None
        token, pos = match.group(), match.end()
        mapping = {"&&": " and ", "||": " or ", "!": " not ", "true": "True", "false": "False",
                   "null": "None"}
        if token in ("?", ":"):
            out.append(f" {token} ")
        elif token in mapping:
            out.append(mapping[token])
        elif token in ("and", "or", "not", "is", "lambda", "True", "False", "None"):
            return None
        elif re.fullmatch(r"\d+u", token):
            out.append(token[:-1])
        else:
            out.append(token)
    text = "".join(out)
    return _ternaries(text) if "?" in text else text


def _ternaries(text: str) -> str | None:
    # `c ? a : b` -> `(a) if (c) else (b)`, for one top-level conditional.
    depth, q, colon = 0, None, None
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "?" and depth == 0 and q is None:
            q = i
        elif char == ":" and depth == 0 and q is not None:
            colon = i
            break
    if q is None or colon is None or "?" in text[q + 1:colon]:
        return None
    rest = text[colon + 1:]
    if "?" in rest:
        rest = _ternaries(rest)
        if rest is None:
            return None
    return f"({text[q + 1:colon]}) if ({text[:q]}) else ({rest})"


@functools.lru_cache(maxsize=1024)
def compile_rule(rule: str) -> Callable[[dict[str, Any]], Any] | None:
    """A function of the bindings (`self`, optionally `oldSelf`), or None when unsupported.
    Cached: the same rules come back with every object of a kind."""
    text = _translate(rule)
    if text is None:
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    if not _supported(tree.body):
        return None
    return lambda bindings: _eval(tree.body, bindings)


_FUNCS = {"has", "size", "int", "string", "double", "bool"}
_METHODS = {"size", "startsWith", "endsWith", "contains", "matches", "all", "exists",
            "exists_one", "map", "filter"}
_NODES = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Add,
          ast.Sub, ast.Mult, ast.Div, ast.Mod, ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE,
          ast.Gt, ast.GtE, ast.In, ast.Constant, ast.Name, ast.Load, ast.Attribute, ast.Subscript,
          ast.Call, ast.List, ast.Dict, ast.IfExp)


def _supported(node: ast.AST) -> bool:
    for child in ast.walk(node):
        if not isinstance(child, _NODES):
            return False
        if isinstance(child, ast.Call):
            func = child.func
            if isinstance(func, ast.Name) and func.id not in _FUNCS:
                return False
            if isinstance(func, ast.Attribute) and func.attr not in _METHODS:
                return False
            if child.keywords:
                return False
    return True


def _size(value: Any) -> int:
    if isinstance(value, (str, list, dict)):
        return len(value)
    raise CelError(f"no such overload: size({type(value).__name__})")


def _attr(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        if name not in value:
            raise CelError(f"no such key: {name}")
        return value[name]
    raise CelError(f"no such key: {name}")


_COMPARISONS = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
                ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
                ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
                ast.In: lambda a, b: a in b}


def _eval(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise CelError(f"undeclared reference to '{node.id}'")
        return env[node.id]
    if isinstance(node, ast.Attribute):
        return _attr(_eval(node.value, env), node.attr)
    if isinstance(node, ast.Subscript):
        container, key = _eval(node.value, env), _eval(node.slice, env)
        try:
            return container[key]
        except (KeyError, IndexError, TypeError) as err:
            raise CelError(f"no such key: {key}") from err
    if isinstance(node, ast.List):
        return [_eval(e, env) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_eval(k, env): _eval(v, env) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_truth(_eval(v, env)) for v in node.values)
        return any(_truth(_eval(v, env)) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        return (not _truth(value)) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _truth(_eval(node.test, env)) else node.orelse, env)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
               ast.Mult: lambda a, b: a * b, ast.Mod: lambda a, b: a % b,
               ast.Div: lambda a, b: a // b if isinstance(a, int) and isinstance(b, int)
               else a / b}
        try:
            return ops[type(node.op)](left, right)
        except (TypeError, ZeroDivisionError) as err:
            raise CelError(str(err)) from err
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, env)
            try:
                ok = _COMPARISONS[type(op)](left, right)
            except TypeError as err:
                raise CelError(str(err)) from err
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        return _call(node, env)
    raise CelError(f"unsupported expression {ast.dump(node)}")


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        raise CelError("no matching overload for a boolean operator")
    return value


def _call(node: ast.Call, env: dict[str, Any]) -> Any:
    func = node.func
    if isinstance(func, ast.Name):
        if func.id == "has":
            target = node.args[0]
            if not isinstance(target, ast.Attribute):
                raise CelError("invalid argument to has() macro")
            parent = _eval(target.value, env)
            return isinstance(parent, dict) and target.attr in parent
        value = _eval(node.args[0], env)
        conversions = {"size": _size, "int": int, "string": str, "double": float, "bool": bool}
        return conversions[func.id](value)
    assert isinstance(func, ast.Attribute)
    receiver = _eval(func.value, env)
    name = func.attr
    if name in ("all", "exists", "exists_one", "map", "filter"):
        var = node.args[0]
        if not isinstance(var, ast.Name) or len(node.args) != 2:
            raise CelError(f"invalid {name} macro")
        items = list(receiver) if isinstance(receiver, (list, dict)) else None
        if items is None:
            raise CelError(f"no matching overload for {name}")
        results = [_eval(node.args[1], {**env, var.id: item}) for item in items]
        if name == "all":
            return all(_truth(r) for r in results)
        if name == "exists":
            return any(_truth(r) for r in results)
        if name == "exists_one":
            return sum(1 for r in results if _truth(r)) == 1
        if name == "map":
            return results
        return [item for item, r in zip(items, results, strict=True) if _truth(r)]
    args = [_eval(a, env) for a in node.args]
    if name == "size":
        return _size(receiver)
    if not isinstance(receiver, str):
        raise CelError(f"no matching overload for {name}")
    if name == "startsWith":
        return receiver.startswith(args[0])
    if name == "endsWith":
        return receiver.endswith(args[0])
    if name == "contains":
        return args[0] in receiver
    return re.search(args[0], receiver) is not None
