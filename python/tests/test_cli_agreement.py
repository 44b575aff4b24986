"""The package and the xentlab command agree bit for bit on the same files, and bad input gets
the command's messages (the text after "xentlab: invalid input: " / "bad file: ")."""

import re
import h5py
import pytest

import xentlab

from kernels import ce_bf16_sumexp, ce_fp32


def _datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def _cli_message(result):
    line = result.stderr.strip().splitlines()[-1]
    for prefix in ("xentlab: invalid input: ", "xentlab: bad file: "):
        if line.startswith(prefix):
            return line[len(prefix):]
    raise AssertionError(f"no message of the command in {result.stderr!r}")


@pytest.fixture(scope="module")
def goldens(cli, tmp_path_factory):
    """The same golden file written by the command and by the package."""
    d = tmp_path_factory.mktemp("agree")
    args = ["--dataset", "calibrated", "-N", "24", "-V", "3000", "-D", "32", "--vocab-rows", "100"]
    r = cli("golden", *args, "--out", d / "cli.h5")
    assert r.returncode == 0, r.stderr
    p = xentlab.problem("calibrated", N=24, V=3000, D=32)
    xentlab.write_golden(d / "py.h5", p, vocab_rows=100)
    return d / "cli.h5", d / "py.h5"


def test_golden_files_are_equal_bit_for_bit(goldens):
    a, b = (_datasets(p) for p in goldens)
    assert sorted(a) == sorted(b) and "reference/dW_bound" in a
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes(), name


def test_reference_on_the_golden_problem_equals_the_commands(goldens):
    g = xentlab.read_golden(goldens[0])
    r = xentlab.reference(g.problem, g.spec, vocab_rows=g.vocab_rows)
    for name in ("loss", "loss_bound", "lse", "lse_bound", "dH", "dH_bound", "dW", "dW_bound", "db", "db_bound"):
        assert getattr(r, name).tobytes() == g.reference[name].tobytes(), name
    assert r.reduced_loss == g.reduced_loss and r.reduced_loss_bound == g.reduced_loss_bound


@pytest.mark.parametrize("kernel,policy,passed", [(ce_fp32, "fp32", True), (ce_bf16_sumexp, "fp32", False),
                                                  (ce_fp32, "bf16/fp32/fp32/bf16", True)])
def test_verify_report_and_junit_equal_the_commands(cli, tmp_path, cache_dir, kernel, policy, passed):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    p = g.problem
    loss, dH, dW = kernel(p.H, p.W, p.targets)
    cand = tmp_path / "cand.h5"
    xentlab.write_candidate(cand, {"reduced_loss": loss, "dH": dH, "dW": dW}, implementation="numpy float32")
    r = cli("verify", g.path, cand, "--policy", policy, "--junit", tmp_path / "cli.xml")
    rep = xentlab.verify(g.path, cand, policy=policy, junit=tmp_path / "py.xml")
    assert rep.passed is passed and r.returncode == (0 if passed else 1)
    # The report names the differential check's baseline with its wall time: the one field that
    # may differ between two runs of the same verification.
    timed = re.compile(r"rows, \d+\.\d+ s")
    assert timed.sub("rows, T s", r.stdout) == timed.sub("rows, T s", rep.text + f"junit      {tmp_path / 'cli.xml'}\n")
    assert (tmp_path / "cli.xml").read_bytes() == (tmp_path / "py.xml").read_bytes()


def test_explicit_tolerance_and_require_as_the_command(cli, tmp_path, cache_dir):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    p = g.problem
    loss, dH, dW = ce_fp32(p.H, p.W, p.targets)
    cand = tmp_path / "cand.h5"
    xentlab.write_candidate(cand, {"reduced_loss": loss, "dH": dH})
    r = cli("verify", g.path, cand, "--rtol", "1e-3", "--require", "dW")
    rep = xentlab.verify(g.path, cand, rtol=1e-3, require=["dW"])
    assert r.stdout == rep.text and not rep.passed and rep.output("dW").status == "failed"


@pytest.mark.parametrize("args,call", [
    (["--label-smoothing", "-1"], lambda: xentlab.LossSpec(label_smoothing=-1)),
    (["--z-loss", "nan"], lambda: xentlab.LossSpec(z_loss=float("nan"))),
    (["--reduction", "avg"], lambda: xentlab.LossSpec(reduction="avg")),
    (["--dataset", "no-such-thing"], lambda: xentlab.problem("no-such-thing")),
    (["--dataset", "/nonexistent/p.safetensors"], lambda: xentlab.problem("/nonexistent/p.safetensors")),
    (["--dataset", "calibrated", "--param", "nonsense=1"], lambda: xentlab.problem("calibrated", params={"nonsense": 1})),
    (["--reference", "fastest"], lambda: xentlab.reference(xentlab.problem("calibrated", N=2, V=10, D=2), tier="fastest")),
])
def test_bad_input_messages_are_the_commands(cli, tmp_path, args, call):
    r = cli("golden", "--out", tmp_path / "g.h5", *args)
    assert r.returncode == 2
    with pytest.raises(ValueError) as e:
        call()
    # the library's message; the command may name its option in front ("--reference: …")
    assert _cli_message(r) in (str(e.value), f"{args[0]}: {e.value}")


def test_existing_golden_file_is_refused_without_force(cli, tmp_path):
    (tmp_path / "g.h5").write_bytes(b"keep")
    r = cli("golden", "--dataset", "stories260k", "--out", tmp_path / "g.h5")
    with pytest.raises(ValueError) as e:
        xentlab.write_golden(tmp_path / "g.h5", xentlab.problem("stories260k"))
    assert str(e.value) == _cli_message(r) and (tmp_path / "g.h5").read_bytes() == b"keep"


def test_a_file_that_is_no_golden_file_is_a_format_error(cli, tmp_path):
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.attrs["format"] = "something-else"
    r = cli("verify", tmp_path / "x.h5", tmp_path / "x.h5")
    with pytest.raises(xentlab.FormatError) as e:
        xentlab.read_golden(tmp_path / "x.h5")
    assert str(e.value) == _cli_message(r)


@pytest.mark.parametrize("kwargs,message", [
    ({"k": -1}, "k must be a finite number > 0, got -1"),
    ({"k": float("nan")}, "k must be a finite number > 0, got nan"),
    ({"atol": -1}, "atol must be a finite number ≥ 0, got -1"),
    ({"rtol": float("inf")}, "rtol must be a finite number ≥ 0, got inf"),
    ({"atol": 1e-3, "k": 2}, "k does not apply with atol/rtol"),
    ({"require": ["dX"]}, "dX"),
    ({"policy": "bf17"}, "bf17"),
])
def test_verify_options_are_checked(cache_dir, tmp_path, kwargs, message):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        xentlab.verify(g, tmp_path / "missing.h5", **kwargs)


def test_verify_messages_match_the_commands_for_k(cli, cache_dir, tmp_path):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    r = cli("verify", g.path, g.path, "--k", "-3")
    with pytest.raises(ValueError) as e:
        xentlab.verify(g, g.path, k=-3)
    assert _cli_message(r) == "--" + str(e.value)  # the command names its option --k, Python k


@pytest.mark.parametrize("check", ["bound", "differential"])
def test_verify_check_option_as_the_command(cli, tmp_path, cache_dir, check):
    """check= selects the same checks as the command's --check: the reports are the same text, and
    each output carries the differential check's numbers (or says it did not run)."""
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    p = g.problem
    loss, dH, dW = ce_fp32(p.H, p.W, p.targets)
    cand = tmp_path / "cand.h5"
    xentlab.write_candidate(cand, {"reduced_loss": loss, "dH": dH, "dW": dW})
    r = cli("verify", g.path, cand, "--policy", "fp32", "--check", check)
    rep = xentlab.verify(g.path, cand, policy="fp32", check=check)
    timed = re.compile(r"rows, \d+\.\d+ s")
    assert timed.sub("rows, T s", r.stdout) == timed.sub("rows, T s", rep.text)
    dH_out = next(o for o in rep.outputs if o.name == "dH")
    if check == "bound":
        assert dH_out.differential["status"] == "not run"
    else:
        assert dH_out.bound_status == "not run"
        assert dH_out.differential["status"] in ("passed", "incorrect")
        assert dH_out.differential["limit_normwise"] >= dH_out.differential["baseline_normwise"]


def test_verify_bad_check_options_raise(cli, tmp_path, cache_dir):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    p = g.problem
    loss, dH, dW = ce_fp32(p.H, p.W, p.targets)
    cand = tmp_path / "cand.h5"
    xentlab.write_candidate(cand, {"reduced_loss": loss})
    r = cli("verify", g.path, cand, "--check", "sometimes")
    with pytest.raises(ValueError) as e:
        xentlab.verify(g.path, cand, check="sometimes")
    assert _cli_message(r).split(": ", 1)[-1] in str(e.value)
    with pytest.raises(ValueError, match="need a recipe to emulate"):
        xentlab.verify(g.path, cand, rtol=1e-3, check="differential")
    with pytest.raises(ValueError, match="baseline_rows"):
        xentlab.verify(g.path, cand, baseline_rows=-1)
    # A JUnit report is never written over the files it reports on, even with force.
    before = cand.read_bytes()
    with pytest.raises(ValueError, match="is the candidate file itself"):
        xentlab.verify(g.path, cand, junit=cand, force=True)
    assert cand.read_bytes() == before
