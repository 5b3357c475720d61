"""The JSON Schemas of the ``--format json`` documents, shipped in ``rmsnorm_eps/data``.

One file per command, ``<command>.schema.json`` (JSON Schema draft 2020-12; ``config diff``
is ``config-diff.schema.json``). A schema may refer to another by its ``$id``
(``urn:rmsnorm-eps:schema:<command>:<version>``: ``merge`` refers to ``ratio``'s layer);
:func:`load_schema` embeds each schema referred to under ``$defs``, so one dict validates. They
describe
``schema_version`` 1 exactly (``additionalProperties: false``), so a test fails whenever a
document gains a key the schema does not name. See docs/json-schema.md.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

__all__ = ["SCHEMA_COMMANDS", "load_schema", "schema_text"]


def _shipped() -> tuple[str, ...]:
    data = resources.files("rmsnorm_eps") / "data"
    suffix = ".schema.json"
    return tuple(sorted(p.name[: -len(suffix)] for p in data.iterdir() if p.name.endswith(suffix)))


#: The commands with a schema: one per file shipped in ``rmsnorm_eps/data`` (the files are
#: the list; ``config diff`` is ``config-diff``).
SCHEMA_COMMANDS = _shipped()


def schema_text(command: str) -> str:
    """The schema file's text for ``command`` (a name in :data:`SCHEMA_COMMANDS`, or a
    document's ``command`` value: ``"config diff"`` names ``config-diff``)."""
    command = command.replace(" ", "-")
    if command not in SCHEMA_COMMANDS:
        raise KeyError(f"no JSON schema for {command!r}; known: {', '.join(SCHEMA_COMMANDS)}")
    return (resources.files("rmsnorm_eps") / "data" / f"{command}.schema.json").read_text(
        encoding="utf-8"
    )


#: A reference to another command's schema by its ``$id``.
_REFERENCE = re.compile(r'"\$ref": "urn:rmsnorm-eps:schema:([a-z-]+):')


def load_schema(command: str) -> dict[str, Any]:
    """The schema for ``command`` as a dict, the schemas it refers to embedded (a JSON Schema
    "compound document": each keeps its ``$id``, so the references resolve without a lookup)."""
    text = schema_text(command)
    doc: dict[str, Any] = json.loads(text)
    for other in sorted(set(_REFERENCE.findall(text)) - {command.replace(" ", "-")}):
        doc.setdefault("$defs", {})[other] = load_schema(other)
    return doc
