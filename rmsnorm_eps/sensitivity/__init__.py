"""What an eps change does to a real model's outputs (extra ``[torch]``).

:func:`~rmsnorm_eps.sensitivity.run.measure` runs texts through a causal language model as it
is (the base) and with eps changed (``--eps`` values set in every norm's eps attribute, or
``--from``/``--to`` SPECs computed by a replacement forward), in every norm at once, one norm at
a time (``per_norm``) or one role at a time (``per_role``), and returns a frozen
:class:`~rmsnorm_eps.sensitivity.result.SensitivityResult`: per position class (position 0 and
positions >= 1) the mean next-token KL(base || new), top-1 agreement, max |delta logit|,
last-token NMSE and perplexity (see :mod:`rmsnorm_eps.sensitivity.metrics`).

Importing this package imports neither torch nor transformers; the functions do.
"""
