"""TileGym's matmul and bmm route to our kernels once registered, with TileGym's
signatures and keywords, and never build TileGym's own cutile-rs crate (CPU: our errors)."""

from __future__ import annotations

from pathlib import Path

from .test_tilegym import no_cargo_env, run


def test_tilegym_matmul_and_bmm_reach_our_kernels(tmp_path: Path) -> None:
    out = run(
        """
        import torch, tilegym
        import tilegym_cutile_rs.tilegym_backend as backend
        backend.register()
        tilegym.set_backend("cutile-rs")
        errors = {}
        for label, call in [
            ("matmul", lambda: tilegym.ops.matmul(torch.randn(4, 8), torch.randn(8, 2))),
            ("matmul kwargs", lambda: tilegym.ops.matmul(torch.randn(8, 4), torch.randn(2, 8), trans_a=True, trans_b=True,
                                                         static_persistent=False, use_tma=True)),
            ("bmm", lambda: tilegym.ops.bmm(torch.randn(2, 4, 8), torch.randn(2, 8, 2), transpose_a=False, static_persistent=True)),
        ]:
            try:
                call()
            except Exception as exc:
                errors[label] = f"{type(exc).__name__}: {exc}"
        from tilegym.backend import is_backend_available
        print(json.dumps({"errors": errors, "available": is_backend_available("cutile-rs"),
                          "spawned": [s for s in spawned if "cargo" in s]}))
        """,
        no_cargo_env(tmp_path),
    )
    assert out["available"] is True
    for label in ("matmul", "matmul kwargs"):
        assert out["errors"][label].startswith("ValueError: matmul runs on CUDA tensors"), out["errors"]
    assert out["errors"]["bmm"].startswith("ValueError: bmm runs on CUDA tensors"), out["errors"]
    assert out["spawned"] == []
