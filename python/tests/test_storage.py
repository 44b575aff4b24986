"""Golden and candidate files as stored (docs/formats.md, "Storage, compression and digests"):
h5py's gzip/shuffle/fletcher32 candidates are judged like contiguous ones, lzf is refused by
name, every dataset's sha256 digest is checked by read_golden and check(), a golden file from
before digests is read with a warning, and write_golden(compress=...) round-trips smaller."""

import hashlib
import shutil

import h5py
import numpy as np
import pytest

import xentlab

from kernels import ce_fp32

OUTPUTS = ("loss", "lse", "dH", "dW", "db")


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    path = tmp_path_factory.mktemp("storage") / "g.h5"
    xentlab.write_golden(path, xentlab.problem("stories260k", N=16))
    return path


def _candidate(path, g, **storage):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "xentlab-candidate"
        f.attrs["format_version"] = 2
        for name in OUTPUTS:
            f.create_dataset(name, data=g.reference[name].astype(np.float32), **storage)


def _flip(path, dataset, byte=100):
    with h5py.File(path, "r") as f:
        at = f[dataset].id.get_offset()
    with open(path, "r+b") as f:
        f.seek(at + byte)
        b = f.read(1)[0]
        f.seek(at + byte)
        f.write(bytes([b ^ 0xFF]))


def test_a_gzip_shuffle_fletcher32_candidate_is_judged_like_a_contiguous_one(golden, tmp_path):
    g = xentlab.read_golden(golden)
    _candidate(tmp_path / "plain.h5", g)
    _candidate(tmp_path / "gz.h5", g, compression="gzip", shuffle=True, fletcher32=True)
    plain = xentlab.verify(golden, tmp_path / "plain.h5", policy="fp32")
    gz = xentlab.verify(golden, tmp_path / "gz.h5", policy="fp32")
    assert gz.passed, gz.text
    for name in OUTPUTS:
        assert gz.output(name).status == plain.output(name).status == "passed"
        assert gz.output(name).stats == plain.output(name).stats, name


def test_an_lzf_candidate_is_refused_naming_the_filter(golden, tmp_path):
    g = xentlab.read_golden(golden)
    _candidate(tmp_path / "lzf.h5", g, compression="lzf")
    with pytest.raises(xentlab.FormatError, match=r"lzf\.h5:/\w+: .*'lzf'.*filter not available"):
        xentlab.verify(golden, tmp_path / "lzf.h5", policy="fp32")


def test_the_digest_is_the_sha256_of_the_little_endian_elements(golden):
    with h5py.File(golden, "r") as f:
        assert f.attrs["checksums"] == "sha256"
        for name in ("problem/W", "problem/targets", "reference/dH", "covariates/p_target"):
            ds = f[name]
            data = ds[()].astype(ds.dtype.newbyteorder("<")).tobytes()
            assert hashlib.sha256(data).hexdigest() == ds.attrs["sha256"], name


@pytest.mark.parametrize("dataset", ["reference/dH", "reference/loss_bound", "problem/W"])
def test_bytes_flipped_in_a_golden_file_are_refused_naming_the_dataset(golden, tmp_path, dataset):
    bad = tmp_path / "bad.h5"
    shutil.copy(golden, bad)
    _flip(bad, dataset)
    message = rf"bad\.h5:/{dataset}: its data do not match its sha256 digest"
    with pytest.raises(xentlab.FormatError, match=message):
        xentlab.read_golden(bad)
    with pytest.raises(xentlab.FormatError, match=message):
        xentlab.check(ce_fp32, str(bad))


def test_a_golden_file_without_digests_is_read_with_a_warning(golden, tmp_path):
    old = tmp_path / "old.h5"
    shutil.copy(golden, old)
    with h5py.File(old, "r+") as f:
        del f.attrs["checksums"]
        del f.attrs["manifest"]  # an older file has neither
        f.visititems(lambda _, o: o.attrs.__delitem__("sha256") if "sha256" in o.attrs else None)
    with pytest.warns(UserWarning, match=r"old\.h5: no checksums: written by an older xentlab"):
        g = xentlab.read_golden(old)
    assert not g.checksums and xentlab.read_golden(golden).checksums
    assert np.array_equal(g.reference["dH"], xentlab.read_golden(golden).reference["dH"])


def test_a_golden_file_edited_with_h5py_is_refused_naming_the_change(golden, tmp_path):
    # A reference output deleted (the candidate would no longer be held to it) and an attribute
    # of the loss spec edited: the manifest stored with the file names each.
    gone, edited = tmp_path / "gone.h5", tmp_path / "edited.h5"
    shutil.copy(golden, gone)
    shutil.copy(golden, edited)
    with h5py.File(gone, "r+") as f:
        del f["reference/dW"]
    with h5py.File(edited, "r+") as f:
        f["spec"].attrs["label_smoothing"] = 0.1
    assert xentlab.read_golden(golden).manifest
    with pytest.raises(xentlab.FormatError, match=r"as written: dataset /reference/dW float64 \("):
        xentlab.read_golden(gone)
    with pytest.raises(xentlab.FormatError, match=r"now: attribute /spec@label_smoothing=0\.1"):
        xentlab.read_golden(edited)


def test_write_golden_compress_round_trips_and_stores_fewer_bytes(golden, tmp_path):
    p = xentlab.problem("stories260k", N=16)
    s = xentlab.write_golden(tmp_path / "gz.h5", p, compress="gzip:6")
    assert s["stored_bytes"] < s["raw_bytes"]
    a, b = xentlab.read_golden(golden), xentlab.read_golden(tmp_path / "gz.h5")
    for name in a.reference:
        assert a.reference[name].tobytes() == b.reference[name].tobytes(), name
    assert a.problem.W.tobytes() == b.problem.W.tobytes()
    with h5py.File(tmp_path / "gz.h5", "r") as f:
        assert f["reference/dH"].compression == "gzip" and f["reference/dH"].shuffle
    with pytest.raises(xentlab.InputError, match="--compress 'lzf'"):
        xentlab.write_golden(tmp_path / "x.h5", p, compress="lzf")
