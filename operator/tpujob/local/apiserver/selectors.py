"""Label and field selectors: parsing the query-string syntax and matching objects (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A label key is a qualified name: an optional DNS subdomain prefix (at most 253 characters)
# and a slash, then a name of at most 63 (apimachinery's IsQualifiedName).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Requirement:
    """One term of a selector: `key <op> values`; op is =, !=, in, notin, exists, !exists."""

    key: str
    op: str
    values: tuple[str, ...] = ()


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t.strip() for t in terms if t.strip()]


def _check_key(key: str, term: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if not (_NAME.match(name) and len(name) <= 63
            and (not slash or (_SUBDOMAIN.match(prefix) and len(prefix) <= 253))):
        raise ValueError(f"unable to parse requirement: invalid label key {key!r} in {term!r}")
    return key


def _check_value(value: str, term: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise ValueError(f"unable to parse requirement: invalid label value {value!r} in {term!r}")
    return value


_SET_TERM = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (f,g),h notin (i),j,!k`; raise ValueError on bad syntax."""
    requirements = []
    for term in _split_terms(text or ""):
        if match := _SET_TERM.match(term):
            values = tuple(_check_value(v.strip(), term) for v in match["values"].split(","))
            requirements.append(Requirement(_check_key(match["key"], term), match["op"], values))
        elif term.startswith("!"):
            requirements.append(Requirement(_check_key(term[1:].strip(), term), "!exists"))
        elif "!=" in term:
            key, value = term.split("!=", 1)
            requirements.append(Requirement(_check_key(key.strip(), term), "!=",
                                            (_check_value(value.strip(), term),)))
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            requirements.append(Requirement(_check_key(key.strip(), term), "=",
                                            (_check_value(value.strip(), term),)))
        elif re.search(r"\s|[()]", term):
            raise ValueError(f"unable to parse requirement: {term!r}")
        else:
            requirements.append(Requirement(_check_key(term, term), "exists"))
    return requirements


def matches_labels(requirements: list[Requirement], labels: dict[str, str] | None) -> bool:
    labels = labels or {}
    for req in requirements:
        present = req.key in labels
        value = labels.get(req.key)
        if req.op == "exists" and not present:
            return False
        if req.op == "!exists" and present:
            return False
        if req.op in ("=", "in") and (not present or value not in req.values):
            return False
        if req.op in ("!=", "notin") and present and value in req.values:
            return False
    return True


# Kinds whose field selectors are kube-apiserver's defaults (DefaultMetaV1FieldSelectorConversion
# in k8s.io/apimachinery/pkg/runtime/conversion.go), and kinds with their own words.
_DEFAULT_CONVERSION = {("", "configmaps"), ("", "serviceaccounts"), ("coordination.k8s.io", "leases")}


def unsupported_field(group: str, plural: str, kind: str, key: str) -> str:
    """kube-apiserver's words for a field selector on a field the kind does not select on."""
    if (group, plural) in _DEFAULT_CONVERSION:
        return f'"{key}" is not a known field selector: only "metadata.name", "metadata.namespace"'
    if (group, plural) == ("batch", "jobs"):
        return f'field label "{key}" not supported for {kind}'
    return f"field label not supported: {key}"


def parse_field_selector(text: str | None, supported: frozenset[str],
                         unsupported: Callable[[str], str] | None = None) -> list[Requirement]:
    """Parse `metadata.name=x,status.phase!=Running`; only `supported` field paths are allowed
    (`unsupported(key)`: the message for another)."""
    requirements = []
    for term in _split_terms(text or ""):
        if "!=" in term:
            key, value, op = *term.split("!=", 1), "!="
        elif "==" in term:
            key, value, op = *term.split("==", 1), "="
        elif "=" in term:
            key, value, op = *term.split("=", 1), "="
        else:
            raise ValueError(f"invalid selector: '{term}'; can't understand '{term}'")
        key = key.strip()
        if key not in supported:
            raise ValueError(unsupported(key) if unsupported else
                             f"field label not supported: {key}")
        requirements.append(Requirement(key, op, (value.strip(),)))
    return requirements


def field_value(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def matches_fields(requirements: list[Requirement], obj: dict[str, Any]) -> bool:
    for req in requirements:
        equal = field_value(obj, req.key) == req.values[0]
        if equal != (req.op == "="):
            return False
    return True
