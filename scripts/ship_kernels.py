"""Add the shipped kernels to a built wheel (docs/design.md, "Shipped kernels").

    python scripts/ship_kernels.py WHEEL [--archs all|sm_80,sm_90,...] [--jobs N] [--from WHEEL2] [--no-cache]

Unpacks WHEEL, runs every op's shipped shapes on meta tensors through the wheel's own
library in describe mode for each architecture, compiles the kernels they take with
tileiras (no GPU needed) into `tilegym_cutile_rs/kernels/`, and packs the wheel again
in place (RECORD regenerated). `--from WHEEL2` copies the kernels WHEEL2 ships instead
of building them (they do not depend on the host CPU: the aarch64 wheel takes the ones
built for the x86_64 wheel), after checking they were built for this wheel's C ABI.

Kernels built before are reused from a content-addressed cache
($TILEGYM_CUTILE_RS_SHIP_CACHE, default: the user cache directory's
tilegym-cutile-rs-build/shipped-kernels), keyed by everything that decides a cubin: the
kernel's source, generics, options and specialization, this library's version and C ABI,
the architecture, tileiras' version and Cargo.lock (crates/ops/src/shipped.rs). `--no-cache`
compiles everything.

Needs, in the running interpreter: torch (meta tensors), cffi, wheel, and the Tile IR
toolchain (`pip install "tilegym-cutile-rs[tileiras]"` or CUTILE_TILEIRAS_PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

BUILD = """
import json, sys
from pathlib import Path
from tilegym_cutile_rs import _describe, _ship_build
archs = list(_describe.ARCHS) if sys.argv[2] == "all" else sys.argv[2].split(",")
index = _ship_build.build(Path(sys.argv[1]), archs, int(sys.argv[3]))
print(json.dumps({"archs": index["archs"], "build_seconds": index["build_seconds"]}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--archs", default="all", help="'all' (release wheels) or a comma-separated list, e.g. sm_90")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile threads (default: every CPU)")
    parser.add_argument("--from", dest="source", type=Path, help="copy the kernels this other wheel ships instead of building them")
    parser.add_argument("--no-cache", action="store_true", help="compile every kernel, reusing none built before")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "wheel", "unpack", str(args.wheel), "-d", tmp], check=True)
        (root,) = Path(tmp).iterdir()
        kernels = root / "tilegym_cutile_rs" / "kernels"
        if kernels.exists():
            shutil.rmtree(kernels)
        if args.source:
            with zipfile.ZipFile(args.source) as source:
                members = [n for n in source.namelist() if n.startswith("tilegym_cutile_rs/kernels/")]
                if not members:
                    raise SystemExit(f"{args.source} ships no kernels")
                source.extractall(root, members)
            built = json.loads((kernels / "index.json").read_text())
            manifest = (root / "tilegym_cutile_rs" / "_abi_manifest.py").read_text()
            if built["library_fingerprint"] not in manifest:
                raise SystemExit(f"{args.source}'s kernels were built for C ABI {built['library_fingerprint']}, not this wheel's")
            print(f"copied from {args.source.name}: {built['archs']}")
        else:
            # The wheel's own package and library, not whatever is installed.
            env = dict(os.environ, PYTHONPATH=str(root), TILEGYM_CUTILE_RS_CACHE_DIR="off")
            if args.no_cache:
                env["TILEGYM_CUTILE_RS_SHIP_CACHE"] = ""
            elif not env.get("TILEGYM_CUTILE_RS_SHIP_CACHE"):
                import platformdirs

                env["TILEGYM_CUTILE_RS_SHIP_CACHE"] = str(Path(platformdirs.user_cache_dir("tilegym-cutile-rs-build", appauthor=False)) / "shipped-kernels")
            env.pop("TILEGYM_CUTILE_RS_LIBRARY", None)
            env.pop("TILEGYM_CUTILE_RS_SHIPPED_DIR", None)
            out = subprocess.run(
                [sys.executable, "-c", BUILD, str(kernels), args.archs, str(args.jobs)],
                check=True, env=env, cwd=tmp, stdout=subprocess.PIPE, text=True,
            )
            print(f"built {out.stdout.strip()}")
        args.wheel.unlink()
        subprocess.run([sys.executable, "-m", "wheel", "pack", str(root), "-d", str(args.wheel.parent)], check=True)
    size = args.wheel.stat().st_size
    print(f"{args.wheel.name}: {size / 2**20:.1f} MiB, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
