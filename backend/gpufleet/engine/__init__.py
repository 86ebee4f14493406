"""The training engine: recipes, data, the per-rank loop, DDP/FSDP wrapping,
checkpoints and the ``mp.spawn`` launcher.

Importing this package does not import torch; the torch-free parts (configs,
the recipe registry, ``LaunchSpec``, exit codes, ``resolve_data_path``) are
safe for the web app.
"""
