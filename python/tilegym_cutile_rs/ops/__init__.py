"""One module (or package) per op. Each defines a literal `__all__`, which the package
re-exports (the build generates `_exports.py` from them), and `OP`, an `_registry.OpSpec` that
TileGym registration, warm-up and the check find (`_registry.ops()`). Adding an op adds a file here."""
