"""Algebraic rewrites of the ONNX graph that remove work no kernel choice can: exact in real arithmetic,
checked against the original model on random inputs before anything is profiled (pipeline.py).

Every engine here runs convolutions and matrix products at 90-100% of the machine's fp32 matrix
rate, and the work between them is at most 2-30% of the best engine's time
(benchmarks/engine_breakdown.py): choosing kernels well cannot remove flops, but an identity of
linear algebra can. A rule returns None where it does not apply and a `Rewrite` (what it did, in
words, and the new nodes and initializers) where it does; rules are tried in `RULES` order on every
node, and a rule's legality (the identity holds) is checked apart from its benefit (flops saved).

conv_over_upsampled_concat. A 1x1 convolution W over a channel concatenation of branches, some of them
upsampled (Resize, nearest or linear):

    W * concat(up_1(x_1), ..., x_k)  =  up_1(W_1 * x_1) + ... + W_k * x_k   (+ bias, once)

where W_i is W's slice of input channels that branch i fills (one branch: W * up(x) = up(W * x)).
A 1x1 convolution mixes channels pixel by pixel, and an upsampling of one channel at a time takes
each output pixel as a weighted sum of input pixels with weights that sum to one (linear) or a copy
of one (nearest), the same for every channel; so the two commute, and a constant passes through it
unchanged. The product then runs at the branch's own resolution: on SegFormer's all-MLP decoder
(four 256-channel maps, three of them upsampled to 1/4 of the image, concatenated, fused by a
1024-to-256 convolution) it is 2.8 instead of 8.6 GFLOP at 512x512, and the 64 MB concatenation is
never written.

pointwise_conv_into_token_matmul. Each of those branches was itself a token MatMul (the decoder's
per-stage MLP) turned into an image: the 1x1 convolution now right after it folds into its weights
(its docstring), and SegFormer-B0's decoder MLPs and fuse convolution go from 9.1 to 0.7 GFLOP
(the two smallest folds, under MIN_SAVED_FRACTION, are not taken; OpenVINO: 118 -> 86 ms with the
first rule alone, side by side, 2 threads, 2026-12-01).

space_to_depth_conv. YOLOX's Focus stem (four pixel-parity slices, concatenated) and the convolution
after it are one stride-2 convolution of the image: nothing sliced or concatenated.

conv_over_nearest_upsample. A 3x3 convolution over a nearest 2x upsampling reads each input pixel
up to four times over: per output pixel parity it is a 2x2 convolution of the image before the
upsampling (its docstring), 16 instead of 36 products per input pixel. Candy's decoder: 3.70 ->
1.70 GFLOP; OpenVINO 98 -> 85 ms, onnxruntime 126 -> 115 ms side by side (2 threads, 2026-12-01).

channel_first_linear_attention. EfficientViT's ReLU linear attention transposes its packed qkv, and
its output back, around two small matrix products; computed on the transposed products instead
(its docstring) only k's channels are transposed. No flops saved: passes over memory (Transpose
was the largest non-linear op of OpenVINO's efficientvit-b1). efficientvit-b1: onnxruntime 10.29
-> 9.10 ms, OpenVINO 9.83 -> 9.09 ms side by side (2 threads, 2026-12-02).

one_row_read. A Gather or Slice of one position along an axis, such as ViT's classifier reading the
class token (`x[:, 0]`) or a decoder's last token (`x[:, -1:]`), is computed from that position
alone as far back as nothing else needs the other positions (its docstring): ViT's last encoder
block then computes keys and values for every token and the rest (query, attention row, projection,
MLP, norms) for the class token only. vit-b16: 35.1 -> 32.7 GFLOP; OpenVINO 171 -> 159 ms,
onnxruntime 181 -> 171 ms side by side (2 threads, 2026-12-06, benchmarks/rewrite_gain.py vit-b16).

winograd_conv3x3. A dense 3x3 stride-1 convolution of at least 128 channels in and out computed by
Winograd's F(2x2, 3x3) (its docstring): 16 instead of 36 multiplies per output tile and channel pair,
in 16 depthwise convolutions, 16 1x1 convolutions and adds that every engine runs as it runs any
model. No engine here does this itself on CPU: at batch 1 yolov4 runs at the machine's matrix rate,
and only fewer flops can make it faster. yolov4's 33 such layers (61% of its 60 GFLOP): OpenVINO
278 -> 228 ms, onnxruntime 551 -> 523 ms; candy's ten (with the sub-pixel rule): OpenVINO 87 -> 63 ms,
onnxruntime 95 -> 88 ms, side by side (2 threads, 2026-12-04, benchmarks/rewrite_gain.py; the OpenVINO
figures are with the VM's two vCPUs near each other: placed apart by the host, the rewritten yolov4
runs ~274 ms, korch/profile/link.py). Not where the output has fewer than 25 tiles of 2x2 (MIN_F2_TILES):
ResNet-50's 7x7 layers ran 0.87-0.95x alone.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.frontend.onnx_import import _infer_shapes

log = logging.getLogger("korch.frontend.rewrites")


@dataclass(frozen=True)
class Rewrite:
    """One rule applied at one node: the nodes it removes and adds, and what it did, in words."""

    rule: str
    removed: tuple[str, ...]                       # output names of the nodes it replaces (a node's key)
    nodes: tuple[onnx.NodeProto, ...]              # placed where the node making removed[1] (its anchor) was
    initializers: tuple[onnx.TensorProto, ...]
    note: str
    # None: taken wherever its rule applies (the rule saves passes over memory, not flops, or its own
    # measured gate decides where it pays); otherwise taken where it reaches MIN_SAVED_FRACTION
    flops_saved: float | None = None


# A rewrite that saves flops is taken only if it saves this fraction of the model's convolution and
# matrix-product flops: yolov4's two (0.14 of 60 GFLOP) read 0.98-1.03x side by side, within the
# spread, and every rewrite costs optimize a check (two onnxruntime sessions of the model: seconds
# of a warm optimize).
MIN_SAVED_FRACTION = 0.01


@dataclass
class _Graph:
    """What a rule reads: nodes by an output, consumers by value, constants, static shapes."""

    model: onnx.ModelProto
    producer: dict[str, onnx.NodeProto]
    consumers: dict[str, list[onnx.NodeProto]]
    constants: dict[str, onnx.TensorProto]
    shapes: dict[str, tuple[int, ...]]
    outputs: frozenset[str]
    taken: set[str]                                # names in use (new ones must avoid them)

    @classmethod
    def of(cls, model: onnx.ModelProto) -> _Graph:
        g = model.graph
        producer = {o: n for n in g.node for o in n.output if o}
        consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in g.node:
            for i in n.input:
                consumers.setdefault(i, []).append(n)
        shapes = {}
        for v in [*g.input, *g.value_info, *g.output]:
            dims = v.type.tensor_type.shape.dim
            if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
                shapes[v.name] = tuple(d.dim_value for d in dims)
        constants = {t.name: t for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                constants[n.output[0]] = n.attribute[0].t
        for name, t in constants.items():
            shapes.setdefault(name, tuple(t.dims))
        taken = {*producer, *consumers, *constants, *(n.name for n in g.node), *(v.name for v in g.input)}
        return cls(model, producer, consumers, constants, shapes, frozenset(o.name for o in g.output), taken)

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def array(self, name: str) -> np.ndarray | None:
        t = self.constants.get(name)
        return None if t is None else numpy_helper.to_array(t)

    def only_consumer(self, value: str) -> onnx.NodeProto | None:
        users = self.consumers.get(value, [])
        return users[0] if len(users) == 1 and value not in self.outputs else None

    def feeding(self, node: onnx.NodeProto, op_type: str, index: int = 0) -> onnx.NodeProto | None:
        """The `op_type` node that makes `node`'s input `index`, if `node` alone reads what it makes."""
        producer = self.producer.get(node.input[index])
        ok = producer is not None and producer.op_type == op_type and self.only_consumer(producer.output[0]) is node
        return producer if ok else None


def _flops(n: float) -> str:
    return f"{n / 1e9:.2f} GFLOP" if n >= 1e8 else f"{n / 1e6:.1f} MFLOP"


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _pointwise_conv(g: _Graph, node: onnx.NodeProto) -> np.ndarray | None:
    """The weight [M, C, 1, 1] of a 1x1, ungrouped, unstrided, unpadded 2-D convolution with
    constant weights, or None."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in g.constants:
        return None
    if len(g.constants[node.input[1]].dims) != 4 or tuple(g.constants[node.input[1]].dims[2:]) != (1, 1):
        return None                      # the shape before the data: the rules read every Conv on every pass
    if _attr(node, "group", 1) != 1:
        return None
    if any(s != 1 for s in _attr(node, "strides", [1, 1])) or any(p != 0 for p in _attr(node, "pads", [0] * 4)):
        return None
    if _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
        return None
    if len(node.input) > 2 and node.input[2] and g.array(node.input[2]) is None:
        return None
    return g.array(node.input[1])


def _spatial_upsample(g: _Graph, node: onnx.NodeProto) -> bool:
    """Whether `node` is a Resize that upsamples only the spatial dims of an [N, C, H, W] tensor,
    channel by channel with weights that sum to one (nearest, or linear without antialiasing and
    not tf_crop_and_resize), from constant scales or sizes."""
    if node.op_type != "Resize" or node.domain not in ("", "ai.onnx"):
        return False
    mode = _attr(node, "mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    transform = _attr(node, "coordinate_transformation_mode", b"half_pixel")
    transform = transform.decode() if isinstance(transform, bytes) else transform
    if mode not in ("nearest", "linear") or transform == "tf_crop_and_resize" or _attr(node, "antialias", 0):
        return False
    if _attr(node, "axes", None) is not None or _attr(node, "keep_aspect_ratio_policy", b"stretch") not in (
            b"stretch", "stretch"):
        return False
    extra = [i for i in node.input[2:4] if i]
    if any(g.array(i) is None for i in extra):
        return False
    x, y = g.shapes.get(node.input[0]), g.shapes.get(node.output[0])
    return (x is not None and y is not None and len(x) == 4 and len(y) == 4 and x[:2] == y[:2]
            and x[2] * x[3] < y[2] * y[3])


def conv_over_upsampled_concat(g: _Graph, node: onnx.NodeProto) -> Rewrite | None:
    """The module doc's rule at `node`, a 1x1 convolution, or None where it does not apply."""
    w = _pointwise_conv(g, node)
    if w is None:
        return None
    concat = g.feeding(node, "Concat")        # None: the convolution reads one branch, maybe upsampled
    if concat is not None and (len(concat.input) < 2 or _attr(concat, "axis", None) not in (1, -3)):
        return None
    joint = concat if concat is not None else node
    out = g.shapes.get(node.input[0])          # the image the convolution reads
    if out is None or len(out) != 4:
        return None
    branches = [(x, g.shapes.get(x)) for x in (concat.input if concat is not None else node.input[:1])]
    if any(s is None or len(s) != 4 for _, s in branches) or sum(s[1] for _, s in branches) != w.shape[1]:
        return None
    ups = [g.producer.get(x) for x, _ in branches]
    ups = [u if u is not None and _spatial_upsample(g, u) and g.only_consumer(u.output[0]) is joint else None
           for u in ups]
    if not any(ups):            # no branch runs at a lower resolution: nothing saved
        return None
    m = w.shape[0]
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    terms: list[str] = []
    start = 0
    flops_before = 2 * m * w.shape[1] * out[0] * out[2] * out[3]
    flops_after = 0
    for k, ((x, shape), up) in enumerate(zip(branches, ups)):
        c = shape[1]
        w_name = g.fresh(f"{node.input[1]}_branch{k}")
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w[:, start:start + c]), w_name))
        start += c
        src = up.input[0] if up is not None else x
        src_shape = g.shapes[src]
        conv_out = g.fresh(f"{node.output[0]}_branch{k}")
        inputs = [src, w_name] + ([bias] if bias and k == 0 else [])
        nodes.append(helper.make_node("Conv", inputs, [conv_out], name=g.fresh(f"{node.name or 'conv'}_branch{k}"),
                                      kernel_shape=[1, 1]))
        flops_after += 2 * m * c * src_shape[0] * src_shape[2] * src_shape[3]
        term = conv_out
        if up is not None:
            resize_inputs = list(up.input)
            resize_inputs[0] = conv_out
            if len(resize_inputs) > 3 and resize_inputs[3]:         # sizes: the channel count is now M
                sizes = g.array(resize_inputs[3]).copy()
                sizes[1] = m
                s_name = g.fresh(f"{resize_inputs[3]}_branch{k}")
                inits.append(numpy_helper.from_array(sizes.astype(np.int64), s_name))
                resize_inputs[3] = s_name
            term = node.output[0] if len(branches) == 1 else g.fresh(f"{up.output[0]}_mixed")
            nodes.append(helper.make_node("Resize", resize_inputs, [term], name=g.fresh(f"{up.name or 'resize'}_mixed"),
                                          domain=up.domain, **{a.name: helper.get_attribute_value(a) for a in up.attribute}))
        terms.append(term)
    total = terms[0]
    for k, term in enumerate(terms[1:], 1):
        total_out = node.output[0] if k == len(terms) - 1 else g.fresh(f"{node.output[0]}_sum{k}")
        nodes.append(helper.make_node("Add", [total, term], [total_out], name=g.fresh(f"{node.name or 'conv'}_sum{k}")))
        total = total_out
    upsampled = [u.output[0] for u in ups if u is not None]
    if concat is None:
        removed = (upsampled[0], node.output[0])
        note = (f"{node.name or node.output[0]}: 1x1 Conv moved before the upsampling it read: "
                f"{_flops(flops_before)} -> {_flops(flops_after)}")
    else:
        removed = (concat.output[0], node.output[0], *upsampled)
        note = (f"{node.name or node.output[0]}: 1x1 Conv over a Concat of {len(branches)} branches "
                f"({len(upsampled)} upsampled) split per branch, each at its own resolution: "
                f"{_flops(flops_before)} -> {_flops(flops_after)}, the concatenation not written")
    return Rewrite("conv_over_upsampled_concat", removed, tuple(nodes), tuple(inits), note, flops_before - flops_after)


def _constant_2d(g: _Graph, node: onnx.NodeProto) -> np.ndarray | None:
    """The constant [K, C] right operand of a MatMul, or None."""
    m = g.array(node.input[1]) if node.op_type == "MatMul" else None
    return m if m is not None and m.ndim == 2 else None


def pointwise_conv_into_token_matmul(g: _Graph, node: onnx.NodeProto) -> Rewrite | None:
    """A 1x1 convolution W (+ c) of an image made from tokens, folded into the tokens' own linear map:

        conv_W(to_image(t @ M + b))  =  to_image(t @ (M W^T) + (b W^T + c))

    where to_image is Transpose(perm 0,2,1) of [N, HW, C] then Reshape to [N, C, H, W]: the
    convolution mixes the C channels pixel by pixel, as a product by W^T on the tokens' last axis
    would. Taken where it saves flops: HW K M < HW (K C + C M) for M of [K, C] and W of [M, C]."""
    w = _pointwise_conv(g, node)
    if w is None:
        return None
    reshape = g.feeding(node, "Reshape")
    transpose = g.feeding(reshape, "Transpose") if reshape is not None else None
    if transpose is None or list(_attr(transpose, "perm", [])) != [0, 2, 1]:
        return None
    add = g.feeding(transpose, "Add")
    if add is None:
        return None
    matmul = next((p for i in add.input if (p := g.producer.get(i)) is not None and p.op_type == "MatMul"), None)
    bias_name = next((i for i in add.input if matmul is None or i != matmul.output[0]), None)
    if matmul is None or bias_name is None or g.only_consumer(matmul.output[0]) is not add:
        return None
    m, b = _constant_2d(g, matmul), g.array(bias_name)
    shape = g.array(reshape.input[1])
    tokens, image = g.shapes.get(transpose.input[0]), g.shapes.get(reshape.output[0])
    if m is None or b is None or shape is None or tokens is None or image is None or len(tokens) != 3:
        return None
    k, c = m.shape
    out_c = w.shape[0]
    if (w.shape[1] != c or tokens[2] != c or b.size != c or b.shape[-1] != c or len(image) != 4
            or image[:2] != (tokens[0], c) or image[2] * image[3] != tokens[1] or shape.size != 4):
        return None
    if not k * out_c < k * c + c * out_c:
        return None
    w2 = w[:, :, 0, 0].astype(np.float64)
    conv_bias = g.array(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(out_c, np.float32)
    folded = (m.astype(np.float64) @ w2.T).astype(m.dtype)
    folded_bias = (b.reshape(-1).astype(np.float64) @ w2.T + conv_bias.astype(np.float64)).astype(b.dtype)
    new_shape = shape.copy()
    new_shape[1] = out_c
    names = [g.fresh(f"{matmul.input[1]}_folded"), g.fresh(f"{bias_name}_folded"), g.fresh(f"{reshape.input[1]}_folded")]
    mm_out, add_out, tr_out = (g.fresh(f"{x.output[0]}_folded") for x in (matmul, add, transpose))
    nodes = (helper.make_node("MatMul", [matmul.input[0], names[0]], [mm_out], name=g.fresh(f"{matmul.name}_folded")),
             helper.make_node("Add", [mm_out, names[1]], [add_out], name=g.fresh(f"{add.name}_folded")),
             helper.make_node("Transpose", [add_out], [tr_out], name=g.fresh(f"{transpose.name}_folded"), perm=[0, 2, 1]),
             helper.make_node("Reshape", [tr_out, names[2]], [node.output[0]], name=g.fresh(f"{reshape.name}_folded")))
    inits = (numpy_helper.from_array(folded, names[0]), numpy_helper.from_array(folded_bias, names[1]),
             numpy_helper.from_array(new_shape.astype(np.int64), names[2]))
    hw = tokens[1] * tokens[0]
    note = (f"{node.name or node.output[0]}: 1x1 Conv folded into the token MatMul before it "
            f"({_flops(2 * hw * (k * c + c * out_c))} -> {_flops(2 * hw * k * out_c)})")
    removed = (matmul.output[0], node.output[0], add.output[0], transpose.output[0], reshape.output[0])
    return Rewrite("pointwise_conv_into_token_matmul", removed, nodes, inits, note, 2.0 * hw * c * (k + out_c - k * out_c / c))


def _parity_slice(g: _Graph, value: str) -> tuple[str, tuple[int, int], list[str]] | None:
    """(source, (row parity, column parity), the values of its Slice chain) where `value` is
    source[..., a::2, b::2] of a 4-D source, taken by one Slice over both spatial axes or by two in a
    row; None otherwise."""
    parity: dict[int, int] = {}
    chain: list[str] = []
    while len(parity) < 2:
        node = g.producer.get(value)
        if node is None or node.op_type != "Slice" or len(node.input) < 5:
            return None
        starts, ends, axes, steps = (g.array(i) for i in node.input[1:5])
        source = g.shapes.get(node.input[0])
        if any(a is None for a in (starts, ends, axes, steps)) or source is None or len(source) != 4:
            return None
        for start, end, axis, step in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
            axis = axis % 4
            if axis not in (2, 3) or axis in parity or step != 2 or start not in (0, 1) or end < source[axis]:
                return None
            parity[axis] = start
        chain.append(value)
        value = node.input[0]
    return value, (parity[2], parity[3]), chain


def space_to_depth_conv(g: _Graph, node: onnx.NodeProto) -> Rewrite | None:
    """A convolution over a Focus stem's space-to-depth (the four pixel-parity slices x[..., a::2, b::2]
    concatenated on channels) as one stride-2 convolution of x, with no slice or concatenation:

        conv_{k x k, stride 1, pads p}(concat_q(x[..., a_q::2, b_q::2]))  =  conv_{2k x 2k, stride 2, pads 2p}(x)

    with W'[m, c, 2u + a, 2v + b] = W[m, q C + c, u, v] for the branch q of parities (a, b): the same
    products, read from x where the slices put them, and zero padding on both sides alike."""
    if node.op_type != "Conv" or len(node.input) < 2 or _attr(node, "group", 1) != 1:
        return None
    w = g.array(node.input[1])
    if w is None or w.ndim != 4 or any(s != 1 for s in _attr(node, "strides", [1, 1])):
        return None
    if any(d != 1 for d in _attr(node, "dilations", [1, 1])) or _attr(node, "auto_pad", b"NOTSET") not in (
            b"NOTSET", "NOTSET"):
        return None
    concat = g.feeding(node, "Concat")
    if concat is None or len(concat.input) != 4 or _attr(concat, "axis", None) not in (1, -3):
        return None
    parts = [_parity_slice(g, x) for x in concat.input]
    if any(p is None for p in parts) or len({p[0] for p in parts}) != 1 or len({p[1] for p in parts}) != 4:
        return None
    source = parts[0][0]
    shape = g.shapes.get(source)
    chains = [v for p in parts for v in p[2]]
    # every slice read only inside this space-to-depth (two chains may share their first slice)
    if shape is None or any(u.output[0] not in chains and u is not concat for v in chains for u in g.consumers.get(v, [])):
        return None
    if any(v in g.outputs for v in chains) or shape[2] % 2 or shape[3] % 2:
        return None
    channels = shape[1]
    m, _, kh, kw = w.shape
    big = np.zeros((m, channels, 2 * kh, 2 * kw), w.dtype)
    for q, (_, (a, b), _) in enumerate(parts):
        big[:, :, a::2, b::2] = w[:, q * channels:(q + 1) * channels]
    w_name = g.fresh(f"{node.input[1]}_space_to_depth")
    pads = [2 * p for p in _attr(node, "pads", [0, 0, 0, 0])]
    inputs = [source, w_name, *node.input[2:3]]
    conv = helper.make_node("Conv", inputs, [node.output[0]], name=g.fresh(f"{node.name or 'conv'}_space_to_depth"),
                            kernel_shape=[2 * kh, 2 * kw], strides=[2, 2], pads=pads)
    removed = (concat.output[0], node.output[0], *dict.fromkeys(chains))
    note = (f"{node.name or node.output[0]}: a {kh}x{kw} Conv over a space-to-depth of 4 strided Slices and a "
            f"Concat as one {2 * kh}x{2 * kw} stride-2 Conv of its source: nothing sliced or concatenated")
    return Rewrite("space_to_depth_conv", removed, (conv,), (numpy_helper.from_array(big, w_name),), note)


def _nearest_index(transform: str, rounding: str, n_in: int, n_out: int) -> np.ndarray | None:
    """The input index a nearest Resize reads for each output index along one axis, by the ONNX
    formula, or None for a mode this does not know."""
    y, scale = np.arange(n_out, dtype=np.float64), n_out / n_in
    if transform in ("half_pixel", "pytorch_half_pixel") and n_out > 1:
        x = (y + 0.5) / scale - 0.5
    elif transform == "asymmetric":
        x = y / scale
    elif transform == "align_corners":
        x = y * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(1)
    else:
        return None
    near = {"floor": np.floor(x), "ceil": np.ceil(x),
            "round_prefer_floor": np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x)),
            "round_prefer_ceil": np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))}.get(rounding)
    return None if near is None else np.clip(near, 0, n_in - 1).astype(np.int64)


def _nearest_double(g: _Graph, node: onnx.NodeProto) -> bool:
    """Whether `node` is a nearest Resize of [N, C, H, W] to [N, C, 2H, 2W] with output pixel (i, j)
    a copy of input pixel (i // 2, j // 2)."""
    if not _spatial_upsample(g, node) or _attr(node, "mode", b"nearest") not in (b"nearest", "nearest"):
        return False
    x, y = g.shapes[node.input[0]], g.shapes[node.output[0]]
    if y[2:] != (2 * x[2], 2 * x[3]):
        return False
    text = [_attr(node, a, d) for a, d in (("coordinate_transformation_mode", b"half_pixel"),
                                          ("nearest_mode", b"round_prefer_floor"))]
    transform, rounding = (t.decode() if isinstance(t, bytes) else t for t in text)
    for n in x[2:]:
        index = _nearest_index(transform, rounding, n, 2 * n)
        if index is None or not np.array_equal(index, np.arange(2 * n) // 2):
            return False
    return True


def _spatial_pads(g: _Graph, node: onnx.NodeProto) -> tuple[str, list[int]] | None:
    """(mode, [top, left, bottom, right]) of a Pad of a 4-D tensor that pads only H and W, with a
    zero fill where the mode is constant; None otherwise."""
    mode = _attr(node, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if len(node.input) > 1:
        pads = g.array(node.input[1])
        value = g.array(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(1)
        axes = g.array(node.input[3]) if len(node.input) > 3 and node.input[3] else np.arange(4)
        if pads is None or value is None or axes is None or pads.size != 2 * axes.size:
            return None
        full = [0] * 8
        for k, axis in enumerate(axes.tolist()):
            full[axis % 4], full[4 + axis % 4] = int(pads[k]), int(pads[axes.size + k])
    else:
        full, value = list(_attr(node, "pads", [])), np.array(_attr(node, "value", 0.0))
    if len(full) != 8 or full[0:2] != [0, 0] or full[4:6] != [0, 0] or (mode == "constant" and np.any(value != 0)):
        return None
    return mode, [full[2], full[3], full[6], full[7]]


# The sub-pixel rule's taps: _SUBPIXEL_TAPS[p][i, t] = 1 where tap t (offset t - 1) of a 3-tap filter
# over a nearest 2x upsampling reads, for output parity p, the same input pixel as tap i of a 2-tap
# filter whose window starts at offset p - 1 of the input: offset floor((p + t - 1) / 2) = i + p - 1.
_SUBPIXEL_TAPS = tuple(np.array([[1.0 if (p + t - 1) // 2 == i + p - 1 else 0.0 for t in range(3)] for i in range(2)])
                       for p in range(2))


def conv_over_nearest_upsample(g: _Graph, node: onnx.NodeProto) -> Rewrite | None:
    """A 3x3 convolution over a nearest 2x upsampling (padded by 1: reflect, edge or zeros) as four
    2x2 convolutions of the image before it, one per output pixel parity, interleaved:

        conv_3x3(pad_1(up_2(x)))[2a + p, 2b + q]  =  conv_2x2^(p, q)(pad'_1(x))[a + p, b + q]

    Of the 3 upsampled rows a 3x3 window reads at output row 2a + p, rows 2a and 2a + 1 are both
    copies of input row a, so their taps add into one (_SUBPIXEL_TAPS): a 2-tap filter over input
    rows a - 1, a (p = 0) or a, a + 1 (p = 1), and the same for columns. The padding passes through:
    a reflect or edge pad of 1 of the upsampled image is an edge pad of 1 of x, upsampled; zeros are
    zeros. The four kernels make one convolution of
    4M channels, ordered so that DepthToSpace puts output parity p at offset 1 - p of its 2x2 block;
    the result, shifted by one pixel, is sliced out. 16 instead of 36 products per input pixel
    (slightly more: (H + 1)(W + 1) instead of HW windows), and the upsampled image is never written:
    candy's two decoder convolutions go from 3.70 to 1.70 GFLOP at 224x224."""
    if node.op_type != "Conv" or len(node.input) < 2 or _attr(node, "group", 1) != 1:
        return None
    w = g.array(node.input[1])
    if w is None or w.ndim != 4 or w.shape[2:] != (3, 3) or any(s != 1 for s in _attr(node, "strides", [1, 1])):
        return None
    if any(d != 1 for d in _attr(node, "dilations", [1, 1])) or _attr(node, "auto_pad", b"NOTSET") not in (
            b"NOTSET", "NOTSET"):
        return None
    bias = g.array(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if len(node.input) > 2 and node.input[2] and bias is None:
        return None
    conv_pads = list(_attr(node, "pads", [0, 0, 0, 0]))
    pad = g.feeding(node, "Pad")
    if pad is not None:
        spec = _spatial_pads(g, pad)
        if spec is None or spec[1] != [1, 1, 1, 1] or spec[0] not in ("reflect", "edge", "constant") or any(conv_pads):
            return None
        edge = spec[0] != "constant"
        resize = g.feeding(pad, "Resize")
    else:
        if conv_pads != [1, 1, 1, 1]:
            return None
        edge = False
        resize = g.feeding(node, "Resize")
    if resize is None or not _nearest_double(g, resize):
        return None
    x = resize.input[0]
    n, c, h, wd = g.shapes[x]
    m = w.shape[0]
    kernel = np.empty((4 * m, c, 2, 2), np.float64)
    for p in range(2):
        for q in range(2):
            block = (1 - p) * 2 + (1 - q)          # DepthToSpace (DCR) puts channel block (r, s) at offset (r, s)
            kernel[block * m:(block + 1) * m] = np.einsum("it,mctu,ju->mcij", _SUBPIXEL_TAPS[p], w.astype(np.float64),
                                                          _SUBPIXEL_TAPS[q])
    nodes: list[onnx.NodeProto] = []
    inits = [numpy_helper.from_array(kernel.astype(w.dtype), g.fresh(f"{node.input[1]}_subpixel"))]
    src = x
    if edge:
        src = g.fresh(f"{x}_edge_padded")
        inits.append(numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), g.fresh(f"{src}_pads")))
        nodes.append(helper.make_node("Pad", [x, inits[-1].name], [src], name=g.fresh(f"{pad.name or 'pad'}_edge"),
                                      mode="edge"))
    conv_inputs = [src, inits[0].name]
    if bias is not None:
        inits.append(numpy_helper.from_array(np.tile(bias, 4), g.fresh(f"{node.input[2]}_subpixel")))
        conv_inputs.append(inits[-1].name)
    blocks, spread = (g.fresh(f"{node.output[0]}_{s}") for s in ("parities", "interleaved"))
    nodes.append(helper.make_node("Conv", conv_inputs, [blocks], name=g.fresh(f"{node.name or 'conv'}_subpixel"),
                                  kernel_shape=[2, 2], pads=[0, 0, 0, 0] if edge else [1, 1, 1, 1]))
    nodes.append(helper.make_node("DepthToSpace", [blocks], [spread], name=g.fresh(f"{node.name or 'conv'}_interleave"),
                                  blocksize=2, mode="DCR"))
    crop = [numpy_helper.from_array(np.array(v, np.int64), g.fresh(f"{node.output[0]}_crop_{s}"))
            for s, v in (("starts", [1, 1]), ("ends", [2 * h + 1, 2 * wd + 1]), ("axes", [2, 3]))]
    inits.extend(crop)
    nodes.append(helper.make_node("Slice", [spread, *(t.name for t in crop)], [node.output[0]],
                                  name=g.fresh(f"{node.name or 'conv'}_crop")))
    before = 2.0 * m * c * 9 * n * 4 * h * wd
    after = 2.0 * 4 * m * c * 4 * n * (h + 1) * (wd + 1)
    removed = (resize.output[0], node.output[0], *([pad.output[0]] if pad is not None else []))
    note = (f"{node.name or node.output[0]}: a 3x3 Conv over a nearest 2x upsampling as four 2x2 Convs of the "
            f"image before it, interleaved by DepthToSpace ({_flops(before)} -> {_flops(after)}), "
            f"the upsampled image not written")
    return Rewrite("conv_over_nearest_upsample", removed, tuple(nodes), tuple(inits), note, before - after)


def _last_two_swapped(rank: int) -> list[int]:
    """The permutation of `rank` axes that swaps the last two."""
    return list(range(rank - 2)) + [rank - 1, rank - 2]


def _swaps_last_two(node: onnx.NodeProto | None, rank: int) -> bool:
    """Whether `node` is a Transpose that swaps the last two of `rank` axes and nothing else."""
    return node is not None and node.op_type == "Transpose" and list(_attr(node, "perm", [])) == _last_two_swapped(rank)


def _last_axis_slice(g: _Graph, node: onnx.NodeProto, rank: int) -> bool:
    """Whether `node` is a Slice of constant starts and ends along the last of `rank` axes only."""
    if node.op_type != "Slice" or len(node.input) < 4:
        return False
    starts, ends, axes = (g.array(i) for i in node.input[1:4])
    steps = g.array(node.input[4]) if len(node.input) > 4 and node.input[4] else None
    if any(a is None or a.size != 1 for a in (starts, ends, axes)):
        return False
    return int(axes.reshape(-1)[0]) in (rank - 1, -1) and (steps is None or steps.size == 1)


def channel_first_linear_attention(g: _Graph, node: onnx.NodeProto) -> Rewrite | None:
    """ReLU linear attention (EfficientViT's LiteMLA) computed on channel-first q, k and v, so that
    neither the packed qkv nor the attention's output is transposed:

        with x = [..., 3d, N] (heads of q, k and v channels over N pixels), t = x^T, q, k, v = split(t),
        v' = pad(v) on its last axis, o = relu(q) (relu(k)^T v'), y = (slice_a(o) / (slice_b(o) + e))^T
        y = slice_a(o^T) / (slice_b(o^T) + e),  o^T = (v'^T relu(k)) relu(q)^T  (slices on the axis before last)

    and v'^T, relu(q)^T, relu(k) are the split of x itself, padded, and one transpose of k's channels:
    the same products summed over the same axes (o^T = kv^T q^T with kv^T = v'^T k). Of the three
    transposes the exported graph makes of each attention's tensors (qkv, k, the output: 5 d N
    values), one of d N values is left, which onnxruntime folds into its MatMul as it does now. The
    anchor is the Transpose of the output; every value in between is read only inside the pattern."""
    out = g.shapes.get(node.output[0])
    rank = len(out) if out is not None else 0
    if rank < 3 or not _swaps_last_two(node, rank):
        return None
    div = g.feeding(node, "Div")
    add, s_num = (g.feeding(div, "Add", 1), g.feeding(div, "Slice", 0)) if div is not None else (None, None)
    if add is None or s_num is None:
        return None
    eps_at = next((k for k, i in enumerate(add.input) if (c := g.array(i)) is not None and c.size == 1), None)
    s_den = g.feeding(add, "Slice", 1 - eps_at) if eps_at is not None else None
    if s_den is None:
        return None
    if not (_last_axis_slice(g, s_num, rank) and _last_axis_slice(g, s_den, rank)) or s_num.input[0] != s_den.input[0]:
        return None
    o_name = s_num.input[0]
    attn = g.producer.get(o_name)
    if attn is None or attn.op_type != "MatMul" or o_name in g.outputs or \
            {id(n) for n in g.consumers.get(o_name, [])} != {id(s_num), id(s_den)}:
        return None
    relu_q, kv = g.feeding(attn, "Relu", 0), g.feeding(attn, "MatMul", 1)
    if relu_q is None or kv is None:
        return None
    k_t, pad = g.feeding(kv, "Transpose", 0), g.feeding(kv, "Pad", 1)
    if not _swaps_last_two(k_t, rank) or pad is None or len(pad.input) > 3 or _attr(pad, "mode", b"constant") not in (
            b"constant", "constant"):
        return None
    relu_k = g.feeding(k_t, "Relu")
    pads = g.array(pad.input[1]) if len(pad.input) > 1 else None
    if relu_k is None or pads is None or pads.size != 2 * rank:
        return None
    if len(pad.input) > 2 and pad.input[2] and g.array(pad.input[2]) is None:
        return None
    split = g.producer.get(relu_q.input[0])
    if split is None or split.op_type != "Split" or g.producer.get(relu_k.input[0]) is not split or \
            g.producer.get(pad.input[0]) is not split or _attr(split, "axis", 0) not in (rank - 1, -1):
        return None
    parts = list(split.output)
    if len(parts) != 3 or sorted(parts.index(v) for v in (relu_q.input[0], relu_k.input[0], pad.input[0])) != [0, 1, 2]:
        return None
    users = {relu_q.input[0]: relu_q, relu_k.input[0]: relu_k, pad.input[0]: pad}
    if any(g.only_consumer(v) is not users[v] for v in parts):
        return None
    t = g.feeding(split, "Transpose")
    if not _swaps_last_two(t, rank):
        return None
    x = t.input[0]

    def fresh(v: str) -> str:
        return g.fresh(f"{v}_channel_first")
    parts_t = [fresh(v) for v in parts]
    new_split = helper.make_node("Split", [x, *split.input[1:]], parts_t, name=fresh(split.name or "split"),
                                 axis=rank - 2)
    new_split.attribute.extend(a for a in split.attribute if a.name != "axis")    # num_outputs, or split sizes (opset < 13)
    of = dict(zip(parts, parts_t))
    rq, rk, vp, k_n, kv_t, o_t, num, den, den_eps = (fresh(v) for v in (
        relu_q.output[0], relu_k.output[0], pad.output[0], k_t.output[0], kv.output[0], o_name,
        s_num.output[0], s_den.output[0], add.output[0]))
    pads_t = pads.reshape(2, rank).copy()
    pads_t[:, [rank - 2, rank - 1]] = pads_t[:, [rank - 1, rank - 2]]
    pads_name = fresh(pad.input[1])
    axes_name = fresh("axes")
    perm = _last_two_swapped(rank)
    nodes = (
        new_split,
        helper.make_node("Relu", [of[relu_q.input[0]]], [rq], name=fresh(relu_q.name or "relu")),
        helper.make_node("Relu", [of[relu_k.input[0]]], [rk], name=fresh(relu_k.name or "relu")),
        helper.make_node("Pad", [of[pad.input[0]], pads_name, *pad.input[2:]], [vp], name=fresh(pad.name or "pad"),
                         mode="constant"),
        helper.make_node("Transpose", [rk], [k_n], name=fresh(k_t.name or "transpose"), perm=perm),
        helper.make_node("MatMul", [vp, k_n], [kv_t], name=fresh(kv.name or "matmul")),
        helper.make_node("MatMul", [kv_t, rq], [o_t], name=fresh(attn.name or "matmul")),
        helper.make_node("Slice", [o_t, *s_num.input[1:3], axes_name, *s_num.input[4:]], [num],
                         name=fresh(s_num.name or "slice")),
        helper.make_node("Slice", [o_t, *s_den.input[1:3], axes_name, *s_den.input[4:]], [den],
                         name=fresh(s_den.name or "slice")),
        helper.make_node("Add", [den, add.input[eps_at]] if eps_at == 1 else [add.input[eps_at], den], [den_eps],
                         name=fresh(add.name or "add")),
        helper.make_node("Div", [num, den_eps], [node.output[0]], name=fresh(div.name or "div")),
    )
    inits = (numpy_helper.from_array(pads_t.reshape(-1).astype(np.int64), pads_name),
             numpy_helper.from_array(np.array([rank - 2], np.int64), axes_name))
    removed = (t.output[0], node.output[0], parts[0], relu_q.output[0], relu_k.output[0], pad.output[0],
               k_t.output[0], kv.output[0], o_name, s_num.output[0], s_den.output[0], add.output[0], div.output[0])
    note = (f"{node.name or node.output[0]}: linear attention on channel-first q, k, v: the packed qkv and the "
            f"output not transposed")
    return Rewrite("channel_first_linear_attention", removed, nodes, inits, note)


# Ops that compute each position along any axis from the same position of their inputs (numpy
# broadcasting): a row of the output needs only that row of each input that has the axis.
_ROWWISE = frozenset({
    "Abs", "Add", "Cast", "Ceil", "Clip", "Cos", "Div", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater",
    "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Less", "Log", "Max", "Min", "Mish", "Mul", "Neg", "Not",
    "Pow", "PRelu", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Softsign",
    "Sqrt", "Sub", "Tanh", "Where"})
_REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                     "ReduceSumSquare", "ReduceLogSumExp"})


def _row_inputs(g: _Graph, node: onnx.NodeProto, axis: int) -> dict[int, int] | None:
    """Which of `node`'s inputs one position along its output's `axis` reads, and along which of
    their axes: {input index: its axis}, an input missing where it reads all of itself (a weight, a
    broadcast operand); None where one output position needs more than one position of an input
    along that axis (a reduction or normalisation over it, a reshape that merges it), or the shapes
    are not known."""
    out = g.shapes.get(node.output[0])
    ins = [g.shapes.get(i) if i else () for i in node.input]
    if out is None or any(s is None for s in ins) or not 0 <= axis < len(out) or \
            any(o and (o in g.outputs or g.consumers.get(o)) for o in node.output[1:]):
        return None
    rank, op = len(out), node.op_type

    if op in _ROWWISE:
        picked = {}
        for k, shape in enumerate(ins):
            mine = axis - (rank - len(shape))        # broadcast: aligned from the right
            if node.input[k] and 0 <= mine < len(shape) and shape[mine] != 1:
                picked[k] = mine
        return picked
    if op in ("Softmax", "LogSoftmax"):
        opset = next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 13)
        if opset < 13:      # (before opset 13: over every axis from `axis` on, 1 by default)
            return {0: axis} if axis < int(_attr(node, "axis", 1)) % rank else None
        return {0: axis} if axis != int(_attr(node, "axis", -1)) % rank else None
    if op == "LayerNormalization":
        return {0: axis} if axis < int(_attr(node, "axis", -1)) % rank else None
    if op in _REDUCE:
        axes = _attr(node, "axes", None)
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = g.array(node.input[1])
            if axes is None:
                return None
        over = {int(a) % rank for a in np.asarray(axes).reshape(-1)} if axes is not None else set(range(rank))
        return {0: axis} if _attr(node, "keepdims", 1) and axis not in over else None
    if op == "Transpose":
        return {0: list(_attr(node, "perm", range(rank - 1, -1, -1)))[axis]}
    if op == "Reshape":
        shape = ins[0]
        for j in range(len(shape)):
            if int(np.prod(shape[:j])) == int(np.prod(out[:axis])) and shape[j] == out[axis]:
                return {0: j}
        return None
    if op == "MatMul":
        a, b = ins
        if len(a) < 2 or len(b) < 2:
            return None
        if axis == rank - 2:
            return {0: len(a) - 2}
        if axis == rank - 1:
            return {1: len(b) - 1}
        picked = {}
        for k, shape in enumerate((a, b)):
            mine = axis - (rank - 2 - (len(shape) - 2))
            if 0 <= mine < len(shape) - 2 and shape[mine] != 1:
                picked[k] = mine
        return picked
    return None


def _one_position(g: _Graph, node: onnx.NodeProto, shape: Sequence[int]) -> tuple[int, int, bool] | None:
    """(axis, position, whether the axis is kept) where `node` takes one position along one axis of
    its first input, of `shape`: a Gather of a constant scalar index (the axis dropped) or of a
    one-element index (kept), or a Slice of constant bounds, step 1, that keeps one position along
    one axis and every position along the others it names (kept: `x[:, -1:]`). None otherwise."""
    if node.op_type == "Gather" and len(node.input) == 2:
        index = g.array(node.input[1])
        if index is None or index.size != 1 or index.ndim > 1:
            return None
        axis = int(_attr(node, "axis", 0)) % len(shape)
        return axis, int(index.reshape(())) % shape[axis], index.ndim == 1
    if node.op_type != "Slice":
        return None
    if len(node.input) == 1:                                        # opset < 10: bounds as attributes
        starts, ends = _attr(node, "starts", None), _attr(node, "ends", None)
        axes, steps = _attr(node, "axes", None), None
    else:
        bounds = [g.array(i) if i else None for i in node.input[1:]]
        if any(b is None for b, i in zip(bounds, node.input[1:]) if i):
            return None
        starts, ends, axes, steps = (*bounds, None, None)[:4]
    if starts is None or ends is None:
        return None
    starts, ends = [int(v) for v in np.ravel(starts)], [int(v) for v in np.ravel(ends)]
    axes = list(range(len(starts))) if axes is None else [int(a) % len(shape) for a in np.ravel(axes)]
    if steps is not None and any(int(v) != 1 for v in np.ravel(steps)):
        return None
    taken = []
    for a, start, end in zip(axes, starts, ends):
        kept = range(*slice(start, end).indices(shape[a]))
        if len(kept) == 1 and shape[a] > 1:
            taken.append((a, kept[0]))
        elif kept != range(shape[a]):
            return None
    return (*taken[0], True) if len(taken) == 1 else None


def one_row_read(g: _Graph, node: onnx.NodeProto) -> Rewrite | None:
    """A Gather or Slice of one position along an axis (ViT's class token, a decoder's last token:
    `_one_position`) computed from that position alone, as far back as nothing else reads the values
    it comes from:

        gather(f(x), i, axis)  =  gather(f(slice(x, i:i+1, axis)), 0, axis)
        slice(f(x), i:i+1, axis)  =  f(slice(x, i:i+1, axis))

    for every f that computes each position along the axis from that position of its inputs
    (`_row_inputs`: elementwise ops, matrix products along their rows, normalisations and reductions
    over other axes, transposes and reshapes that keep the axis whole). Walking back from the Gather,
    a value is computed for the one position only if every reader of it is, so nothing is computed
    twice; where another reader needs it whole, it is computed whole and sliced. ViT's last encoder
    block computes its keys and values for every token, and its query, attention row, projection and
    MLP for the class token alone: 1/12 of ViT-B/16's 35 GFLOP saved, the identity exact."""
    data = g.shapes.get(node.input[0]) if node.op_type in ("Gather", "Slice") and node.input else None
    if not data or (picked := _one_position(g, node, data)) is None:
        return None
    axis, row, keeps_axis = picked
    if data[axis] == 1:              # (one row already: what this rule leaves behind)
        return None
    asked: dict[str, dict[int, int]] = {node.input[0]: {id(node): axis}}
    rows: dict[str, int] = {}                                # values computed for the one row alone
    plan: dict[int, dict[int, int]] = {}                     # id(node) -> its inputs read for the row
    nodes = list(g.model.graph.node)
    for n in reversed(nodes[:nodes.index(node)]):
        if len(n.output) < 1 or n.output[0] not in asked:
            continue
        v = n.output[0]
        requests, readers = asked[v], {id(c) for c in g.consumers.get(v, [])}
        axes = set(requests.values())
        if v in g.outputs or set(requests) != readers or len(axes) != 1:
            continue
        reads = _row_inputs(g, n, next(iter(axes)))
        if reads is None:
            continue
        rows[v] = next(iter(axes))
        plan[id(n)] = reads
        for k, ax in reads.items():
            asked.setdefault(n.input[k], {})[id(n)] = ax
    if node.input[0] not in rows:
        return None
    # Values read for one row that are not computed for it: sliced where they are (a constant, once).
    nodes_out: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    sliced: dict[tuple[str, int], str] = {}
    start = g.fresh(f"{node.name or 'gather'}_row")

    def one_row(value: str, ax: int) -> str:
        if value in rows:
            return value
        if (value, ax) not in sliced:
            name = g.fresh(f"{value}_row")
            const = g.array(value)
            if const is not None:
                inits.append(numpy_helper.from_array(np.ascontiguousarray(np.take(const, [row], axis=ax)), name))
            else:
                bounds = [g.fresh(f"{name}_{what}") for what in ("starts", "ends", "axes")]
                for b, v in zip(bounds, (row, row + 1, ax)):
                    inits.append(numpy_helper.from_array(np.array([v], np.int64), b))
                nodes_out.append(helper.make_node("Slice", [value, *bounds], [name], name=g.fresh(f"{start}_slice")))
            sliced[(value, ax)] = name
        return sliced[(value, ax)]

    saved = 0.0
    computed: list[onnx.NodeProto] = []
    for n in nodes:
        if id(n) not in plan:
            continue
        reads = plan[id(n)]
        inputs = [one_row(i, reads[k]) if k in reads else i for k, i in enumerate(n.input)]
        if n.op_type == "Reshape":
            shape = list(g.shapes[n.output[0]])
            shape[rows[n.output[0]]] = 1
            inputs[1] = g.fresh(f"{n.output[0]}_row_shape")
            inits.append(numpy_helper.from_array(np.array(shape, np.int64), inputs[1]))
        if n.op_type == "MatMul":
            out, k_dim = g.shapes[n.output[0]], g.shapes[n.input[0]][-1]
            saved += 2.0 * np.prod(out) * k_dim * (1 - 1 / out[rows[n.output[0]]])
        clone = onnx.NodeProto()
        clone.CopyFrom(n)
        del clone.input[:]
        clone.input.extend(inputs)
        del clone.output[1:]
        computed.append(clone)
    if keeps_axis:                   # the one row, its axis kept, is the value computed for it
        last = helper.make_node("Identity", [node.input[0]], list(node.output), name=g.fresh(start))
    else:
        first = g.fresh(f"{start}_index")
        inits.append(numpy_helper.from_array(np.array(0, np.int64), first))
        last = helper.make_node("Gather", [node.input[0], first], list(node.output), name=g.fresh(start), axis=axis)
    removed = (next(iter(rows)), node.output[0], *list(rows)[1:])
    taken = "sliced" if node.op_type == "Slice" else "gathered"
    note = (f"{node.name or node.output[0]}: position {row} of axis {axis} {taken} from {len(computed)} node(s) "
            f"computed for it alone, {len(sliced)} value(s) sliced ({_flops(saved)} saved)")
    return Rewrite("one_row_read", removed, (*nodes_out, *computed, last), tuple(inits), note, saved)


# Winograd's minimal filtering F(2x2, 3x3): an output tile of 2x2 pixels of a 3x3 correlation is
# A^T [(G w G^T) * (B^T d B)] A for the 4x4 input tile d over it, 16 products per channel pair where
# the direct sum takes 36 (Lavin and Gray, 2016). Every entry is 0, +-1 or +-1/2, so the transforms add
# little rounding of their own: a layer lands 3-6e-7 of its output's scale from the direct sum.
_WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
_WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
_WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)

# Both channel counts of a convolution computed Winograd's way reach this: its transforms are passes
# over memory (16 small depthwise convolutions in, 24 elementwise ops out) that only wide layers repay.
# Each layer alone, side by side at 2 threads (benchmarks/winograd_layers.py, 2026-12-04): from 128
# channels up OpenVINO ran 1.26-1.56x faster (128 -> 128 at 52x52 to 256 -> 512 at 26x26), onnxruntime
# 0.78-1.39x (it gains from 256 output channels); 64 -> 64 at 104x104 ran 0.89x and 0.55x, 32 -> 64 at
# 208x208 0.54x and 0.39x.
MIN_WINOGRAD_CHANNELS = 128

# F(4x4, 3x3) instead of F(2x2, 3x3) where a layer's output has at least this many 4x4 tiles (13x13:
# an output of ~50x50 pixels): its products take 2.25 multiplies per output where F(2x2, 3x3) takes 4,
# but with few tiles the 36 matrix products are too narrow to run at the machine's rate, and the tiles
# past the output are wasted work. Each layer alone, side by side at 2 threads, OpenVINO's F(4x4, 3x3)
# over its F(2x2, 3x3) (benchmarks/winograd_layers.py --f4, 2026-12-06): 52x52 to 104x104 1.10-1.25x,
# 26x26 0.98-1.04x, 13x13 0.87-0.92x; onnxruntime's 1.0-1.6x on all of them. Whole models (rewrite_gain.py
# --winograd-f2), OpenVINO: candy (ten layers at 56x56) 1.09x; yolov4 1.00x at this gate (its 11 layers
# of 52x52), 0.96x with its 26x26 layers too.
MIN_F4_TILES = 169

# ... and none where its output has fewer than this many 2x2 tiles (5x5: an output under ~9x9 pixels):
# there the 16 products are matrix products of a few columns, and the tiles past the output's edge
# are a large share of them (7x7 pixels are 16 tiles of 8x8). Each layer alone, side by side at 2
# threads (benchmarks/winograd_layers.py, 2026-12-06): at 7x7, 256 -> 256 ran 0.61x (onnxruntime) and
# 0.68x (OpenVINO) of its direct form, 512 -> 512 0.95x and 0.87x, 1024 -> 1024 1.06x and 1.00x; at
# 10x10 (25 tiles), 512 -> 512 1.30x and 1.14x; at 13x13, 512 -> 1024 1.36x and 1.35x. ResNet-50's
# last stage is 7x7.
MIN_F2_TILES = 25


def _tiles(shape: Sequence[int], side: int) -> int:
    """Output tiles of side x side that cover an NCHW output of `shape`, the last ones past its edge."""
    return -(-shape[2] // side) * -(-shape[3] // side)


def _winograd_weights(w: np.ndarray) -> np.ndarray:
    """G w G^T for every filter of w [M, C, 3, 3], as [4, 4, M, C] in float64: one product of the
    16 x 9 matrix kron(G, G) with the filters as columns (entry (a, b) of G f G^T is the sum over
    (j, k) of G_aj G_bk f_jk). yolov4's 33 layers: 0.65 s as two products of skinny matrices, 0.1 s."""
    m, c = w.shape[:2]
    return (np.kron(_WINOGRAD_G, _WINOGRAD_G) @ w.reshape(m * c, 9).T.astype(np.float64)).reshape(4, 4, m, c)


def winograd_conv3x3(g: _Graph, node: onnx.NodeProto, min_channels: int = MIN_WINOGRAD_CHANNELS,
                     min_f4_tiles: int = MIN_F4_TILES, min_f2_tiles: int = MIN_F2_TILES) -> Rewrite | None:
    """A dense 3x3 stride-1 convolution of at least `min_channels` in and out computed by Winograd's
    minimal filtering, in standard ONNX ops an engine runs at its matrix rate: F(4x4, 3x3) where
    its output has at least `min_f4_tiles` tiles of 4x4 (`_winograd_f4`), else F(2x2, 3x3) where it
    has at least `min_f2_tiles` tiles of 2x2:

        v_ij = depthwise conv 4x4, stride 2, of x with the filter outer(B^T_i, B^T_j)   (16 of them)
        m_ij = conv 1x1 of v_ij with U_ij = (G w G^T)_ij                                 (16 products)
        y_pq = sum_ij A^T_pi A^T_qj m_ij,  y = DepthToSpace(concat(y_00, y_01, y_10, y_11))

    Each input tile starts where its output tile does, two pixels apart, read through the
    convolution's own zero pads; an odd output row or column gets one more tile and is cropped. The
    bias enters m_11, whose coefficient is 1 in every y_pq. The 1x1 products carry 16 of the direct
    sum's 36 multiplies per output tile and channel pair; the transforms cost 256 per input channel
    and 24 adds per output channel, per tile, and are what MIN_WINOGRAD_CHANNELS repays."""
    if node.op_type != "Conv" or len(node.input) < 2 or _attr(node, "group", 1) != 1:
        return None
    weight = g.constants.get(node.input[1])
    if weight is None or len(weight.dims) != 4 or tuple(weight.dims[2:]) != (3, 3) or min(weight.dims[:2]) < \
            min_channels:
        return None
    y_shape = g.shapes.get(node.output[0])
    if node.input[0] not in g.shapes or y_shape is None or len(y_shape) != 4:
        return None
    if any(s != 1 for s in _attr(node, "strides", [1, 1])) or any(d != 1 for d in _attr(node, "dilations", [1, 1])):
        return None
    if _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    bias = g.array(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if len(node.input) > 2 and node.input[2] and bias is None:
        return None
    if _tiles(y_shape, 2) < min_f2_tiles:
        return None
    w = g.array(node.input[1])
    if _tiles(y_shape, 4) >= min_f4_tiles:
        return _winograd_f4(g, node, w, bias is not None)
    m, c = w.shape[:2]
    n, _, ho, wo = y_shape
    th, tw = -(-ho // 2), -(-wo // 2)                      # output tiles of 2x2
    top, left, bottom, right = _attr(node, "pads", [0, 0, 0, 0])
    u = np.ascontiguousarray(_winograd_weights(w), dtype=w.dtype)
    emit = _WinogradNodes(g, node)
    constant, op = emit.constant, emit.op
    products = {}
    for i in range(4):
        for j in range(4):
            taps = np.broadcast_to(np.outer(_WINOGRAD_BT[i], _WINOGRAD_BT[j]), (c, 1, 4, 4)).astype(w.dtype)
            v = op("Conv", [node.input[0], constant(f"{node.input[1]}_winograd_in_{i}{j}", taps)], kernel_shape=[4, 4],
                   strides=[2, 2], group=c, pads=[top, left, bottom + ho % 2, right + wo % 2])
            inputs = [v, constant(f"{node.input[1]}_winograd_{i}{j}", u[i, j][:, :, None, None])]
            if bias is not None and (i, j) == (1, 1):
                inputs.append(node.input[2])
            products[i, j] = op("Conv", inputs, kernel_shape=[1, 1])

    def combine(terms: list[tuple[float, str]]) -> str:
        acc = terms[0][1]                                  # every row of A^T starts with a +1
        for sign, value in terms[1:]:
            acc = op("Add" if sign > 0 else "Sub", [acc, value])
        return acc
    rows = {(p, j): combine([(_WINOGRAD_AT[p, i], products[i, j]) for i in range(4) if _WINOGRAD_AT[p, i]])
            for p in range(2) for j in range(4)}
    parities = [combine([(_WINOGRAD_AT[q, j], rows[p, j]) for j in range(4) if _WINOGRAD_AT[q, j]])
                for p in range(2) for q in range(2)]
    emit.interleave(op("Concat", parities, axis=1), 2, ho, wo)
    before = 2.0 * n * m * c * 9 * ho * wo
    after = 2.0 * n * th * tw * (16 * m * c + 16 * 16 * c) + 24.0 * n * th * tw * m
    note = (f"{emit.base}: a 3x3 Conv ({c} -> {m} channels, {ho}x{wo}) by Winograd's F(2x2, 3x3): 16 depthwise "
            f"input transforms, 16 1x1 Convs, the output tiles interleaved by DepthToSpace ({_flops(before)} -> "
            f"{_flops(after)})")
    # no flops floor: a yolov4 layer saves 0.4 of 60 GFLOP, under MIN_SAVED_FRACTION, and 33 of them 20
    return emit.rewrite(note)


class _WinogradNodes:
    """The nodes and initializers a Winograd rewrite of `node` adds, each named fresh in `g`."""

    def __init__(self, g: _Graph, node: onnx.NodeProto) -> None:
        self.g, self.node = g, node
        self.base = node.name or node.output[0]
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), self.g.fresh(name)))
        return self.inits[-1].name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        out = out or self.g.fresh(f"{self.node.output[0]}_winograd")
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.g.fresh(f"{self.base}_winograd"), **attrs))
        return out

    def interleave(self, tiles: str, block: int, ho: int, wo: int) -> None:
        """The node's output from `tiles` (the block x block output positions as channels, DCR order)
        by DepthToSpace, cropped to ho x wo where the tiles reach past it."""
        out = self.node.output[0]
        odd = ho % block or wo % block
        spread = self.op("DepthToSpace", [tiles], None if odd else out, blocksize=block, mode="DCR")
        if odd:
            crop = [self.constant(f"{out}_winograd_{s}", np.array(v, np.int64))
                    for s, v in (("starts", [0, 0]), ("ends", [ho, wo]), ("axes", [2, 3]))]
            self.op("Slice", [spread, *crop], out)

    def rewrite(self, note: str) -> Rewrite:
        return Rewrite("winograd_conv3x3", (self.node.output[0], self.node.output[0]), tuple(self.nodes),
                       tuple(self.inits), note)


# F(4x4, 3x3) (Lavin and Gray, 2016; interpolation points 0, +-1, +-2, infinity): a 4x4 output tile from
# the 6x6 input tile over it, 36 products per channel pair where the direct sum takes 144. Entries up
# to 5 in B^T, 8 in A^T and 1/24 in G round more than F(2x2, 3x3) does: a layer lands 4-8e-6 of its
# output's scale from the direct sum (benchmarks/winograd_layers.py --f4), against 3-4e-7.
F4_FORM = "F(4x4, 3x3)"
_WINOGRAD4_BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                          [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
_WINOGRAD4_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)
_WINOGRAD4_AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                         np.float64)


def _winograd_f4(g: _Graph, node: onnx.NodeProto, w: np.ndarray, has_bias: bool) -> Rewrite:
    """`node` (checked by winograd_conv3x3) by F(4x4, 3x3):

        r_i  = depthwise conv 6x1, stride (4, 1), of x with the taps B^T_i           (6: the tile rows)
        v_ij = depthwise conv 1x6, stride (1, 4), of r_i with the taps B^T_j         (36)
        m_ij = conv 1x1 of v_ij with U_ij = (G w G^T)_ij                             (36 products)
        y    = DepthToSpace_4(MatMul(A^T (x) A^T, concat(m_ij)))                     (the 16 output positions)

    The input transform in two passes of 6 taps (the same sums as one of 36 taps per tile, in another
    order); the output transform as one matrix product over the 36 products, laid side by side by the
    concat, instead of F(2x2, 3x3)'s adds (its coefficients are not +-1). The bias enters m_11, whose
    coefficient is 1 in every output position. Tiles past the output are cropped."""
    m, c = w.shape[:2]
    n, _, ho, wo = g.shapes[node.output[0]]
    th, tw = -(-ho // 4), -(-wo // 4)
    top, left, bottom, right = _attr(node, "pads", [0, 0, 0, 0])
    u = (np.kron(_WINOGRAD4_G, _WINOGRAD4_G) @ w.reshape(m * c, 9).T.astype(np.float64)).reshape(36, m, c)
    u = u.astype(w.dtype)
    emit = _WinogradNodes(g, node)
    constant, op = emit.constant, emit.op
    rows = [op("Conv", [node.input[0], constant(f"{node.input[1]}_winograd_rows_{i}",
                                                np.broadcast_to(_WINOGRAD4_BT[i][:, None], (c, 1, 6, 1)).astype(w.dtype))],
               kernel_shape=[6, 1], strides=[4, 1], group=c,
               pads=[top, left, bottom + 4 * th - ho, right + 4 * tw - wo]) for i in range(6)]
    products = []
    for i in range(6):
        for j in range(6):
            v = op("Conv", [rows[i], constant(f"{node.input[1]}_winograd_cols_{i}{j}",
                                              np.broadcast_to(_WINOGRAD4_BT[j][None, :], (c, 1, 1, 6)).astype(w.dtype))],
                   kernel_shape=[1, 6], strides=[1, 4], group=c)
            inputs = [v, constant(f"{node.input[1]}_winograd_{i}{j}", u[6 * i + j][:, :, None, None])]
            if has_bias and (i, j) == (1, 1):
                inputs.append(node.input[2])
            products.append(op("Conv", inputs, kernel_shape=[1, 1]))
    side = op("Reshape", [op("Concat", products, axis=1), constant(f"{node.output[0]}_winograd_side",
                                                                    np.array([n, 36, m * th * tw], np.int64))])
    positions = np.kron(_WINOGRAD4_AT, _WINOGRAD4_AT).astype(w.dtype)          # [16, 36]: position 4p+q, product 6i+j
    y16 = op("MatMul", [constant(f"{node.output[0]}_winograd_at", positions), side])
    emit.interleave(op("Reshape", [y16, constant(f"{node.output[0]}_winograd_tiles",
                                                 np.array([n, 16 * m, th, tw], np.int64))]), 4, ho, wo)
    before = 2.0 * n * m * c * 9 * ho * wo
    after = 2.0 * n * th * tw * (36 * m * c + 12 * 6 * c + 16 * 36 * m)
    note = (f"{emit.base}: a 3x3 Conv ({c} -> {m} channels, {ho}x{wo}) by Winograd's {F4_FORM}: 42 depthwise "
            f"input transforms, 36 1x1 Convs, the output tiles by one MatMul and DepthToSpace ({_flops(before)} -> "
            f"{_flops(after)})")
    return emit.rewrite(note)


def uses_f4(notes: Iterable[str]) -> bool:
    """Whether rewrite_model's notes tell of a Winograd layer in F(4x4, 3x3)."""
    return any(F4_FORM in note for note in notes)


Rule = Callable[[_Graph, onnx.NodeProto], Rewrite | None]
RULES: tuple[Rule, ...] = (conv_over_upsampled_concat, pointwise_conv_into_token_matmul, space_to_depth_conv,
                          conv_over_nearest_upsample, channel_first_linear_attention, winograd_conv3x3, one_row_read)
# RULES with every Winograd layer in F(2x2, 3x3), whose transforms round 10-20x less than F(4x4, 3x3)'s:
# what a rewritten model that misses the accuracy policy with F(4x4, 3x3) layers in it is tried with
# before every rewrite is dropped (pipeline.run_fission). yolov4 with its 11 F(4x4, 3x3) layers is
# 5-6e-4 of its outputs' scale from onnxruntime, whose own error is ~3e-4 (1.4e-4 in F(2x2, 3x3) only).
F2_RULES_NAME = "Winograd in F(2x2, 3x3) only"
F2_RULES: tuple[Rule, ...] = tuple(functools.partial(winograd_conv3x3, min_f4_tiles=2**62) if r is winograd_conv3x3
                                   else r for r in RULES)


def linear_flops(g: _Graph) -> float:
    """Flops of the graph's convolutions and matrix products (two per multiply-add), from static shapes."""
    total = 0.0
    for n in g.model.graph.node:
        out = g.shapes.get(n.output[0]) if n.output else None
        if out is None or n.op_type not in ("Conv", "MatMul", "Gemm", "ConvTranspose"):
            continue
        if n.op_type == "Conv":
            w = g.shapes.get(n.input[1])
            total += 2.0 * np.prod(out) * (np.prod(w[1:]) if w else 0)
        elif n.op_type == "ConvTranspose":
            w, x = g.shapes.get(n.input[1]), g.shapes.get(n.input[0])
            total += 2.0 * (np.prod(x) * np.prod(w[1:]) if w and x else 0)
        else:
            a = g.shapes.get(n.input[0])
            k = (a[0] if _attr(n, "transA", 0) else a[-1]) if a and n.op_type == "Gemm" else (a[-1] if a else 0)
            total += 2.0 * np.prod(out) * k
    return total


def rewrite_model(model: onnx.ModelProto, rules: Sequence[Rule] = RULES) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """The model with every rule applied wherever it holds (a copy; `model` is not changed), shapes
    inferred again, and a note per rewrite. The same model, and no notes, where nothing applies."""
    notes: list[str] = []
    current = model
    floor = MIN_SAVED_FRACTION * linear_flops(_Graph.of(model))

    def worth(r: Rewrite) -> bool:
        return r.flops_saved is None or r.flops_saved >= floor
    while True:           # each pass on a graph read afresh: rules never see stale producers
        g = _Graph.of(current)
        batch = _independent(r for n in current.graph.node for rule in rules if (r := rule(g, n)) is not None
                             and worth(r))
        if not batch:
            break
        current = _apply(current, batch)
        for done in batch:
            notes.append(done.note)
            log.info("rewrite (%s): %s", done.rule, done.note)
    return current, tuple(notes)


def _independent(found: Iterable[Rewrite]) -> list[Rewrite]:
    """Of the rewrites found on one graph, in order, those that can be applied together: none removes
    a value another reads or removes (the anchor's output keeps its name, so readers of it elsewhere
    are unaffected). A rewrite left out is found again on the next pass, on the graph the others made;
    yolov4's 33 Winograd convolutions take one pass instead of 33 copies of its 256 MB of weights."""
    batch: list[Rewrite] = []
    removed: set[str] = set()
    read: set[str] = set()
    for r in found:
        mine, reads = set(r.removed), {i for n in r.nodes for i in n.input}
        if mine & (removed | read) or reads & removed:
            continue
        batch.append(r)
        removed |= mine
        read |= reads
    return batch


def _apply(model: onnx.ModelProto, rewrites: Sequence[Rewrite]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    removed = {name for r in rewrites for name in r.removed}
    placed = {r.removed[1]: r.nodes for r in rewrites}       # each rule's anchor: its new nodes take its place
    kept: list[onnx.NodeProto] = []
    for n in g.node:
        if any(o in removed for o in n.output):
            kept.extend(placed.get(n.output[0], ()))
            continue
        kept.append(n)
    del g.node[:]
    g.node.extend(kept)
    for r in rewrites:
        g.initializer.extend(r.initializers)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    unused = [t for t in g.initializer if t.name not in used]
    for t in unused:
        g.initializer.remove(t)
    del g.value_info[:]
    _infer_shapes(out)
    return out
