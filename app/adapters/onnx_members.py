"""Compiled members: several members' ONNX graphs fused into one ONNX Runtime session.

Each compiled member is a standalone ONNX model (models.compile): input `X`, an (n, width)
float32 matrix; output `p`, n float64 propensities. The members one process scores are
fused into one graph whose output is their (members, n) matrix, so a fan-out scores every
one of them in a single `run`: no Python per member per fan-out, and the runtime's fixed cost
paid once. Measured on one login's 10 rows (docs/member-runtimes.md): the 12 members of a
standard version in ~0.5 ms, against ~7-19 ms for their native predicts.

The session runs on the calling thread only (one intra-op thread, no inter-op pool): a
replica owns a fraction of a core, and a pool would spin against the other replicas.
ONNX Runtime releases the GIL while it runs, so the replica's event loop keeps serving.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, compose, helper, numpy_helper

from app.contract.artifacts import verified_serving_artifact
from app.contract.manifest import MemberEntry

INPUT = "X"
MEMBER_OUTPUT = "p"
OUTPUT = "scores"


def onnxruntime() -> ModuleType:
    """ONNX Runtime, imported with its telemetry off. Otherwise its first session writes a
    device id and an event database under ~/.cache/Microsoft: a replica must write nothing
    under its HOME. The switch is read when the library loads, so it is set before."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    module: ModuleType = ort
    return module


def session_options() -> Any:
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # No thread pool to spin: the one thread is the caller's.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # warnings about unused initializers are noise here
    return options


def fuse(members: Sequence[tuple[str, onnx.ModelProto]]) -> onnx.ModelProto:
    """One model whose output `scores` is the (members, n) matrix of the members' `p`."""
    if not members:
        raise ValueError("nothing to fuse")
    nodes: list[onnx.NodeProto] = []
    initializers: list[TensorProto] = []
    rows: list[str] = []
    width: int | None = None
    opsets: dict[str, int] = {}
    for name, model in members:
        graph_input = model.graph.input[0]
        dims = graph_input.type.tensor_type.shape.dim
        member_width = dims[1].dim_value
        if width is not None and member_width != width:
            raise ValueError(f"{name}: {member_width} features, the others {width}")
        width = member_width
        for opset in model.opset_import:
            opsets[opset.domain] = max(opsets.get(opset.domain, 0), opset.version)
        # Every name of the member's graph gets the member's prefix, then its input is
        # rewired to the shared one.
        prefixed = compose.add_prefix(model, prefix=f"{name}/")
        for node in prefixed.graph.node:
            node.input[:] = [INPUT if i == f"{name}/{INPUT}" else i for i in node.input]
            nodes.append(node)
        initializers.extend(prefixed.graph.initializer)
        nodes.append(
            helper.make_node("Unsqueeze", [f"{name}/{MEMBER_OUTPUT}", "axis0"], [f"{name}/row"])
        )
        rows.append(f"{name}/row")
    initializers.append(numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"))
    nodes.append(helper.make_node("Concat", rows, [OUTPUT], axis=0))
    graph = helper.make_graph(
        nodes,
        "members",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.DOUBLE, [len(members), "n"])],
        initializer=initializers,
    )
    fused = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    )
    fused.ir_version = members[0][1].ir_version
    return fused


class FusedMembers:
    """Compiled members scored together: `score` maps (n, width) float32 to (members, n)."""

    def __init__(self, entries: Sequence[MemberEntry], model: onnx.ModelProto) -> None:
        self.entries = tuple(entries)
        self.width = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
        self._session = onnxruntime().InferenceSession(
            model.SerializeToString(), session_options(), providers=["CPUExecutionProvider"]
        )

    @classmethod
    def load(cls, entries: Sequence[MemberEntry], base_dir: Path) -> FusedMembers:
        """Each member's serving artifact, sha256 checked before it is parsed, fused."""
        models = [
            (e.name, onnx.load_model(str(verified_serving_artifact(e, base_dir)))) for e in entries
        ]
        return cls(entries, fuse(models))

    def score(self, matrix: np.ndarray) -> np.ndarray:
        if matrix.ndim != 2 or matrix.shape[1] != self.width:
            raise ValueError(f"expected a (n, {self.width}) matrix, got shape {matrix.shape}")
        if matrix.shape[0] == 0:
            return np.empty((len(self.entries), 0), np.float64)
        x = np.ascontiguousarray(matrix, dtype=np.float32)
        (scores,) = self._session.run([OUTPUT], {INPUT: x})
        return np.asarray(scores, dtype=np.float64)
