"""Post-processing of the OpenAPI document drf-spectacular generates."""

from __future__ import annotations

from typing import Any

from policylab.ids import MAX_ID


def document_id_bounds(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Every integer path parameter is an id (`<int:pk>`, `<int:run_id>`): document its range, 0 to
    MAX_ID. Clients learn the range, and schema-driven fuzzing (tests/platform/api/test_openapi_fuzz.py)
    sends the values just past it, where unbounded ids used to reach the database driver."""
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                schema = parameter.get("schema", {})
                if parameter.get("in") == "path" and schema.get("type") == "integer":
                    schema.setdefault("minimum", 0)
                    schema.setdefault("maximum", MAX_ID)
    return result
