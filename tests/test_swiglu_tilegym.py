"""TileGym's silu_and_mul and get_swiglu route to our kernels once registered, with
TileGym's signatures, and never build TileGym's own cutile-rs crate (CPU: our errors)."""

from __future__ import annotations

from pathlib import Path

from .test_tilegym import no_cargo_env, run


def test_tilegym_silu_and_mul_and_get_swiglu_reach_our_kernels(tmp_path: Path) -> None:
    out = run(
        """
        import logging, torch, tilegym
        records = []
        logging.getLogger("tilegym_cutile_rs").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r.getMessage())})())
        import tilegym_cutile_rs.tilegym_backend as backend
        backend.register()
        tilegym.set_backend("cutile-rs")
        from tilegym.ops import get_swiglu
        errors = {}
        for label, call in [
            ("silu_and_mul", lambda: tilegym.ops.silu_and_mul(torch.randn(4, 8))),
            ("silu_and_mul out", lambda: tilegym.ops.silu_and_mul(torch.randn(4, 8), out=torch.empty(4, 4))),
            ("silu_and_mul kwargs", lambda: tilegym.ops.silu_and_mul(torch.randn(4, 8), some_future_flag=1)),
            ("get_swiglu", lambda: get_swiglu()(torch.randn(4, 8), torch.randn(4, 8))),
        ]:
            try:
                call()
            except Exception as exc:
                errors[label] = f"{type(exc).__name__}: {exc}"
        import tilegym_cutile_rs
        print(json.dumps({
            "errors": errors,
            "swiglu_is_ours": get_swiglu() is tilegym_cutile_rs.swiglu,
            "records": records,
            "spawned": [s for s in spawned if "cargo" in s],
        }))
        """,
        no_cargo_env(tmp_path),
    )
    assert out["swiglu_is_ours"] is True
    for label in ("silu_and_mul", "silu_and_mul out", "silu_and_mul kwargs"):
        assert out["errors"][label].startswith("ValueError: silu_and_mul runs on CUDA tensors"), out["errors"]
    assert out["errors"]["get_swiglu"].startswith("ValueError: swiglu runs on CUDA tensors"), out["errors"]
    assert any("some_future_flag" in r for r in out["records"])
    assert out["spawned"] == []
