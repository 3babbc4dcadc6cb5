"""TensorFlow Serving's REST predict format: JSON bodies <-> named numpy arrays.

A predict request names a signature (`"signature_name"`, default `serving_default`) and
gives its inputs in one of two formats:

* row ("instances"): a list with one entry per example. With a single input an entry
  is the value itself (or `{name: value}`); with several it is `{name: value, ...}`.
  The answer is `{"predictions": [...]}`, one entry per example: the value of the single
  output, or `{output name: value, ...}`.
* columnar ("inputs"): the tensor of the single input, or `{name: tensor, ...}`; inputs
  without a batch dimension (such as a beam size) can only be sent this way. The
  answer is `{"outputs": ...}` shaped the same way.

Strings are UTF-8 text, or `{"b64": "..."}` for arbitrary bytes. Every problem with a
request raises `RequestError` carrying the HTTP status and a message for the client.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math

import numpy as np

DEFAULT_SIGNATURE = "serving_default"
# Row-format instances with one of these fields go to this signature (exports of
# t2t_lite.export.exporter): {"sentences": ..., "constraints": [phrase, ...], "prefix": ...}.
GUIDED_SIGNATURE = "translate_constrained"
GUIDED_FIELDS = ("constraints", "prefix")
# Per-request search settings of t2t_lite's exports, bounded as the export's graph checks
# them (t2t_lite.search.config.ALPHA_RANGE): {input name: (lowest, highest)}. Without a
# bound, alpha 1e30 overflows float32 and every score comes back -0.0.
OPTION_RANGES = {"alpha": (0.0, 10.0)}
_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
}


class RequestError(Exception):
    """A request the server refuses; `status` is the HTTP code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature: its dtype name ("string", "int32", ...) and shape.

    `shape` is a tuple of ints and None (unknown) entries; shape[0] is the batch
    dimension when `batched`.
    """

    name: str
    dtype: str
    shape: tuple

    @property
    def batched(self) -> bool:
        return len(self.shape) >= 1 and self.shape[0] is None


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    signature_name: str
    inputs: dict  # name -> np.ndarray
    row_format: bool
    rows: int  # examples in the request (0 when no input is batched)


def parse_predict(body: bytes, signatures: dict) -> PredictRequest:
    """Parses a predict body against `signatures` ({name: {"inputs": {name: TensorInfo}}}).

    Raises:
        RequestError: 400 for anything malformed, naming the field and what was expected.
    """
    try:
        request = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise RequestError(400, f"the body is not UTF-8 ({error})") from None
    except json.JSONDecodeError as error:
        raise RequestError(400, f"the body is not valid JSON: {error}") from None
    except RecursionError:
        raise RequestError(400, "the body nests JSON arrays or objects too deeply") from None
    if not isinstance(request, dict):
        raise RequestError(400, "the body must be a JSON object with 'instances' or 'inputs'")
    unknown = sorted(set(request) - {"signature_name", "instances", "inputs"})
    if unknown:
        raise RequestError(
            400,
            f"unknown field(s) {unknown}; a predict body has 'instances' or 'inputs' "
            "and optionally 'signature_name'",
        )
    name = request.get("signature_name", DEFAULT_SIGNATURE)
    if name == DEFAULT_SIGNATURE and _asks_guidance(request.get("instances")):
        if GUIDED_SIGNATURE not in signatures:
            raise RequestError(
                400,
                "this model does not take 'constraints' or 'prefix' (no translate_constrained "
                "signature, as parsing models); drop them",
            )
        name = GUIDED_SIGNATURE
        request = dict(request, instances=_guided_instances(request["instances"]))
    if not isinstance(name, str) or name not in signatures:
        raise RequestError(
            400,
            f"signature_name {name!r} is not one of this model's signatures: {sorted(signatures)}",
        )
    specs = signatures[name]["inputs"]
    if ("instances" in request) == ("inputs" in request):
        raise RequestError(
            400, "give exactly one of 'instances' (row format) or 'inputs' (columnar)"
        )
    if "instances" in request:
        inputs = _from_rows(request["instances"], specs)
    else:
        inputs = _from_columns(request["inputs"], specs)
    rows = {len(inputs[n]) for n, spec in specs.items() if spec.batched}
    if len(rows) > 1:
        raise RequestError(400, f"inputs have different numbers of rows: {sorted(rows)}")
    return PredictRequest(name, inputs, "instances" in request, next(iter(rows), 0))


def _asks_guidance(instances) -> bool:
    return isinstance(instances, list) and any(
        isinstance(instance, dict) and any(field in instance for field in GUIDED_FIELDS)
        for instance in instances
    )


def _guided_instances(instances: list) -> list:
    """Instances with both guided fields: constraints padded with "" to one length, prefix "".

    Raises:
        RequestError: 400 naming the instance whose constraints or prefix are malformed.
    """
    filled = []
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict):
            raise RequestError(
                400,
                f'instances[{index}] must be an object {{"sentences": ..., "constraints": '
                '[...], "prefix": ...}} when any instance has constraints or a prefix',
            )
        constraints = instance.get("constraints", [])
        if not isinstance(constraints, list) or not all(
            isinstance(phrase, str) and phrase.strip() for phrase in constraints
        ):
            raise RequestError(
                400,
                f"instances[{index}].constraints must be a list of non-blank strings (the "
                'phrases the translation must contain), e.g. ["Hund"], or [] for none',
            )
        prefix = instance.get("prefix", "")
        if not isinstance(prefix, str):
            raise RequestError(
                400, f"instances[{index}].prefix must be a string (the translation's start)"
            )
        filled.append({**instance, "constraints": constraints, "prefix": prefix})
    width = max(len(instance["constraints"]) for instance in filled)
    for instance in filled:
        instance["constraints"] = instance["constraints"] + [""] * (
            width - len(instance["constraints"])
        )
    return filled


def _from_rows(instances, specs: dict) -> dict:
    if not isinstance(instances, list):
        raise RequestError(400, "'instances' must be a list with one entry per example")
    if not instances:
        raise RequestError(400, "'instances' is empty: give at least one example")
    scalars = [name for name, spec in specs.items() if not spec.batched]
    if scalars:
        raise RequestError(
            400,
            f"input(s) {scalars} have no batch dimension and cannot be sent as instances; "
            'use the columnar format {"inputs": {...}}',
        )
    if len(specs) == 1:
        (name,) = specs
        values = [v[name] if isinstance(v, dict) and set(v) == {name} else v for v in instances]
        return {name: _to_array(values, specs[name], "instances")}
    columns = {name: [] for name in specs}
    for index, instance in enumerate(instances):
        if not isinstance(instance, dict) or set(instance) != set(specs):
            raise RequestError(
                400, f"instances[{index}] must be an object with exactly the inputs {sorted(specs)}"
            )
        for name in specs:
            columns[name].append(instance[name])
    return {name: _to_array(columns[name], specs[name], "instances") for name in specs}


def _from_columns(inputs, specs: dict) -> dict:
    if len(specs) == 1 and not (isinstance(inputs, dict) and set(inputs) == set(specs)):
        (name,) = specs
        return {name: _to_array(inputs, specs[name], "inputs")}
    if not isinstance(inputs, dict) or set(inputs) != set(specs):
        got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
        raise RequestError(
            400, f"'inputs' must be an object with the inputs {sorted(specs)}; got {got}"
        )
    return {name: _to_array(inputs[name], specs[name], f"inputs.{name}") for name in specs}


def _to_array(value, spec: TensorInfo, where: str) -> np.ndarray:
    """Checks a JSON value against `spec` (rank, known dims, dtype); returns its array."""
    shape = _shape_of(value, where, spec.dtype == "string")
    if len(shape) != len(spec.shape):
        raise RequestError(
            400,
            f"{where} ({spec.name}): expected a {spec.dtype} tensor of rank "
            f"{len(spec.shape)}, got rank {len(shape)}",
        )
    for axis, (got, want) in enumerate(zip(shape, spec.shape)):
        if want is not None and got != want:
            raise RequestError(
                400, f"{where} ({spec.name}): dimension {axis} is {got}, expected {want}"
            )
    if spec.batched and shape[0] == 0:
        raise RequestError(400, f"{where} ({spec.name}) has no rows: give at least one example")
    flat = _flatten(value, len(shape))
    converted = [_convert(item, spec, where) for item in flat]
    dtype = object if spec.dtype == "string" else np.dtype(spec.dtype)
    return np.array(converted, dtype=dtype).reshape(shape)


def _shape_of(value, where: str, is_string: bool) -> tuple:
    """The shape of nested lists, refusing ragged ones."""
    if not isinstance(value, list):
        return ()
    if not value:
        return (0,)
    inner = [_shape_of(item, where, is_string) for item in value]
    if any(shape != inner[0] for shape in inner):
        raise RequestError(400, f"{where}: nested lists of different lengths (a ragged tensor)")
    return (len(value),) + inner[0]


def _flatten(value, rank: int) -> list:
    if rank == 0:
        return [value]
    return [leaf for item in value for leaf in _flatten(item, rank - 1)]


def _convert(item, spec: TensorInfo, where: str):
    if spec.dtype == "string":
        if isinstance(item, str):
            try:
                return item.encode("utf-8")
            except UnicodeEncodeError as error:  # JSON's "\ud800": a lone surrogate.
                bad = item[error.start : error.end].encode("unicode_escape").decode()
                raise RequestError(
                    400,
                    f"{where} ({spec.name}): the string has the lone UTF-16 surrogate "
                    f"{bad}, which is not text; send valid Unicode, or bytes as "
                    '{"b64": "..."}',
                ) from None
        if isinstance(item, dict) and set(item) == {"b64"} and isinstance(item["b64"], str):
            try:
                return base64.b64decode(item["b64"], validate=True)
            except (binascii.Error, ValueError):
                raise RequestError(400, f"{where} ({spec.name}): invalid base64") from None
        raise RequestError(400, f"{where} ({spec.name}): expected strings, got {_kind(item)}")
    if spec.dtype == "bool":
        if isinstance(item, bool):
            return item
        raise RequestError(400, f"{where} ({spec.name}): expected true/false, got {_kind(item)}")
    if spec.dtype in _INT_RANGES:
        low, high = _INT_RANGES[spec.dtype]
        if isinstance(item, bool) or not isinstance(item, int):
            raise RequestError(400, f"{where} ({spec.name}): expected integers, got {_kind(item)}")
        if not low <= item <= high:
            raise RequestError(400, f"{where} ({spec.name}): {item} does not fit {spec.dtype}")
        return item
    if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
        raise RequestError(
            400, f"{where} ({spec.name}): expected finite numbers, got {_kind(item)}"
        )
    if spec.name in OPTION_RANGES:
        low, high = OPTION_RANGES[spec.name]
        if not low <= item <= high:
            raise RequestError(
                400, f"{where} ({spec.name}): {item:g} is out of range; choose {low:g} to {high:g}"
            )
    return item


def _kind(item) -> str:
    return "a list" if isinstance(item, list) else f"{type(item).__name__} {json.dumps(item)[:40]}"


def _jsonable(value):
    """Nested lists of Python values; bytes become UTF-8 text (invalid bytes replaced)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def encode_response(outputs: dict, row_format: bool) -> dict:
    """{"predictions": [...]} (row format) or {"outputs": ...} (columnar) for `outputs`.

    Args:
        outputs: {name: np.ndarray}; in row format every output has the batch dimension.
    """
    values = {name: _jsonable(np.asarray(array)) for name, array in outputs.items()}
    if not row_format:
        if len(values) == 1:
            return {"outputs": next(iter(values.values()))}
        return {"outputs": values}
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    rows = len(next(iter(values.values())))
    return {"predictions": [{name: values[name][i] for name in values} for i in range(rows)]}
