"""The `korch` command line. The only module that reads argv or the environment."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from korch.errors import ExitCode, KorchError, ShapeError, VerificationError

log = logging.getLogger("korch.cli")


def _input_shapes(items: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    from korch.frontend import parse_input_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, shape = parse_input_shape(item)
        if name in shapes:
            raise ShapeError(f"--input-shape gives {name!r} twice")
        shapes[name] = shape
    return shapes


def cmd_fission(args: argparse.Namespace) -> int:
    from korch.ir.onnx_export import to_onnx
    from korch.ir.text import dump
    from korch.io import atomic_write, atomic_write_bytes
    from korch.pipeline import run_fission

    result = run_fission(args.model, _input_shapes(args.input_shape), verify=args.verify, seed=args.seed)
    graph = result.graph
    counts = graph.class_counts()
    print(f"model       {args.model}: {len(result.model.graph.node)} ONNX nodes, "
          f"{len(graph.inputs)} inputs, {len(graph.outputs)} outputs")
    print(f"primitives  {len(graph.nodes)}: " + ", ".join(f"{k.value} {v}" for k, v in counts.items()))
    print(f"time        load {result.load_seconds:.2f} s, fission {result.fission_seconds:.2f} s")
    if result.verify is not None:
        print(f"verify      {result.verify.summary()} (seed {args.seed})")
        for diff in result.verify.outputs:
            print(f"              {diff.name}: max abs {diff.max_abs:.3g}, relative {diff.rel:.2e}")
        if not result.verify.ok:
            raise VerificationError("the primitive graph disagrees with onnxruntime; no output written")
    if args.output:
        model = to_onnx(graph, doc=f"korch primitive graph of {args.model}")
        atomic_write_bytes(args.output, model.SerializeToString())
        print(f"wrote       {args.output}")
    if args.dump:
        text = dump(graph)
        if args.dump == "-":
            sys.stdout.write(text)
        else:
            atomic_write(args.dump, lambda tmp: tmp.write_text(text))
            print(f"wrote       {args.dump}")
    return 0


def cmd_zoo_list(args: argparse.Namespace) -> int:
    from korch import zoo

    for m in zoo.list_models(include_mini=not args.full_only):
        shapes = ", ".join(f"{i.name} {i.dtype}[{'x'.join(map(str, i.shape))}]" for i in m.inputs)
        print(f"{m.name:<18} {shapes:<34} {m.description}")
    return 0


def cmd_zoo_export(args: argparse.Namespace) -> int:
    from korch import zoo

    zoo.export_onnx(args.name, args.output, seed=args.seed)
    print(f"wrote {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="korch", description="Optimal kernel orchestration for ONNX inference graphs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="per-stage logs")
    parser.add_argument("-q", "--quiet", action="store_true", help="errors only")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("fission", help="rewrite an ONNX model into primitives (and check it against onnxruntime)")
    p.add_argument("model", help="an .onnx file or a zoo model name (see `korch zoo list`)")
    p.add_argument("-o", "--output", help="write the primitive graph as ONNX here")
    p.add_argument("--verify", action="store_true", help="compare with onnxruntime on random inputs")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs for --verify (default 0)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D1xD2...", help="fix an input's shape (repeatable)")
    p.add_argument("--dump", metavar="FILE", help="write the primitive graph as text ('-' for stdout)")
    p.set_defaults(run=cmd_fission)

    z = sub.add_parser("zoo", help="built-in random-weight models").add_subparsers(dest="zoo_command", required=True,
                                                                                 metavar="ZOO_COMMAND")
    zl = z.add_parser("list", help="list the zoo models")
    zl.add_argument("--full-only", action="store_true", help="hide the mini test variants")
    zl.set_defaults(run=cmd_zoo_list)
    ze = z.add_parser("export", help="build a zoo model and write it as ONNX")
    ze.add_argument("name")
    ze.add_argument("-o", "--output", required=True)
    ze.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    ze.set_defaults(run=cmd_zoo_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    logging.basicConfig(level=level, format="%(name)s: %(message)s")
    try:
        return args.run(args)
    except KorchError as e:
        print(f"korch: error: {e}", file=sys.stderr)
        return int(e.exit_code)
    except KeyboardInterrupt:
        print("korch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
