"""Runs a small random-weight transformers model through one of TileGym's model patches
and prints one JSON line comparing it with the same model unpatched:

    python tests/model_patch_run.py MODEL BACKEND [--train]

MODEL is "llama" (`apply_tilegym_kernel_to_llama()`) or "gpt_oss"
(`apply_tilegym_kernel_to_gpt_oss()`), each patch with its defaults; BACKEND is a TileGym
backend name ("cutile-rs": ours, registered the documented way; "cutile": TileGym's cuTile
Python). The report: prefill top-1 agreement with the unpatched model, the greedy
`generate()` tokens' agreement with the unpatched model's, position by position and step by
step (each token against the unpatched model's choice after the same prefix), TileGym's warnings (a fallback or a default implementation
would show there; DISABLE_FALLBACK=1 makes either an error) and, with --train, each
parameter's gradient error relative to the unpatched model's after one loss.backward().

The patch replaces classes and functions inside transformers' modules for the whole
process, so each run is a process of its own (tests/test_model_patches_gpu.py).
The sizes are the real models' per-layer shapes (Llama 3 8B, GPT-OSS 20B) with two layers,
a small vocabulary and few experts: the kernels the wheel ships for those models run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import warnings
from typing import Any

os.environ.setdefault("DISABLE_FALLBACK", "1")  # TileGym: a missing implementation raises

import torch

PROMPT = 96
NEW_TOKENS = 32
VOCAB = 2048


def config(model: str) -> Any:
    if model == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=VOCAB, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
            max_position_embeddings=8192, attn_implementation="sdpa", dtype=torch.bfloat16,
        )
    from transformers import GptOssConfig

    return GptOssConfig(
        vocab_size=VOCAB, hidden_size=2880, intermediate_size=2880, num_hidden_layers=2,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=64, layer_types=["sliding_attention", "full_attention"],
        attn_implementation="eager", dtype=torch.bfloat16,
    )


def build(cfg: Any, state: dict[str, torch.Tensor] | None) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(device="cuda", dtype=torch.bfloat16)
    if state is not None:
        model.load_state_dict(state)
    return model


def run(model: Any, ids: torch.Tensor, train: bool) -> dict[str, Any]:
    model.eval()
    with torch.no_grad():
        logits = model(ids).logits.float()
        tokens = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    out: dict[str, Any] = {"top1": logits.argmax(-1), "tokens": tokens[:, ids.shape[1]:]}
    if train:
        model.train()
        model.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        torch.autograd.backward(loss)
        out["grads"] = {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}
        out["loss"] = float(loss)
    return out


def patched_modules(model: str) -> list[Any]:
    """What the patch rewrites: the model's transformers module and the attention registry."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if model == "llama":
        from transformers.models.llama import modeling_llama as module
    else:
        from transformers.models.gpt_oss import modeling_gpt_oss as module
    return [module, ALL_ATTENTION_FUNCTIONS]


def snapshot(model: str) -> list[tuple[Any, dict[str, Any]]]:
    module, attention = patched_modules(model)
    return [(module, dict(vars(module))), (attention, dict(attention._local_mapping))]


def restore(saved: list[tuple[Any, dict[str, Any]]]) -> None:
    """Undoes the patch, so the unpatched model (built before it) runs its own code again:
    the patch swaps module-level functions its instances look up at call time."""
    (module, names), (attention, local) = saved
    for name, value in names.items():
        setattr(module, name, value)
    attention._local_mapping = local


def patch(model: str, backend: str) -> None:
    import tilegym
    from tilegym.transformers import monkey_patch

    if backend == "cutile-rs":
        import tilegym_cutile_rs.tilegym_backend as ours

        ours.register()
    tilegym.set_backend(backend)
    if model == "llama":
        monkey_patch.apply_tilegym_kernel_to_llama()
    else:
        monkey_patch.apply_tilegym_kernel_to_gpt_oss()


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["llama", "gpt_oss"])
    parser.add_argument("backend")
    parser.add_argument("--train", action="store_true")
    args = parser.parse_args()

    cfg = config(args.model)
    reference = build(cfg, None)
    state = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (1, PROMPT), device="cuda")
    want = run(reference, ids, args.train)
    reference.zero_grad(set_to_none=True)

    # TileGym's import-time notes about this machine (a backend it cannot load) are not the
    # patch's: imported before the log is collected.
    import tilegym.transformers.monkey_patch  # noqa: F401

    collect = Collect()
    for name in ("", "tilegym", "tilegym_cutile_rs"):
        logging.getLogger(name).addHandler(collect)
    report: dict[str, Any] = {"model": args.model, "backend": args.backend}
    saved = snapshot(args.model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patch(args.model, args.backend)
        patched = build(cfg, state)
        try:
            got = run(patched, ids, args.train)
        except Exception as exc:  # reported, so that the test shows what failed where
            report["error"] = f"{type(exc).__name__}: {exc}"
            got = None
    restore(saved)
    report["warnings"] = collect.messages + [f"{w.category.__name__}: {w.message}" for w in caught
                                             if "tilegym" in str(w.filename) or "tilegym" in str(w.message)]
    if got is not None:
        report["prefill_top1"] = float((got["top1"] == want["top1"]).float().mean())
        report["generate_agreement"] = float((got["tokens"] == want["tokens"]).float().mean())
        # Each generated token against the unpatched model's greedy choice for the same prefix
        # (the patched model's own earlier tokens): one near-tie resolved the other way makes
        # every later position of the free-running comparison above differ, this one not.
        reference.eval()
        with torch.no_grad():
            sequence = torch.cat([ids, got["tokens"][:, :-1]], dim=1)
            choice = reference(sequence).logits[:, PROMPT - 1:].argmax(-1)
        report["generate_stepwise_agreement"] = float((choice == got["tokens"]).float().mean())
        report["tokens"] = [want["tokens"].tolist(), got["tokens"].tolist()]
        if args.train:
            errors = {n: float((g - want["grads"][n]).norm() / want["grads"][n].norm().clamp_min(1e-12))
                      for n, g in got["grads"].items()}
            report["loss"] = [want["loss"], got["loss"]]
            report["grads_missing"] = sorted(set(want["grads"]) - set(got["grads"]))
            report["grad_rel_error_max"] = max(errors.values())
            report["grad_rel_error_worst"] = sorted(errors.items(), key=lambda e: -e[1])[:4]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
