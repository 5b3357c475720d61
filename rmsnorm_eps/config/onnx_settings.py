"""The :class:`~rmsnorm_eps.config.model.NormConfig` settings of the norms an ONNX graph holds:
one entry's overrides per :class:`~rmsnorm_eps.config.onnx_nodes.GraphNorm` (eps with its
stored dtype and where it lives, placement, gain, norm, reduction dtype, d), and the findings
(eps absent, schema default used, one norm's eps unlike that of most of its kind).
"""

from __future__ import annotations

from rmsnorm_eps.config.fields import shorten
from rmsnorm_eps.config.model import Provenance, Resolved, missing
from rmsnorm_eps.config.onnx_nodes import GraphNorm


def _settings(norm: GraphNorm, path: str) -> tuple[tuple[str, Resolved], ...]:
    """The NormConfig overrides of one graph norm."""
    import numpy as np

    def at(key: str, note: str = "") -> Provenance:
        return Provenance("file", path, key=key, note=note)

    key = f"{norm.graph}: {norm.op}"
    if norm.eps is None:
        eps = missing(f"{norm.eps_where} ({key})")
    elif norm.eps_default:
        eps = Resolved(norm.eps, Provenance("framework", norm.eps_where, note=key))
    else:
        # the shortest decimal that reads back as the same stored float (as GGUF's float32)
        half_or_single = norm.eps_dtype in ("float16", "float32")
        short = str(np.dtype(norm.eps_dtype).type(norm.eps)) if half_or_single else None
        # the narrowest dtype eps went through: a Cast to float16 then up to float32 rounded
        # it to float16's precision, whatever dtype it is added in
        through = next(
            (
                t
                for t in ("float16", "bfloat16")
                if t == norm.eps_dtype or f"Cast to {t}" in norm.eps_where
            ),
            None,
        )
        rounded = f"eps rounded to {through}" if through is not None else ""
        eps = Resolved(
            norm.eps,
            at(f"{key}: {norm.eps_where}", rounded),
            stored=norm.eps_dtype if short is not None else None,
            short=short,
        )
    out: list[tuple[str, Resolved]] = [
        ("eps", eps),
        ("placement", Resolved(norm.placement, at(key))),
        ("gain", Resolved(norm.gain, at(key, norm.gain_where))),
        ("norm", Resolved(norm.norm, at(key, f"name from {norm.name_from}"))),
    ]
    if norm.add_dtype in ("float16", "bfloat16", "float32", "float64"):
        out.append(("reduction_dtype", Resolved(norm.add_dtype, at(key, norm.add_dtype_from))))
    if norm.dim is not None:
        out.append(("dim", Resolved(norm.dim, at(key, "length of the scale"))))
    return tuple(out)


def _sibling_notes(norms: tuple[GraphNorm, ...]) -> list[str]:
    """Norms whose eps differs from that of most norms of the same kind (one unlike its
    siblings), and norms without eps."""
    from collections import Counter

    notes = []
    for norm in norms:
        if norm.eps is None or norm.eps_default:
            notes.append(f"FINDING {shorten(norm.name, 120)}: {norm.eps_where}")
    by_kind: dict[str, Counter[float]] = {}
    for norm in norms:
        if norm.eps is not None:
            by_kind.setdefault(norm.norm, Counter())[norm.eps] += 1
    for kind, counts in by_kind.items():
        if len(counts) < 2:
            continue
        common, n = counts.most_common(1)[0]
        for norm in norms:
            if norm.norm == kind and norm.eps is not None and norm.eps != common:
                notes.append(
                    f"FINDING {shorten(norm.name, 120)}: eps {norm.eps!r} unlike its {n} "
                    f"{kind} sibling(s) with eps {common!r}"
                )
    return notes
