"""`verify`'s defaults, importable without torch (the CLI's options read them)."""

#: default optimizer steps of the recipe with the larger global batch
DEFAULT_STEPS = 200
