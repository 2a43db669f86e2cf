"""rope throughput against the peers a user has, forward and backward, in one process on the
same inputs.

    python benchmarks/rope_bench.py [--rounds R] [--rows I,J] [--budget S] [--list-rows]
                                    [--dtypes D,...]

Prints one markdown table per direction. GB/s = bytes of q and k read and written / time
(2 * (Hq + Hk) * B * S * D elements; cos and sin left out). q and k are in transformers'
layout ([B, S, H, D] projections seen as [B, H, S, D]). Times from triton.testing.do_bench
(L2 flushed between runs) when Triton is installed, else CUDA events; each column takes
--rounds rounds in turn and keeps its best. Peers, each where it runs here: eager torch
(transformers' `apply_rotary_pos_emb` arithmetic), `torch.compile` of it, cuTile Python
through TileGym (backend "cutile": `tilegym.ops.apply_rope_base`, which rotates q and k in
place: each timed call rotates the previous call's result, the same work) and Liger-Kernel's
`liger_rotary_pos_emb`. "copy" is a device-to-device copy of the same bytes. Every peer's
forward is checked against a float32 reference on fresh copies of the inputs before it is
timed; one that disagrees is shown as "wrong" and not ranked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import tilegym_cutile_rs
import torch
from _timing import Rows, bandwidth_row, bench_timer, best_gbs, compiled_peer, copy_call, table_head

# (batch, seq, q heads, kv heads, head_dim): Llama 3 8B prefill and a batched decode step,
# Llama 3 70B, Qwen 2 7B, GPT-OSS (head_dim 64).
SHAPES = [(1, 4096, 32, 8, 128), (4, 2048, 32, 8, 128), (64, 1, 32, 8, 128), (1, 4096, 64, 8, 128), (1, 4096, 28, 4, 128),
          (1, 4096, 64, 8, 64)]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
Fn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], Any]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _eager(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s


def peers(missing: dict[str, str]) -> dict[str, Fn]:
    """Each peer as f(q, k, cos, sin) -> (q_embed, k_embed), with autograd; the ones that
    cannot run here go to `missing` with the reason."""
    found: dict[str, Fn] = {"torch": _eager}

    def works(fn: Fn) -> None:
        q, k = (torch.randn(1, h, 8, 64, device="cuda", requires_grad=True) for h in (4, 2))
        cos, sin = torch.randn(1, 8, 64, device="cuda"), torch.randn(1, 8, 64, device="cuda")
        qe, ke = fn(q.clone(), k.clone(), cos, sin)
        (qe.sum() + ke.sum()).backward()

    try:
        compiled = compiled_peer(_eager)
        works(compiled)
        found["torch.compile"] = compiled
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        missing["torch.compile"] = f"{type(exc).__name__}: {exc}"
    try:
        import tilegym

        tilegym.set_backend("cutile")

        def cutile(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
            return tilegym.ops.apply_rope_base(q, k, cos, sin)

        works(cutile)
        found["cutile-python"] = cutile
    except Exception as exc:  # noqa: BLE001
        missing["cutile-python"] = f"{type(exc).__name__}: {exc}"
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        works(liger_rotary_pos_emb)
        found["liger"] = liger_rotary_pos_emb
    except Exception as exc:  # noqa: BLE001
        missing["liger"] = f"{type(exc).__name__}: {exc}"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    Rows.add_arguments(parser)
    args = parser.parse_args()
    rows = Rows.from_args(args, [(d, *shape, dt) for d in ("forward", "backward") for shape in SHAPES for dt in args.dtypes.split(",")])
    import torch._functorch.config

    # Each timed backward reruns one graph (retain_graph=True), which torch.compile's donated
    # buffers refuse (a harness defect fix: the peer's code and config are unchanged).
    torch._functorch.config.donated_buffer = False
    bench = bench_timer()
    missing: dict[str, str] = {}
    fns: dict[str, Fn] = {**peers(missing), "ours": tilegym_cutile_rs.rope}
    names = [n for n in fns if n != "ours"]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, why in missing.items():
        print(f"peer {name} not available here ({why[:200]})")
    print()
    heading = None
    for direction, b, s, hq, hk, d, dtype_name in rows:
        if direction != heading:
            heading = direction
            table_head(f"rope {direction}", ["B x S x Hq/Hk x D", "dtype", "copy", *names, "ours", "ours / best peer", "ours / copy"])
        dtype = DTYPES[dtype_name]
        grad = direction == "backward"
        q0 = torch.randn(b, s, hq, d, device="cuda", dtype=dtype).transpose(1, 2)
        k0 = torch.randn(b, s, hk, d, device="cuda", dtype=dtype).transpose(1, 2)
        freqs = torch.randn(b, s, d // 2, device="cuda")
        cos, sin = torch.cat([freqs, freqs], -1).cos().to(dtype), torch.cat([freqs, freqs], -1).sin().to(dtype)
        with torch.no_grad():
            ref = _eager(q0.float(), k0.float(), cos.float(), sin.float())
        nbytes = 2 * (hq + hk) * b * s * d * q0.element_size()
        calls: dict[str, Callable[[], Any]] = {"copy": copy_call(nbytes)}
        wrong: set[str] = set()
        for name, fn in fns.items():
            try:
                with torch.no_grad():  # fresh copies: some peers rotate in place
                    got = fn(q0.clone(), k0.clone(), cos, sin)
                for g, r in zip(got, ref, strict=True):
                    torch.testing.assert_close(g.float(), r, rtol=2e-2, atol=5e-2)
            except Exception as exc:  # noqa: BLE001 - a peer that fails on this row is not ranked on it
                print(f"({name} fails or disagrees with the float32 reference on {b}x{s}x{hq}/{hk}x{d} {dtype_name}: {str(exc)[:300]})",
                      file=sys.stderr)
                wrong.add(name)
                continue
            q, k = q0.clone().requires_grad_(grad), k0.clone().requires_grad_(grad)
            if direction == "forward":
                calls[name] = lambda fn=fn, q=q, k=k, cos=cos, sin=sin: fn(q, k, cos, sin)
            else:
                # Every peer gets clones of the leaves (TileGym's rotates its inputs in place,
                # which a leaf that requires grad refuses); a clone's backward launches nothing.
                qe, ke = fn(q.clone(), k.clone(), cos, sin)
                dq, dk = torch.randn_like(qe), torch.randn_like(ke)
                calls[name] = lambda qe=qe, ke=ke, q=q, k=k, dq=dq, dk=dk: torch.autograd.grad((qe, ke), (q, k), (dq, dk), retain_graph=True)
        gbs = best_gbs(calls, args.rounds, bench, nbytes, grad)
        print(bandwidth_row([f"{b} x {s} x {hq}/{hk} x {d}", dtype_name], gbs, names, wrong), flush=True)
        del q0, k0, cos, sin, calls, ref
        torch.cuda.empty_cache()
    rows.report()


if __name__ == "__main__":
    main()
