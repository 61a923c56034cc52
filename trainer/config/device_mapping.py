"""Parse ROLL's `device_mapping` expressions without executing them.

ROLL writes device lists as Python expressions (`list(range(0,16))`). We accept the same small
language by walking the `ast` with an allow-list: integer literals, list/tuple displays of
integers, `range(...)` / `list(range(...))` with 1-3 integer arguments, and `+` between lists.
Anything else (names, attributes, other calls, comprehensions) is rejected; nothing is evaluated.
"""

from __future__ import annotations

import ast

MAX_DEVICES = 65536  # refuse absurd ranges instead of building huge lists
MAX_DEVICE_ID = MAX_DEVICES - 1  # ids index the cluster's devices: 4096 nodes x 16 devices at most

GRAMMAR = "a list of device ids such as [0,1,2], range(0,8), list(range(0,16)) or list(range(0,4)) + [8,9]"


class DeviceMappingError(ValueError):
    pass


def parse_device_mapping(text: str) -> list[int]:
    """Return the device ids described by `text`; raise DeviceMappingError for anything else."""
    if len(text) > 2000:
        raise DeviceMappingError(f"expression too long; expected {GRAMMAR}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise DeviceMappingError(f"cannot parse {text!r}: {exc.msg}; expected {GRAMMAR}") from None
    devices = _walk(tree.body, text)
    check_device_ids(devices)
    return devices


def check_device_ids(devices: list) -> None:
    """Raise DeviceMappingError when the list is too long or an id is above MAX_DEVICE_ID (linear).
    Negative ids are left to validation, which names them."""
    if len(devices) > MAX_DEVICES:
        raise DeviceMappingError(f"more than {MAX_DEVICES} devices")
    too_big = [d for d in devices if isinstance(d, int) and d > MAX_DEVICE_ID]
    if too_big:
        raise DeviceMappingError(f"device ids must be at most {MAX_DEVICE_ID}, got {too_big[0]}")


def _int(node: ast.AST, text: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_int(node.operand, text)
    raise DeviceMappingError(f"{text!r}: only integer literals are allowed here; expected {GRAMMAR}")


def _range(node: ast.Call, text: str) -> list[int]:
    if node.keywords or not 1 <= len(node.args) <= 3:
        raise DeviceMappingError(f"{text!r}: range takes 1 to 3 integer arguments; expected {GRAMMAR}")
    args = [_int(arg, text) for arg in node.args]
    span = range(*args) if args[-1] != 0 or len(args) < 3 else None
    if span is None:
        raise DeviceMappingError(f"{text!r}: range step must not be 0")
    if len(span) > MAX_DEVICES:
        raise DeviceMappingError(f"{text!r}: more than {MAX_DEVICES} devices")
    return list(span)


def _walk(node: ast.AST, text: str) -> list[int]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_int(elt, text) for elt in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        devices = _walk(node.left, text) + _walk(node.right, text)
        if len(devices) > MAX_DEVICES:
            raise DeviceMappingError(f"{text!r}: more than {MAX_DEVICES} devices")
        return devices
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "range":
            return _range(node, text)
        if node.func.id == "list" and len(node.args) == 1 and not node.keywords:
            return _walk(node.args[0], text)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    raise DeviceMappingError(f"{text!r} is not an allowed device expression; expected {GRAMMAR}")
