"""Inductor's frozen float32 linears run by oneDNN, not MKL.

Inductor's freezing packs the weight of a float32 matmul by a constant for MKL's GEMM
(`mkl._mkl_linear`) wherever torch has MKL, and for oneDNN's linear (`mkldnn._linear_pointwise`)
only for reduced precision. MKL is tuned for Intel's cores. On this project's AMD EPYC Zen 4 host
oneDNN ran the transformers' linears in 0.65-0.75x MKL's time (benchmarks/linear_packing.py, five
of six shapes; 128 x 768 x 768 read 1.01x and 1.48x in two runs), and Inductor's whole
bert-base, gpt2-small and vit-b16 ran 1.57x, 1.67x and 1.23x slower with MKL's linears
(benchmarks/inductor_linear.py; segformer-b0 and efficientvit-b1, few linears, 0.97x and 1.02x).
On the Intel Xeon host MKL was the faster by 7-17% (BENCHMARKS.md), so korch keeps Inductor's
choice on Intel CPUs (provider.onednn_linears_here). oneDNN is also what OpenVINO's CPU plugin and
Inductor's own convolutions run on.

`OneDnnLinears` is a post-grad pass (Inductor's `post_grad_custom_post_pass`, run after freezing):
each `mkl._mkl_linear` whose plain weight is a frozen constant becomes `mkldnn._linear_pointwise`
with that weight packed for oneDNN at compile, and MKL's packed copy is dropped. Tracing the
oneDNN linear directly is not an option: Inductor's freezing patterns for a linear followed by an
add assume its weight is still the packing op, not a folded constant.
"""

from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

# Bump when the pass changes what it emits: Inductor's FX graph cache keys compiled code by it.
PASS_VERSION = 1


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight") \
        and hasattr(torch.ops.mkldnn, "_linear_pointwise") and hasattr(torch.ops, "mkl") \
        and hasattr(torch.ops.mkl, "_mkl_linear")


class OneDnnLinears(CustomGraphPass):
    """Replaces each frozen MKL linear of float32 by oneDNN's (module docstring)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        gm = graph.owning_module
        if gm is None:
            return
        mkl = torch.ops.mkl._mkl_linear
        # one oneDNN copy per weight and batch: a weight two matmuls read is frozen for each (two
        # views of its memory) and MKL's is packed for each
        packed_for: dict[tuple[int, tuple[int, ...], tuple[int, ...], int], str] = {}
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in (mkl, mkl.default):     # (Inductor names the packet)
                continue
            x, packed, plain, bias, batch = node.args
            if not (isinstance(plain, torch.fx.Node) and plain.op == "get_attr"):
                continue
            weight = getattr(gm, plain.target)          # (out, in): the weight MKL packed
            if not isinstance(weight, torch.Tensor) or weight.dtype != torch.float32 or weight.dim() != 2:
                continue
            key = (weight.data_ptr(), tuple(weight.shape), tuple(weight.stride()), batch)
            name = packed_for.get(key)
            if name is None:
                name = packed_for[key] = _free_name(gm, f"{plain.target}_onednn")
                gm.register_buffer(name, torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), batch))
            with graph.inserting_before(node):
                w = graph.create_node("get_attr", name, (), {})
                w.meta.update(plain.meta)           # its fake value: (out, in), as oneDNN packs it
                linear = graph.call_function(torch.ops.mkldnn._linear_pointwise.default,
                                             (x, w, bias, "none", [], ""))
            linear.meta.update(node.meta)
            node.replace_all_uses_with(linear)
            graph.erase_node(node)
            for old in (packed, plain):
                if isinstance(old, torch.fx.Node) and not old.users:
                    graph.erase_node(old)

    def uuid(self) -> str:
        return f"korch-onednn-linears-{PASS_VERSION}"


def _free_name(gm: torch.nn.Module, base: str) -> str:
    name, k = base, 0
    while hasattr(gm, name):
        k += 1
        name = f"{base}{k}"
    return name
