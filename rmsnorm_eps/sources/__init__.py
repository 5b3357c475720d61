"""Format-neutral dump sources: every reader turns a file into :class:`ArraySource` objects.

Modules:

* :mod:`~rmsnorm_eps.sources.sniff`: :func:`sniff` ``(path) -> Kind``, the one place that reads
  magic bytes;
* :mod:`~rmsnorm_eps.sources.interface`: the :class:`ArraySource` protocol (name, dtype, shape,
  order, chunks of elements, companions; errors name file and key), :class:`Unreadable`,
  :class:`Opened` and :func:`open_sources`, which dispatches on the sniffed kind through the
  :data:`OPENERS` registry;
* :mod:`~rmsnorm_eps.sources.raw`: :class:`RawArraySource`, the streaming reader of any array
  stored as contiguous raw bytes (in a file or in a zip member), and the dtype checks;
* :mod:`~rmsnorm_eps.sources.ziparchive`: :class:`ZipArchive`, one open zip archive shared by its
  member sources (opened once; stored members read in place with positioned reads);
* the readers: :mod:`~rmsnorm_eps.sources.npy`, :mod:`~rmsnorm_eps.sources.npz`,
  :mod:`~rmsnorm_eps.sources.safetensors` (JSON header parsed strictly, tensors read in place),
  :mod:`~rmsnorm_eps.sources.torchsave` (``torch.save`` zip files: the pickle loaded by torch's
  weights-only unpickler on the meta device, tensors read in place) and
  :mod:`~rmsnorm_eps.sources.csv` (CSV/TSV columns, parsed strictly; ``column=`` selects one).

Any other file is refused with one line that lists the accepted formats and a conversion
recipe; ``dtype="bfloat16"`` reads int16/uint16/V2 arrays of every format as bfloat16 bits.

Adding an input format (e.g. safetensors, torch.save, CSV) touches one module plus its test:

1. ``rmsnorm_eps/sources/<format>.py`` with an opener
   ``open_<format>(path: Path, size: int, stored_as: str | None, lenient: bool) -> Opened``.
   It parses the format's header only, checks each array's dtype with
   :func:`~rmsnorm_eps.sources.raw.check_float_dtype` and that the declared bytes are present,
   and returns ``Opened(sources, unreadable, members_total)``: one source per array, and with
   ``lenient`` an :class:`Unreadable` per array that cannot be used (without ``lenient`` raise
   :class:`~rmsnorm_eps.errors.InputFileError` naming the file and key). Every entry of the
   file must end up in exactly one of the two lists.
   When the data are contiguous bytes at a known offset (safetensors: ``8 + header length +
   begin``; an uncompressed torch.save member), build :class:`RawArraySource` with
   ``data_offset`` (and ``archive``/``info``/``skip`` for a zip member): streaming, parallel
   reads and CRC checks come for free. Otherwise (CSV: rows of text) write a small class that
   satisfies :class:`ArraySource` (``iter_elements`` yielding bounded chunks; deriving from
   :class:`~rmsnorm_eps.sources.interface.SerialSource` gives ``iter_mapped`` over them).
2. One entry in :data:`~rmsnorm_eps.sources.interface.OPENERS`:
   ``Kind.SAFETENSORS: "rmsnorm_eps.sources.safetensors:open_safetensors"`` (the kind is
   already recognised by :func:`sniff`; a new kind is one more rule there). An opener that
   takes a selection (CSV's ``column=``) also joins
   :data:`~rmsnorm_eps.sources.interface.COLUMN_KINDS`.
3. ``tests/unit/test_sources_<format>.py``.

Nothing else changes: ``ratio``, ``compare``, ``probe`` and ``parity`` read through
:func:`open_sources` (``rmsnorm_eps.dumps`` keeps the older entry points).
"""

from rmsnorm_eps.sources.interface import (
    MAX_LAYERS,
    OPENERS,
    ArraySource,
    Opened,
    Opener,
    Unreadable,
    open_sources,
)
from rmsnorm_eps.sources.sniff import Kind, check_regular_file, sniff

__all__ = [
    "MAX_LAYERS",
    "OPENERS",
    "ArraySource",
    "Kind",
    "Opened",
    "Opener",
    "Unreadable",
    "check_regular_file",
    "open_sources",
    "sniff",
]
