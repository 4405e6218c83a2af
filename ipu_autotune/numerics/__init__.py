"""FP16 numerics advice from the model's own gradients: loss scale, stochastic rounding, partials.

A few FP32 training steps on the CPU, with the model's real initialisation, give histograms of
gradient and weight magnitudes over powers of two. From them:

* loss scale: the largest power of two that keeps the largest gradient 16x below FP16's
  maximum (65504), and how many non-zero gradients scale 1 would flush to zero;
* stochastic rounding: the share of weight updates smaller than half an FP16 ulp of their
  weight, which round-to-nearest drops (the weight never moves);
* partials: matmuls/convolutions whose partial sums could leave FP16's range or swamp.

One module per concern: `statistics` (the histograms; `optimizers`, `running` and `data`
serve it), `loss_scale`, `stochastic_rounding`, `partials`, and `advice` (the three together:
`advise`). They decide; `answer` holds what they decide as plain data (`NumericsAdvice` and
its `apply`, as a study stores it); `view` formats. Nothing here reads command-line arguments
(that is `commands/numerics.py`). Only torch is used (no numpy).

Nothing is imported here: callers import the module they need, so that reading a stored
answer (`answer`, `fp16`) does not import torch.
"""
