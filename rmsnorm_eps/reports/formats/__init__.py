"""Output formats, each knowing nothing of commands.

``text`` renders blocks of text and tables (the command modules build them; rich only for
colour and narrow terminals), ``json`` serializes a document, and ``markdown``, ``github``,
``junit`` and ``sarif`` render a format-neutral
:class:`~rmsnorm_eps.reports.checks.CheckReport` (``render_checks``).
"""
