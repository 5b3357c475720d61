"""Text made in pieces, handed on in chunks of whole lines: how every report and summary file
is written while it is made (bounded memory for any number of layers).

A chunk ends at a line end, so the line-based escapes of :mod:`rmsnorm_eps.escape`
(``no_ci_command``, ``json_text``) apply chunk by chunk with the same result as on the whole
text.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["CHUNK_CHARS", "line_chunks"]

#: Characters gathered before a chunk of whole lines is handed to the writer.
CHUNK_CHARS = 1 << 16


def line_chunks(pieces: Iterable[str], chars: int | None = None) -> Iterator[str]:
    """``pieces`` (text in order) regrouped as chunks of whole lines of about ``chars``
    (default :data:`CHUNK_CHARS`) characters: each chunk but the last ends with a newline, and
    the last is what follows the last newline (not yielded when empty). Joined, the chunks are
    exactly ``"".join(pieces)``."""
    limit = CHUNK_CHARS if chars is None else chars
    buf: list[str] = []
    size = 0
    for piece in pieces:
        buf.append(piece)
        size += len(piece)
        if size >= limit:
            text = "".join(buf)
            cut = text.rfind("\n") + 1
            if cut:
                yield text[:cut]
                buf, size = [text[cut:]], len(text) - cut
            else:
                buf, size = [text], len(text)
    rest = "".join(buf)
    if rest:
        yield rest
