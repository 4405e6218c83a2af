"""The host side of training: the input pipeline, one call's samples and bytes, the recipe.

`pipeline` turns a device-side step time into end-to-end throughput with its bottleneck,
`measure` times a user's own data on this CPU, `recipe` holds the global-batch ceiling and
the learning-rate scaling rule.
"""
