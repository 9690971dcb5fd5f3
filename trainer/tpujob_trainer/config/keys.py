"""The refusal of an unknown key: what it was probably meant to be (difflib's close matches
among the keys taken where it was written) and every key taken there. Shared by the trainer
config's errors and the operator's API models, so that a misspelt key reads the same in both."""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

_UNIONS = (Union, types.UnionType)


def _candidates(annotation: Any) -> list[Any]:
    """The types a value of `annotation` may have: Annotated and unions taken apart, None
    left out."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _candidates(get_args(annotation)[0])
    if origin in _UNIONS:
        return [t for arg in get_args(annotation) for t in _candidates(arg)]
    return [] if annotation is type(None) else [annotation]


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _field(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _step(types_: list[Any], part: int | str) -> list[Any]:
    """The types found one location part further in."""
    models = [t for t in types_ if _is_model(t)]
    if isinstance(part, str) and len(models) > 1:
        # Pydantic names the union member it tried by its class name.
        chosen = [t for t in models if t.__name__ == part]
        if chosen:
            return chosen
    out: list[Any] = []
    for t in types_:
        origin, args = get_origin(t), get_args(t)
        if isinstance(part, int) and origin in (list, tuple, set, frozenset) and args:
            out += _candidates(args[0])
        elif isinstance(part, str) and _is_model(t):
            found = _field(t, part)
            out += _candidates(found) if found is not None else []
        elif isinstance(part, str) and origin is dict and len(args) == 2:
            out += _candidates(args[1])
    return out


def keys_taken(model: type[BaseModel], where: Sequence[int | str], *,
               by_alias: bool = False) -> list[str]:
    """The keys the mapping at `where` (a pydantic error location, less the unknown key)
    takes, in the model's order; empty when it cannot be told."""
    types_: list[Any] = [model]
    for part in where:
        types_ = _step(types_, part)
    keys: list[str] = []
    for t in types_:
        if _is_model(t):
            for name, info in t.model_fields.items():
                key = (info.alias or name) if by_alias else name
                if key not in keys:
                    keys.append(key)
    return keys


def unknown_key_message(key: str, taken: Sequence[str], parent: str, *,
                        noun: str = "key") -> str:
    """`unknown key; did you mean train.steps? train takes: steps, global_batch, ...`:
    `parent` is the dotted path of the mapping holding `key` ("" at the top level)."""
    message = f"unknown {noun}"
    near = difflib.get_close_matches(key, list(taken), n=2, cutoff=0.7)
    if near:
        near_paths = [f"{parent}.{k}" if parent else k for k in near]
        message += f"; did you mean {' or '.join(near_paths)}?"
    if taken:
        message += f"{';' if not near else ''} {parent or 'the top level'} takes: "
        message += ", ".join(taken)
    return message
