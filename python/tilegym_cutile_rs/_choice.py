"""An op's config choice: an explicit config checked against the op's config type, else a
decision autotuned earlier, else the op's heuristic, memoised per problem (Chooser)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import _describe, _library

if TYPE_CHECKING:
    from ._op import KeptLaunches

# An op's config type: a NamedTuple class of ints, some fields with defaults.
ConfigT = TypeVar("ConfigT", bound=tuple[int, ...])


def _make(config_type: type[ConfigT], values: Sequence[int]) -> ConfigT:
    made: ConfigT = config_type._make(values)  # type: ignore[attr-defined]
    return made


class Chooser(Generic[ConfigT]):
    """An op's config choice: an explicit config, else a decision autotuned earlier for
    the call's shape class (kept in the kernel cache directory), else the heuristic;
    `autotune=True` (or TILEGYM_CUTILE_RS_AUTOTUNE=1) tunes a shape class on first use.
    Decisions are memoised in process per exact problem: the per-call fast path."""

    MEMO_MAX = 4096

    def __init__(self, op: str, config_type: type[ConfigT], plans: KeptLaunches[Any] | None = None) -> None:
        self.op, self.config_type, self.plans = op, config_type, plans
        self._memo: dict[Any, tuple[ConfigT, bool]] = {}

    def choose(
        self,
        problem: Any,
        shape_class: Callable[[], str],
        heuristic: Callable[[], ConfigT],
        candidates: Callable[[], Sequence[ConfigT]],
        tuner: Callable[[], Callable[[ConfigT], object]],
        autotune: bool,
    ) -> ConfigT:
        """The config for `problem` (a hashable key: device, dtype, extents, whatever the
        heuristic reads). `tuner()` returns a function that launches one candidate.
        Describing shipped kernels takes the heuristic's choice, as a fresh install would."""
        if _describe.describing():
            return heuristic()
        found = self._memo.get(problem)
        if found is None or (autotune and not found[1]):
            if found is not None and self.plans is not None:
                self.plans.invalidate()  # a tuned decision replaces the heuristic's
            found = self._decide(shape_class(), heuristic, candidates, tuner, autotune)
            if len(self._memo) >= self.MEMO_MAX:
                self._memo.clear()
            self._memo[problem] = found
        return found[0]

    def _decide(
        self,
        key: str,
        heuristic: Callable[[], ConfigT],
        candidates: Callable[[], Sequence[ConfigT]],
        tuner: Callable[[], Callable[[ConfigT], object]],
        autotune: bool,
    ) -> tuple[ConfigT, bool]:
        from . import _autotune  # at a first call, not at import

        stored = _autotune.lookup(key)
        fields: tuple[str, ...] = self.config_type._fields  # type: ignore[attr-defined]
        if stored is not None and len(stored) == len(fields):  # other lengths: an older form, retune
            return _make(self.config_type, stored), True
        import torch

        # Tuning synchronizes the device, which a CUDA graph capture forbids.
        if not (autotune or _autotune.enabled_by_env()) or torch.cuda.is_current_stream_capturing():
            return heuristic(), False
        return _autotune.tune(key, list(candidates()), tuner()), True


def check_config(config: object, config_type: type[ConfigT]) -> ConfigT:
    """An explicit config as the op's config type: a tuple (or the type itself) of ints with at
    least the fields that have no default. The library checks every value's range; said here
    is only what depends on the toolchain (cutile's own compile error would name no fix)."""
    fields: tuple[str, ...] = config_type._fields  # type: ignore[attr-defined]
    defaults: dict[str, int] = config_type._field_defaults  # type: ignore[attr-defined]
    required = len(fields) - len(defaults)
    form = f"{config_type.__name__}({', '.join(fields)}), or a tuple of {required} to {len(fields)} ints"
    try:
        values = tuple(int(v) for v in config)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise TypeError(f"config must be {form}, got {config!r}") from None
    if not required <= len(values) <= len(fields):
        raise TypeError(f"config must be {form}, got {config!r}")
    checked = _make(config_type, values + tuple(defaults[f] for f in fields[len(values) :]))
    warps = getattr(checked, "warps", 0)
    if warps:
        from . import _toolchain
        from .errors import ToolchainNotFoundError

        lib = _library.library()
        try:
            release = _toolchain.configure().release
        except ToolchainNotFoundError:
            return checked  # no toolchain: only shipped kernels run, and the library refuses any other
        if release < (13, 5) and not lib.CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 >> warps & 1:
            taken = [w for w in range(1, lib.CUTILE_MAX_WORKER_WARPS + 1) if lib.CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 >> w & 1]
            raise ValueError(
                f"config warps = {warps}: tileiras {'.'.join(map(str, release))} takes 0 (its own choice) or "
                f"{' or '.join(map(str, taken))} worker warps per CTA; other powers of two up to "
                f"{lib.CUTILE_MAX_WORKER_WARPS} need tileiras 13.5 or newer"
            )
    return checked
