"""The audit from Python: the command's runs, statistics and summary."""

import h5py
import numpy as np
import pytest

import xentlab

RECIPES = ["fp32/fp32/fp32/fp32", "bf16/fp32/fp32/bf16", "bf16/bf16/bf16/bf16"]


def _attrs_and_data(path):
    out = {}
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            for k, v in obj.attrs.items():
                if k not in ("created", "command", "seconds", "xentlab_version", "date_utc"):
                    out[f"{name}@{k}"] = np.asarray(v).tobytes()
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()].tobytes()

        f["runs"].visititems(visit)
    return out


def test_audit_agrees_with_the_command(cli, tmp_path):
    r = cli(
        "audit",
        "--problems",
        "stories260k",
        "--strategies",
        "naive,chunked",
        "--recipes",
        ",".join(RECIPES),
        "--backend",
        "cpu",
        "--quiet",
        "--no-plots",
        "--out",
        tmp_path / "cli.h5",
    )
    assert r.returncode in (0, 1), r.stderr
    res = xentlab.audit(
        ["stories260k"], strategies=["naive", "chunked"], recipes=RECIPES, out=tmp_path / "py.h5"
    )
    assert len(res.runs) == 2 * len(
        RECIPES
    )  # strategies × recipes (a recipe names its input dtype)
    assert r.stdout.startswith(res.summary)
    a, b = _attrs_and_data(tmp_path / "cli.h5"), _attrs_and_data(tmp_path / "py.h5")
    assert sorted(a) == sorted(b)
    differ = [k for k in a if a[k] != b[k] and not k.endswith("@seconds")]
    assert differ == [], differ[:5]
    with h5py.File(
        tmp_path / "py.h5", "r"
    ) as f:  # one line finds a run: by_key/PROBLEM/RECIPE/STRATEGY
        assert f["by_key/stories260k/bf16/fp32/fp32/bf16/chunked"].attrs["strategy"] == "chunked"
        assert (
            f["by_key/stories260k/bf16/fp32/fp32/bf16/chunked"].attrs["recipe"]
            == "bf16/fp32/fp32/bf16"
        )
    run = res.find("stories260k", "fp32/fp32/fp32/fp32", "naive")
    assert run["disposition"] == "passed" and run["outputs"]["loss"]["normwise_rel_err"] < 1e-5
    bf16_accum = res.find("stories260k", "bf16/bf16/bf16/bf16", "naive")
    assert (
        bf16_accum["outputs"]["loss"]["normwise_rel_err"]
        > run["outputs"]["loss"]["normwise_rel_err"]
    )


def test_audit_refusals():
    with pytest.raises(ValueError, match="unknown problem 'nope'"):
        xentlab.audit(["nope"])
    with pytest.raises(ValueError):
        xentlab.audit(["stories260k"], strategies=["no-such-strategy"])
    with pytest.raises(ValueError):
        xentlab.audit(["stories260k"], recipes=["bf16/bf17/fp32/bf16"])


def test_audit_refuses_bad_counts_strings_and_an_existing_file_before_the_work(tmp_path):
    with pytest.raises(ValueError, match="rows must be an integer >= 0"):
        xentlab.audit(problems=["stories260k"], rows=-1)
    with pytest.raises(ValueError, match="vocab_rows must be an integer >= 0"):
        xentlab.audit(problems=["stories260k"], vocab_rows=-5)
    with pytest.raises(TypeError, match="expected a list of names"):
        xentlab.audit(problems=["stories260k"], strategies="naive")
    existing = tmp_path / "a.h5"
    existing.write_bytes(b"keep me")
    with pytest.raises(ValueError, match="exists"):
        xentlab.audit(problems=["stories260k"], out=existing)
    assert existing.read_bytes() == b"keep me"


def test_audit_vocab_splits_as_the_command(cli, tmp_path):
    """vocab_splits= is the command's --vocab-splits: the same runs (the same results file), the
    splits recorded on each vocab_chunked run (and in its declared arithmetic's JSON), none on
    the others, and the same refusals."""
    r = cli(
        "audit",
        "--problems",
        "stories260k",
        "--strategies",
        "vocab_chunked",
        "--recipes",
        "fp32/fp32/fp32/fp32",
        "--vocab-splits",
        "5",
        "--backend",
        "cpu",
        "--quiet",
        "--out",
        tmp_path / "cli.h5",
    )
    assert r.returncode == 0, r.stderr
    res = xentlab.audit(
        ["stories260k"],
        strategies=["vocab_chunked"],
        recipes=["fp32/fp32/fp32/fp32"],
        vocab_splits=5,
        out=tmp_path / "py.h5",
    )
    run = res.find("stories260k", "fp32/fp32/fp32/fp32", "vocab_chunked")
    assert (run["vocab_splits"], run["disposition"]) == (5, "passed")
    a, b = _attrs_and_data(tmp_path / "cli.h5"), _attrs_and_data(tmp_path / "py.h5")
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k] != b[k] and not k.endswith("@seconds")] == []
    with h5py.File(tmp_path / "py.h5", "r") as f:
        g = f["by_key/stories260k/fp32/fp32/fp32/fp32/vocab_chunked"]
        assert g.attrs["vocab_splits"] == 5
    plain = xentlab.audit(["stories260k"], strategies=["chunked"], recipes=["fp32/fp32/fp32/fp32"])
    assert plain.runs[0]["vocab_splits"] == 0
    with pytest.raises(
        ValueError, match=r"vocabulary splits \(513\) exceed the vocabulary \(512 rows\)"
    ):
        xentlab.audit(["stories260k"], strategies=["vocab_chunked"], vocab_splits=513)
    with pytest.raises(ValueError, match="vocab_splits must be >= 0"):
        xentlab.audit(["stories260k"], strategies=["vocab_chunked"], vocab_splits=-1)
    with pytest.raises(TypeError, match="vocab_splits: expected an integer"):
        xentlab.audit(["stories260k"], strategies=["vocab_chunked"], vocab_splits="3")
    with pytest.raises(ValueError, match="vocab_splits=2 applies to the strategies that split"):
        xentlab.audit(["stories260k"], strategies=["chunked"], vocab_splits=2)
    with pytest.raises(ValueError, match="vocab_splits must be >= 0"):
        xentlab.audit(["stories260k"], strategies=["chunked"], vocab_splits=-5)
    # 0 is the default, as the command's --vocab-splits 0: accepted with any strategies.
    zero = xentlab.audit(
        ["stories260k"], strategies=["chunked"], recipes=["fp32/fp32/fp32/fp32"], vocab_splits=0
    )
    assert zero.runs[0]["vocab_splits"] == 0


def test_audit_ranks_and_local_part_as_the_command(cli, tmp_path):
    """ranks= and local_strategy= are the command's --ranks and --local-strategy: the same runs
    (the same results file), recorded on each vocab_parallel run, and the same refusals."""
    opts = ["--problems", "stories260k", "--strategies", "vocab_parallel"]
    r = cli(
        "audit",
        *opts,
        "--recipes",
        "fp32/fp32/fp32/fp32",
        "--ranks",
        "3",
        "--local-strategy",
        "fused",
        "--backend",
        "cpu",
        "--quiet",
        "--out",
        tmp_path / "cli.h5",
    )
    assert r.returncode == 0, r.stderr
    res = xentlab.audit(
        ["stories260k"],
        strategies=["vocab_parallel"],
        recipes=["fp32/fp32/fp32/fp32"],
        ranks=3,
        local_strategy="fused",
        out=tmp_path / "py.h5",
    )
    run = res.find("stories260k", "fp32/fp32/fp32/fp32", "vocab_parallel")
    assert (run["ranks"], run["local_strategy"], run["disposition"]) == (3, "fused", "passed")
    a, b = _attrs_and_data(tmp_path / "cli.h5"), _attrs_and_data(tmp_path / "py.h5")
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k] != b[k] and not k.endswith("@seconds")] == []
    with h5py.File(tmp_path / "py.h5", "r") as f:
        g = f["by_key/stories260k/fp32/fp32/fp32/fp32/vocab_parallel"]
        assert (g.attrs["ranks"], g.attrs["local_strategy"]) == (3, "fused")
    # Runs of a strategy that does not shard record neither.
    plain = xentlab.audit(["stories260k"], strategies=["chunked"], recipes=["fp32/fp32/fp32/fp32"])
    assert (plain.runs[0]["ranks"], plain.runs[0]["local_strategy"]) == (0, None)
    with pytest.raises(ValueError, match=r"vocabulary-parallel ranks must be at least 1 \(got 0\)"):
        xentlab.audit(["stories260k"], strategies=["vocab_parallel"], ranks=0)
    with pytest.raises(ValueError, match=r"ranks \(513\) exceed the vocabulary \(512 rows\)"):
        xentlab.audit(["stories260k"], strategies=["vocab_parallel"], ranks=513)
    with pytest.raises(TypeError, match="ranks: expected an integer"):
        xentlab.audit(["stories260k"], strategies=["vocab_parallel"], ranks="3")
    with pytest.raises(ValueError, match="ranks=2 applies to the strategies that shard"):
        xentlab.audit(["stories260k"], strategies=["chunked"], ranks=2)
    with pytest.raises(ValueError, match="'liger' is not a local part"):
        xentlab.audit(["stories260k"], strategies=["vocab_parallel"], local_strategy="liger")
