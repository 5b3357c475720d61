"""One reporter module per command: its formats, JSON document, text and check report.

See :mod:`rmsnorm_eps.reports.registry` for the interface and the name -> module map.
"""
