"""Files in data.root are read without running anything in them (issue 32, item 3): a crafted
CIFAR batch, an .npz cache holding pickled objects, a tar member pointing out of its folder."""

from __future__ import annotations

import io
import os
import pickle
import struct
import tarfile

import numpy as np
import pytest

from fedbench.core.errors import DataUnavailableError
from fedbench.data.untrusted import extract, load_cifar_batch
from tests.faultkit import SMALL, error_lines, fedbench


class Marker:
    """Unpickling it creates the file `path` (what a crafted batch could do with any code)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mknod, (self.path,))


def python2_cifar_batch(data: np.ndarray, labels: list[int]) -> bytes:
    """A batch byte for byte as Python 2's cPickle wrote the originals (protocol 2, str keys,
    numpy.core.multiarray._reconstruct), assembled from opcodes."""
    def s(b: bytes) -> bytes:  # SHORT_BINSTRING or BINSTRING
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b

    def i(n: int) -> bytes:  # BININT1 / BININT
        return b"K" + bytes([n]) if 0 <= n < 256 else b"J" + struct.pack("<i", n)

    dtype = (b"cnumpy\ndtype\n" + s(b"u1") + i(0) + i(1) + b"\x87R"  # dtype('u1', 0, 1)
             + b"(" + i(3) + s(b"|") + b"NNN" + i(-1) + i(-1) + i(0) + b"tb")  # its state, BUILD
    array = (b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + i(0) + b"\x85" + s(b"b") + b"\x87R"
             + b"(" + i(1) + i(data.shape[0]) + i(data.shape[1]) + b"\x86" + dtype + b"\x89" + s(data.tobytes()) + b"tb")
    items = [(b"batch_label", s(b"testing batch 1 of 1")), (b"labels", b"](" + b"".join(i(v) for v in labels) + b"e"),
             (b"data", array), (b"filenames", b"](" + b"".join(s(b"x.png") for _ in labels) + b"e")]
    return b"\x80\x02}(" + b"".join(s(k) + v for k, v in items) + b"u."


def cifar_folder(root, crafted=None):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        (folder / name).write_bytes(python2_cifar_batch(data, [1, 2, 3, 4]))
    if crafted is not None:
        (folder / "data_batch_1").write_bytes(crafted)
    return folder


def test_an_original_format_batch_loads(tmp_path):
    data = np.arange(2 * 3072, dtype=np.int64).reshape(2, 3072).astype(np.uint8)
    path = tmp_path / "b"
    path.write_bytes(python2_cifar_batch(data, [7, 9]))
    assert pickle.loads(path.read_bytes(), encoding="bytes")[b"labels"] == [7, 9]  # the assembly is a real pickle
    batch = load_cifar_batch(path)
    assert batch[b"labels"] == [7, 9] and batch[b"filenames"] == [b"x.png"] * 2
    assert batch[b"data"].dtype == np.uint8 and np.array_equal(batch[b"data"], data)
    for protocol in (2, 4, 5):  # re-pickled by Python 3 / numpy 2 (bytes via _codecs.encode, numpy._core)
        path.write_bytes(pickle.dumps({b"data": data, b"labels": np.int64([7, 9]).tolist(), b"x": np.int64(3)}, protocol))
        assert np.array_equal(load_cifar_batch(path)[b"data"], data)


@pytest.mark.parametrize("where", ["top", "inside"])
def test_a_crafted_batch_is_refused_unrun(tmp_path, where):
    marker = tmp_path / "marker"
    payload = Marker(marker) if where == "top" else {b"data": np.zeros((1, 3072), np.uint8), b"labels": [Marker(marker)]}
    (tmp_path / "b").write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(DataUnavailableError, match=r"is not a CIFAR python batch: it references (posix|nt|builtins)\."):
        load_cifar_batch(tmp_path / "b")
    assert not marker.exists()


def test_codecs_other_than_latin1_are_refused(tmp_path):
    (tmp_path / "b").write_bytes(b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x05\x00\x00\x00rot13\x86R.")
    with pytest.raises(DataUnavailableError, match="rot13"):
        load_cifar_batch(tmp_path / "b")


def test_the_cli_refuses_a_crafted_cifar_batch_in_one_line(tmp_path):
    marker = tmp_path / "marker"
    cifar_folder(tmp_path / "data", crafted=pickle.dumps(Marker(marker), protocol=2))
    out = fedbench("run", "dataset=cifar10", "model=cnn", f"data.root={tmp_path / 'data'}", *SMALL, "rounds=1",
                   f"tracking.uri=sqlite:///{tmp_path}/m.db", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = error_lines(out.stderr)
    assert len(lines) == 1 and "data_batch_1 is not a CIFAR python batch" in lines[0] and "Traceback" not in out.stderr
    assert not marker.exists()


def test_an_npz_cache_with_pickled_objects_is_refused_in_one_line(tmp_path):
    from fedbench.data.vision import tinyimagenet

    folder = tmp_path / "tinyimagenet"
    folder.mkdir()
    (folder / "wnids.txt").write_text("n0\n")
    marker = tmp_path / "marker"
    objects = np.empty(1, dtype=object)
    objects[0] = Marker(marker)
    np.savez(folder / "fedbench_cache.npz", x_train=objects, y_train=objects, x_test=objects, y_test=objects)
    with pytest.raises(DataUnavailableError, match="fedbench_cache.npz cannot be read .* delete it") as err:
        tinyimagenet(root=str(tmp_path))
    assert "\n" not in str(err.value) and not marker.exists()


def test_a_tar_member_outside_the_folder_is_refused(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    (tmp_path / "a.tar.gz").write_bytes(buf.getvalue())
    (tmp_path / "into").mkdir()
    with pytest.raises(DataUnavailableError, match="cannot unpack .*a.tar.gz"):
        extract(tmp_path / "a.tar.gz", tmp_path / "into")
    assert not (tmp_path / "escaped").exists()
