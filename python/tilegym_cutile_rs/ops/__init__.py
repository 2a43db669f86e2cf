"""One module per op. Each defines `__all__`; the package exports those names
(see tilegym_cutile_rs.__getattr__), so adding an op adds a file here."""
