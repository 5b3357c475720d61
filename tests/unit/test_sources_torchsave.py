"""Unit tests of rmsnorm_eps.sources.torchsave: torch.save files read in place, never unpickled
beyond torch's weights-only allow-list."""

from __future__ import annotations

import collections
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rmsnorm_eps.errors import InputFileError, MissingExtraError
from rmsnorm_eps.sources import Kind, open_sources, sniff

torch = pytest.importorskip("torch")


def _save(path: Path, obj: object) -> Path:
    torch.save(obj, path)
    return path


def _values(src: Any, per: int = 5) -> np.ndarray:
    return np.concatenate([c.copy() for _, c in src.iter_elements(per)])


def _rand(*shape: int, dtype: Any = None) -> Any:
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, generator=g, dtype=dtype or torch.float32)


def test_nested_dict_names_and_values(tmp_path: Path) -> None:
    a, b, c = _rand(3, 4), _rand(5, dtype=torch.float64), _rand(2, 2).half()
    path = _save(tmp_path / "d.pt", {"model": {"norm": a, "layers": [b, (c,)]}})
    assert sniff(path) is Kind.TORCH_ZIP
    opened = open_sources(path)
    assert opened.members_total == 3 and opened.unreadable == []
    got = {s.name: s for s in opened.sources}
    assert list(got) == ["model.norm", "model.layers.0", "model.layers.1.0"]
    for name, t in (("model.norm", a), ("model.layers.0", b), ("model.layers.1.0", c)):
        src = got[name]
        assert src.shape == tuple(t.shape) and src.dtype_name == str(t.dtype)[6:]
        np.testing.assert_array_equal(_values(src, 3), t.numpy().ravel())
    par = [v.copy() for _, v in got["model.norm"].iter_mapped(5, lambda s, v: v.copy(), threads=2)]
    np.testing.assert_array_equal(np.concatenate(par), a.numpy().ravel())


def test_single_tensor_list_and_state_dict(tmp_path: Path) -> None:
    t = _rand(4, 3)
    (src,) = open_sources(_save(tmp_path / "one.pt", t)).sources
    assert src.key is None and src.name == "one"
    opened = open_sources(_save(tmp_path / "list.pth", [t, t * 2]))
    assert [s.name for s in opened.sources] == ["0", "1"]
    np.testing.assert_array_equal(_values(opened.sources[1]), (t * 2).numpy().ravel())
    lin = torch.nn.Linear(3, 2)
    sd = lin.state_dict()
    assert isinstance(sd, collections.OrderedDict)
    opened = open_sources(_save(tmp_path / "sd.pt", sd))
    assert [s.name for s in opened.sources] == ["weight", "bias"]
    params = {"w": torch.nn.Parameter(t)}
    (src,) = open_sources(_save(tmp_path / "p.pt", params)).sources
    np.testing.assert_array_equal(_values(src), t.numpy().ravel())


def test_views_share_storage_and_fortran_order(tmp_path: Path) -> None:
    x = _rand(6, 4)
    path = _save(tmp_path / "v.pt", {"x": x, "tail": x[2:], "t": x.t(), "col": x[:, 1]})
    with pytest.raises(InputFileError, match=r"\[col\]: a non-contiguous tensor view"):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    got = {s.name: s for s in opened.sources}
    assert [u.name for u in opened.unreadable] == ["col"] and opened.members_total == 4
    np.testing.assert_array_equal(_values(got["tail"]), x[2:].numpy().ravel())
    assert got["t"].order == "F" and got["t"].shape == (4, 6)
    np.testing.assert_array_equal(_values(got["t"]), x.t().numpy().ravel(order="F"))


def test_bfloat16_and_int16_views(tmp_path: Path) -> None:
    b = _rand(3, 8).to(torch.bfloat16)
    bits = b.view(torch.int16).numpy().view(np.uint16).ravel()
    (src,) = open_sources(_save(tmp_path / "bf.pt", {"q": b})).sources
    assert src.dtype_name == "bfloat16"
    np.testing.assert_array_equal(_values(src), bits)
    path = _save(tmp_path / "i16.pt", {"q": b.view(torch.int16)})
    with pytest.raises(InputFileError, match=r"int16.*pass --dtype bfloat16"):
        open_sources(path)
    (src,) = open_sources(path, "bfloat16").sources
    assert src.dtype_name == "bfloat16"
    np.testing.assert_array_equal(_values(src), bits)


def test_non_tensor_leaves_and_duplicates_are_named(tmp_path: Path) -> None:
    t = _rand(2)
    path = _save(tmp_path / "m.pt", {"epoch": 3, "a.b": t, "a": {"b": t}, "s": "x", "n": None})
    with pytest.raises(InputFileError, match=r"\[epoch\]: not a tensor \(int\)"):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["a.b"]
    names = [u.name for u in opened.unreadable]
    assert names == ["epoch", "a.b", "s", "n"]
    assert "duplicate name" in opened.unreadable[1].problem
    assert opened.members_total == 5


def test_integer_tensor_and_companion(tmp_path: Path) -> None:
    q = _rand(2, 3).abs()
    pos = torch.tensor([[0, 1, 2], [0, 1, 2]])
    path = _save(tmp_path / "c.pt", {"q": q, "q::position": pos, "ids": pos})
    with pytest.raises(InputFileError, match=r"\[ids\]: unsupported dtype int64"):
        open_sources(path)
    opened = open_sources(path, lenient=True)
    (src,) = opened.sources
    comp = src.companion("position")
    assert comp is not None and src.members == 2 and opened.members_total == 3
    np.testing.assert_array_equal(_values(comp), pos.numpy().ravel())


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def test_pickle_payload_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    path = _save(tmp_path / "evil.pt", {"q": _rand(2), "x": _Payload(str(marker))})
    with pytest.raises(InputFileError, match=r"not a readable torch.save file") as err:
        open_sources(path, lenient=True)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    assert not marker.exists()
    torch.load(path, weights_only=False)  # control: the payload is real
    assert marker.exists()


def test_missing_torch_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _save(tmp_path / "d.pt", {"q": _rand(2)})
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=r"torch.save files need.* 'torch' package"):
        open_sources(path)


def test_pickle_over_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmsnorm_eps.sources.torchsave as mod

    monkeypatch.setattr(mod, "PICKLE_MAX", 16)
    path = _save(tmp_path / "d.pt", {"q": _rand(2)})
    with pytest.raises(InputFileError, match=r"data.pkl of \d+ bytes is over"):
        open_sources(path)


def _repack(src: Path, dest: Path, method: int) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info), compress_type=method)
    return dest


def test_compressed_or_truncated_records_are_refused(tmp_path: Path) -> None:
    src = _save(tmp_path / "d.pt", {"q": _rand(64)})
    packed = _repack(src, tmp_path / "deflated.pt", zipfile.ZIP_DEFLATED)
    with pytest.raises(InputFileError, match=r"d.pt|deflated.pt"):
        open_sources(packed)
    raw = src.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputFileError, match=r"cut.pt"):
        open_sources(cut)
    assert os.path.getsize(cut) < len(raw)


def test_containers_without_tensors_and_shared_containers(tmp_path: Path) -> None:
    t = _rand(3)
    shared = [t]
    level: list[object] = [t]
    for _ in range(40):  # 2**40 paths if every reference were walked
        level = [level, level]
    obj = {"opt": {"step": 3, "lr": [1e-3] * 1000}, "a": shared, "b": shared, "deep": level}
    path = _save(tmp_path / "s.pt", obj)
    opened = open_sources(path, lenient=True)
    assert [s.name for s in opened.sources] == ["a.0", "deep.0.0" + ".0" * 39]
    names = [u.name for u in opened.unreadable]
    assert names[:2] == ["opt", "b"]
    assert sorted(names[2:]) == sorted(["deep.1", *("deep.0" + ".0" * k + ".1" for k in range(39))])
    assert "not a tensor (dict)" in opened.unreadable[0].problem
    assert "a second reference to a container" in opened.unreadable[1].problem
    assert opened.members_total == len(opened.sources) + len(opened.unreadable)


def test_torch_without_record_offsets_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rmsnorm_eps.sources.torchsave as mod

    monkeypatch.setattr(mod, "_record_offset", lambda storage: None)
    path = _save(tmp_path / "d.pt", {"q": _rand(2)})
    with pytest.raises(InputFileError, match=r"\[q\]: this torch \(.*\) does not report where"):
        open_sources(path)


def _rezip(src: Path, dest: Path, extra: list[tuple[str, bytes]], change: Any = None) -> Path:
    """``src``'s records (``change(name, data)`` applied) and ``extra`` members, stored."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info.filename, change(info.filename, data) if change else data)
        for name, data in extra:
            zout.writestr(name, data)
    return dest


def test_members_the_pickle_does_not_reference_are_refused(tmp_path: Path) -> None:
    """An extra .npy member (a valid .npz too: numpy.load sees it) and an orphan storage
    record are refused, or with lenient listed: never silently ignored."""
    import io
    import warnings

    base = _save(tmp_path / "archive.pt", {"q": _rand(3)})
    npy = io.BytesIO()
    np.save(npy, np.array([1e-12], np.float32))
    poly = _rezip(base, tmp_path / "poly.pt", [("archive/hidden.npy", npy.getvalue())])
    assert "archive/hidden" in np.load(poly).files
    with pytest.raises(InputFileError, match=r"\[archive/hidden.npy\]: a zip member that is not"):
        open_sources(poly)
    opened = open_sources(poly, lenient=True)
    assert [u.name for u in opened.unreadable] == ["archive/hidden.npy"]
    assert opened.members_total == 2 and [s.name for s in opened.sources] == ["q"]
    orphan = _rezip(base, tmp_path / "orphan.pt", [("archive/data/9", b"\0" * 4)])
    with pytest.raises(InputFileError, match=r"\[archive/data/9\]: a storage record no tensor"):
        open_sources(orphan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile: "Duplicate name"
        dup = _rezip(base, tmp_path / "dup.pt", [("archive/data.pkl", b"N.")])
    with pytest.raises(InputFileError, match=r"two zip entries named 'archive/data\.pkl'"):
        open_sources(dup, lenient=True)


def test_big_endian_file_is_refused_with_one_line(tmp_path: Path) -> None:
    """torch's meta loader segfaults on byteorder "big": refused before torch reads it."""
    base = _save(tmp_path / "archive.pt", {"q": _rand(3)})
    big = _rezip(
        base,
        tmp_path / "big.pt",
        [],
        lambda name, data: b"big" if name.endswith("/byteorder") else data,
    )
    with pytest.raises(InputFileError, match="written on a big-endian machine"):
        open_sources(big)


def test_a_storage_is_read_once_however_often_referenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmsnorm_eps.sources import torchsave

    t = _rand(64)
    obj = {f"t{i}": t for i in range(200)}
    obj["view"] = t.reshape(8, 8).t()
    path = _save(tmp_path / "alias.pt", obj)
    opened = open_sources(path)
    assert len(opened.sources) == 201
    reads: list[str] = []
    real_open = open

    def counting_open(file: Any, *args: Any, **kw: Any) -> Any:
        reads.append(str(file))
        return real_open(file, *args, **kw)

    monkeypatch.setattr(torchsave, "open", counting_open, raising=False)
    for src in opened.sources[:200]:
        got = np.concatenate([v.copy() for _, v in src.iter_mapped(7, lambda s, v: v, 2)])
        np.testing.assert_array_equal(got, t.numpy())
    np.testing.assert_array_equal(_values(opened.sources[200]), t.numpy())
    assert reads == [str(path)]  # one read of the storage, for 201 tensors
