"""Compile a trained member into its serving artifact: a standalone ONNX model.

Every member becomes one ONNX graph with the same contract: input `X`, an (n, width) float32
candidate matrix; output `p`, n purchase propensities as float64. Serving fuses the graphs of
the members one process scores into a single ONNX Runtime session (app.adapters.onnx_members),
so a fan-out costs one call, not one Python call per member.

Trees are written as one `ai.onnx.ml.TreeEnsembleRegressor` per member, extracted from the
trained model's own arrays, not through a generic converter:
- the graph computes in float64 from a float32 input. float32 -> float64 is exact and every
  threshold is stored as float64, so each split compares exactly as the native library does
  (XGBoost: float32 `x < t`; scikit-learn trees: float32 x against a float64 `x <= t`;
  HistGradientBoosting: float64 `x <= t`). Only the sum of the leaves rounds differently
  (XGBoost sums in float32), about 1e-7 at most; the fidelity gate checks it at load;
- the published converters failed on two of our four kinds (HistGradientBoosting's
  attributes, the logistic pipeline's FunctionTransformer) and round thresholds to float32.

A member this module cannot compile (say a logistic pipeline with splines) raises
`NotCompilable`; it is then served natively, and the manifest says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# ONNX Runtime 1.32 runs these: the default domain at 17, ai.onnx.ml at 3 (the first with
# float64 thresholds and leaf weights as tensors).
OPSET = 17
ML_OPSET = 3
INPUT = "X"
OUTPUT = "p"


class NotCompilable(ValueError):
    """The member's estimator or one of its steps has no compiled form here."""


@dataclass
class _Trees:
    """Trees in one table, the shape TreeEnsembleRegressor takes (one target)."""

    tree_ids: list[int] = field(default_factory=list)
    node_ids: list[int] = field(default_factory=list)
    features: list[int] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    thresholds: list[float] = field(default_factory=list)
    true_ids: list[int] = field(default_factory=list)
    false_ids: list[int] = field(default_factory=list)
    missing_true: list[int] = field(default_factory=list)
    leaf_tree_ids: list[int] = field(default_factory=list)
    leaf_node_ids: list[int] = field(default_factory=list)
    leaf_values: list[float] = field(default_factory=list)
    n_trees: int = 0

    def add_tree(
        self,
        left: np.ndarray,
        right: np.ndarray,
        feature: np.ndarray,
        threshold: np.ndarray,
        is_leaf: np.ndarray,
        leaf_value: np.ndarray,
        missing_left: np.ndarray,
        mode: str,
    ) -> None:
        """One tree. `mode` is the split's test, true when the sample goes left."""
        tree = self.n_trees
        self.n_trees += 1
        for node in range(len(left)):
            self.tree_ids.append(tree)
            self.node_ids.append(node)
            if is_leaf[node]:
                self.features.append(0)
                self.modes.append("LEAF")
                self.thresholds.append(0.0)
                self.true_ids.append(0)
                self.false_ids.append(0)
                self.missing_true.append(0)
                self.leaf_tree_ids.append(tree)
                self.leaf_node_ids.append(node)
                self.leaf_values.append(float(leaf_value[node]))
            else:
                self.features.append(int(feature[node]))
                self.modes.append(mode)
                self.thresholds.append(float(threshold[node]))
                self.true_ids.append(int(left[node]))
                self.false_ids.append(int(right[node]))
                self.missing_true.append(int(bool(missing_left[node])))

    def nodes(self, name: str, x: str, out: str, base: float) -> list[onnx.NodeProto]:
        """The operator, then its output cast back to float64. ai.onnx.ml 3 always outputs
        float32: ONNX Runtime sums the leaves in float64 and rounds once at the end (under
        1e-7 of a margin)."""
        return [self._operator(name, x, f"{out}_f32", base), _to_double(f"{out}_f32", out)]

    def _operator(self, name: str, x: str, out: str, base: float) -> onnx.NodeProto:
        return helper.make_node(
            "TreeEnsembleRegressor",
            [x],
            [out],
            name=name,
            domain="ai.onnx.ml",
            n_targets=1,
            aggregate_function="SUM",
            post_transform="NONE",
            base_values_as_tensor=_tensor(f"{name}_base", [base]),
            nodes_treeids=self.tree_ids,
            nodes_nodeids=self.node_ids,
            nodes_featureids=self.features,
            nodes_modes=self.modes,
            nodes_values_as_tensor=_tensor(f"{name}_thresholds", self.thresholds),
            nodes_truenodeids=self.true_ids,
            nodes_falsenodeids=self.false_ids,
            nodes_missing_value_tracks_true=self.missing_true,
            target_treeids=self.leaf_tree_ids,
            target_nodeids=self.leaf_node_ids,
            target_ids=[0] * len(self.leaf_node_ids),
            target_weights_as_tensor=_tensor(f"{name}_leaves", self.leaf_values),
        )


def _to_double(x: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Cast", [x], [out], to=TensorProto.DOUBLE)


def _tensor(name: str, values: list[float] | np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.float64), name)


def compile_member(model: Any, width: int, name: str) -> bytes:
    """The serialized ONNX model of one trained member (booster or scikit-learn estimator)."""
    kind = type(model).__name__
    if kind == "Booster":
        nodes, inits = _xgboost(model, name)
    elif kind == "HistGradientBoostingClassifier":
        nodes, inits = _hist_gradient_boosting(model, name)
    elif kind in ("ExtraTreesClassifier", "RandomForestClassifier"):
        nodes, inits = _forest(model, name)
    elif kind == "Pipeline":
        nodes, inits = _logistic_pipeline(model, name)
    else:
        raise NotCompilable(f"{name}: no compiled form for {kind}")
    graph = helper.make_graph(
        [helper.make_node("Cast", [INPUT], ["x64"], to=TensorProto.DOUBLE), *nodes],
        f"member_{name}",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.DOUBLE, ["n"])],
        initializer=inits,
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", ML_OPSET)],
        producer_name="dynamic-offers",
    )
    proto.ir_version = 8  # ONNX Runtime's supported IR for these opsets
    onnx.checker.check_model(proto, full_check=True)
    return proto.SerializeToString()


def _logistic_tail(margin: str) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    """(n, 1) margin -> n propensities."""
    return [
        helper.make_node("Sigmoid", [margin], ["prob2d"]),
        helper.make_node("Reshape", ["prob2d", "flat_shape"], [OUTPUT]),
    ], [numpy_helper.from_array(np.array([-1], dtype=np.int64), "flat_shape")]


def _xgboost(booster: Any, name: str) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    learner = json.loads(booster.save_raw("json"))["learner"]
    objective = learner["objective"]["name"]
    if objective != "binary:logistic":
        raise NotCompilable(f"{name}: XGBoost objective {objective!r}")
    params = learner["learner_model_param"]
    if int(params.get("num_class", "0")) > 1 or int(params.get("num_target", "1")) != 1:
        raise NotCompilable(f"{name}: XGBoost model with more than one output")
    # base_score is a probability for binary:logistic ("[5.7E-2]" in XGBoost 3); the trees
    # add to its logit.
    base = float(str(params["base_score"]).strip("[]"))
    booster_model = learner["gradient_booster"]
    if booster_model["name"] != "gbtree":
        raise NotCompilable(f"{name}: XGBoost booster {booster_model['name']!r}")
    trees = _Trees()
    for tree in booster_model["model"]["trees"]:
        if any(int(t) != 0 for t in tree["split_type"]):
            raise NotCompilable(f"{name}: XGBoost categorical splits")
        left = np.asarray(tree["left_children"])
        # XGBoost goes left when x < threshold (float32), and a leaf's value sits in
        # split_conditions.
        cond = np.asarray(tree["split_conditions"], dtype=np.float32).astype(np.float64)
        trees.add_tree(
            left=left,
            right=np.asarray(tree["right_children"]),
            feature=np.asarray(tree["split_indices"]),
            threshold=cond,
            is_leaf=left == -1,
            leaf_value=cond,
            missing_left=np.asarray(tree["default_left"]),
            mode="BRANCH_LT",
        )
    margin = math.log(base / (1.0 - base))
    tail, inits = _logistic_tail("margin")
    return [*trees.nodes(f"{name}_trees", "x64", "margin", margin), *tail], inits


def _hist_gradient_boosting(
    model: Any, name: str
) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    if len(model.classes_) != 2:
        raise NotCompilable(f"{name}: HistGradientBoosting with {len(model.classes_)} classes")
    trees = _Trees()
    for (predictor,) in model._predictors:
        nodes = predictor.nodes
        if nodes["is_categorical"].any():
            raise NotCompilable(f"{name}: HistGradientBoosting categorical splits")
        trees.add_tree(
            left=nodes["left"].astype(np.int64),
            right=nodes["right"].astype(np.int64),
            feature=nodes["feature_idx"],
            threshold=nodes["num_threshold"],
            is_leaf=nodes["is_leaf"].astype(bool),
            leaf_value=nodes["value"],
            missing_left=nodes["missing_go_to_left"],
            mode="BRANCH_LEQ",
        )
    base = float(np.asarray(model._baseline_prediction).ravel()[0])
    tail, inits = _logistic_tail("margin")
    return [*trees.nodes(f"{name}_trees", "x64", "margin", base), *tail], inits


def _forest(model: Any, name: str) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    """A forest's P(class 1): the mean of its trees' leaf fractions."""
    if list(model.classes_) != [0, 1]:
        raise NotCompilable(f"{name}: forest classes {list(model.classes_)}")
    trees = _Trees()
    n = len(model.estimators_)
    for estimator in model.estimators_:
        t = estimator.tree_
        value = t.value[:, 0, :]
        fraction = value[:, 1] / value.sum(axis=1)
        missing = getattr(t, "missing_go_to_left", np.zeros(t.node_count, dtype=np.uint8))
        trees.add_tree(
            left=t.children_left,
            right=t.children_right,
            feature=t.feature,
            threshold=t.threshold,
            is_leaf=t.children_left == -1,
            # Divided here so the operator's SUM is the forest's mean.
            leaf_value=fraction / n,
            missing_left=missing,
            mode="BRANCH_LEQ",
        )
    reshape = helper.make_node("Reshape", ["sum2d", "flat_shape"], [OUTPUT])
    shape = numpy_helper.from_array(np.array([-1], dtype=np.int64), "flat_shape")
    return [*trees.nodes(f"{name}_trees", "x64", "sum2d", 0.0), reshape], [shape]


def _logistic_pipeline(pipeline: Any, name: str) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    """arcsinh > StandardScaler > LogisticRegression, in float64 as the native predict."""
    steps = [step for _, step in pipeline.steps]
    kinds = [type(s).__name__ for s in steps]
    if kinds != ["FunctionTransformer", "StandardScaler", "LogisticRegression"]:
        raise NotCompilable(f"{name}: pipeline {' > '.join(kinds)}")
    arcsinh, scaler, logistic = steps
    if arcsinh.func is not np.arcsinh:
        raise NotCompilable(f"{name}: FunctionTransformer({arcsinh.func!r})")
    if len(logistic.classes_) != 2:
        raise NotCompilable(f"{name}: logistic regression with {len(logistic.classes_)} classes")
    width = len(logistic.coef_[0])
    mean = scaler.mean_ if scaler.with_mean else np.zeros(width)
    scale = scaler.scale_ if scaler.with_std else np.ones(width)
    inits = [
        _tensor("one", [1.0]),
        _tensor("mean", np.asarray(mean).reshape(1, -1)),
        _tensor("scale", np.asarray(scale).reshape(1, -1)),
        _tensor("coef", np.asarray(logistic.coef_, dtype=np.float64).reshape(-1, 1)),
        _tensor("intercept", np.asarray(logistic.intercept_, dtype=np.float64).reshape(1, 1)),
    ]
    nodes = [
        # ONNX Runtime has no float64 Asinh: sign(x) * log(|x| + sqrt(x^2 + 1)), which
        # matches numpy's arcsinh to ~1e-16 absolute for the values features take.
        helper.make_node("Abs", ["x64"], ["abs"]),
        helper.make_node("Mul", ["abs", "abs"], ["square"]),
        helper.make_node("Add", ["square", "one"], ["square1"]),
        helper.make_node("Sqrt", ["square1"], ["root"]),
        helper.make_node("Add", ["abs", "root"], ["abs_root"]),
        helper.make_node("Log", ["abs_root"], ["abs_asinh"]),
        helper.make_node("Sign", ["x64"], ["sign"]),
        helper.make_node("Mul", ["sign", "abs_asinh"], ["asinh"]),
        helper.make_node("Sub", ["asinh", "mean"], ["centred"]),
        helper.make_node("Div", ["centred", "scale"], ["scaled"]),
        helper.make_node("MatMul", ["scaled", "coef"], ["dot"]),
        helper.make_node("Add", ["dot", "intercept"], ["margin"]),
    ]
    tail, tail_inits = _logistic_tail("margin")
    return nodes + tail, inits + tail_inits
