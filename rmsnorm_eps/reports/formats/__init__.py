"""Output formats, each knowing nothing of commands.

``text`` renders rich renderables (the command modules build them), ``json`` serializes a
document, and ``markdown``, ``github``, ``junit`` and ``sarif`` render a format-neutral
:class:`~rmsnorm_eps.reports.checks.CheckReport` (``render_checks``).
"""
