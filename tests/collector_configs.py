"""The shipped Collector configs as the Collector reads them, for the tests that check them."""

from __future__ import annotations

import re
from typing import Any

import yaml

PLACEHOLDER = re.compile(r"\$\{env:([A-Z][A-Z0-9_]*)(?::-([^}]*))?\}")
"""``${env:VAR}`` or ``${env:VAR:-default}``, as the Collector's env provider reads it."""


def with_defaults(node: Any) -> Any:
    """The config as the Collector reads it when no variable is set: each
    ``${env:VAR:-default}`` becomes its default (typed, as the env provider parses it, when
    it is the whole value); a placeholder without a default stays as it is."""
    if isinstance(node, dict):
        return {key: with_defaults(value) for key, value in node.items()}
    if isinstance(node, list):
        return [with_defaults(item) for item in node]
    if not isinstance(node, str):
        return node
    whole = PLACEHOLDER.fullmatch(node)
    if whole and whole[2] is not None:
        return yaml.safe_load(whole[2])
    return PLACEHOLDER.sub(lambda m: m[0] if m[2] is None else m[2], node)
