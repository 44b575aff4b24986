"""The package and the xentlab command agree bit for bit on the same files, and bad input gets
the command's messages (the text after "xentlab: invalid input: " / "bad file: ")."""

import re

import h5py
import numpy as np
import pytest

import xentlab

from kernels import ce_bf16_sumexp, ce_fp32


def _datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


def _cli_message(result):
    line = result.stderr.strip().splitlines()[-1]
    for prefix in ("xentlab: invalid input: ", "xentlab: bad file: "):
        if line.startswith(prefix):
            return line[len(prefix) :]
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
    for name in (
        "loss",
        "loss_bound",
        "lse",
        "lse_bound",
        "dH",
        "dH_bound",
        "dW",
        "dW_bound",
        "db",
        "db_bound",
    ):
        assert getattr(r, name).tobytes() == g.reference[name].tobytes(), name
    assert r.reduced_loss == g.reduced_loss and r.reduced_loss_bound == g.reduced_loss_bound


# A recipe of bf16 inputs on the fp32 problem: the emulation cannot run it (it never re-rounds
# inputs), so the differential check cannot judge, and the verdict is inconclusive (exit 5).
@pytest.mark.parametrize(
    "kernel,policy,verdict",
    [
        (ce_fp32, "fp32", "passed"),
        (ce_bf16_sumexp, "fp32", "failed"),
        (ce_fp32, "bf16/fp32/fp32/bf16", "inconclusive"),
    ],
)
def test_verify_report_and_junit_equal_the_commands(
    cli, tmp_path, cache_dir, kernel, policy, verdict
):
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    p = g.problem
    loss, dH, dW = kernel(p.H, p.W, p.targets)
    cand = tmp_path / "cand.h5"
    xentlab.write_candidate(
        cand, {"reduced_loss": loss, "dH": dH, "dW": dW}, implementation="numpy float32"
    )
    r = cli("verify", g.path, cand, "--policy", policy, "--junit", tmp_path / "cli.xml")
    rep = xentlab.verify(g.path, cand, policy=policy, junit=tmp_path / "py.xml")
    assert rep.verdict == verdict and bool(rep) is (verdict == "passed")
    assert r.returncode == {"passed": 0, "failed": 1, "inconclusive": 5}[verdict]
    # The report names the differential check's baseline with its wall time: the one field that
    # may differ between two runs of the same verification.
    timed = re.compile(r"rows, \d+\.\d+ s")
    assert timed.sub("rows, T s", r.stdout) == timed.sub(
        "rows, T s", rep.text + f"junit      {tmp_path / 'cli.xml'}\n"
    )
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


@pytest.mark.parametrize(
    "args,call",
    [
        (["--label-smoothing", "-1"], lambda: xentlab.LossSpec(label_smoothing=-1)),
        (["--z-loss", "nan"], lambda: xentlab.LossSpec(z_loss=float("nan"))),
        (["--reduction", "avg"], lambda: xentlab.LossSpec(reduction="avg")),
        (["--dataset", "no-such-thing"], lambda: xentlab.problem("no-such-thing")),
        (
            ["--dataset", "/nonexistent/p.safetensors"],
            lambda: xentlab.problem("/nonexistent/p.safetensors"),
        ),
        (
            ["--dataset", "calibrated", "--param", "nonsense=1"],
            lambda: xentlab.problem("calibrated", params={"nonsense": 1}),
        ),
        (
            ["--reference", "fastest"],
            lambda: xentlab.reference(
                xentlab.problem("calibrated", N=2, V=10, D=2), tier="fastest"
            ),
        ),
    ],
)
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


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"k": -1}, "k must be a finite number > 0, got -1"),
        ({"k": float("nan")}, "k must be a finite number > 0, got nan"),
        ({"atol": -1}, "atol must be a finite number ≥ 0, got -1"),
        ({"rtol": float("inf")}, "rtol must be a finite number ≥ 0, got inf"),
        ({"atol": 1e-3, "k": 2}, "k does not apply with atol/rtol"),
        ({"require": ["dX"]}, "dX"),
        ({"policy": "bf17"}, "bf17"),
    ],
)
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
    # baseline_backend: the command's values and message, with the keyword's name; refused where
    # no baseline runs (check='bound'), as by the command.
    r = cli("verify", g.path, cand, "--baseline-backend", "gpu")
    with pytest.raises(
        ValueError, match="baseline_backend must be cpu, cuda, all or auto, got 'gpu'"
    ):
        xentlab.verify(g.path, cand, baseline_backend="gpu")
    with pytest.raises(ValueError, match="baseline_backend does not apply with check='bound'"):
        xentlab.verify(g.path, cand, baseline_backend="cpu", check="bound")
    assert "--baseline-backend must be cpu, cuda, all or auto, got 'gpu'" in r.stderr
    with pytest.raises(TypeError):
        xentlab.verify(g.path, cand, baseline_backend=1)
    with pytest.raises(ValueError, match="baseline_rows does not apply with atol/rtol"):
        xentlab.verify(g.path, cand, atol=1e-3, baseline_rows=4)
    if not xentlab._xentlab.cuda_reference_available()[0]:
        # No GPU here: the CUDA baseline is refused with the reason, as by the command.
        r = cli("verify", g.path, cand, "--baseline-backend", "cuda")
        with pytest.raises(xentlab.NoDeviceError, match="baseline_backend cuda: no CUDA device"):
            xentlab.verify(g.path, cand, baseline_backend="cuda")
        assert "--baseline-backend cuda: no CUDA device" in r.stderr and r.returncode == 4

        # auto falls back to the emulation: the same verdicts and baselines as the default.
        def verdicts(rep):
            return [
                (o.name, o.status, o.differential["status"], o.differential["baseline_normwise"])
                for o in rep.outputs
            ]

        assert verdicts(xentlab.verify(g.path, cand, baseline_backend="auto")) == verdicts(
            xentlab.verify(g.path, cand)
        )
    # A JUnit report is never written over the files it reports on, even with force.
    before = cand.read_bytes()
    with pytest.raises(ValueError, match="is the candidate file itself"):
        xentlab.verify(g.path, cand, junit=cand, force=True)
    assert cand.read_bytes() == before


def test_ignore_index_of_a_catalog_problem_is_applied_as_the_command_applies_it(cli, tmp_path):
    """problem(name, ignore_index=…) gives the spec that value, as --ignore-index with --dataset
    does: the golden files are equal bit for bit, and the rows whose target is that class are
    the ignored ones."""
    base = xentlab.problem("calibrated", N=16, V=50, D=8)
    cls = int(base.targets[3])
    p = xentlab.problem("calibrated", N=16, V=50, D=8, ignore_index=cls)
    assert p.spec.ignore_index == cls and (p.targets == base.targets).all()
    assert xentlab.reference(p).n_valid == int((base.targets != cls).sum()) < 16
    r = cli(
        "golden",
        "--dataset",
        "calibrated",
        "-N",
        "16",
        "-V",
        "50",
        "-D",
        "8",
        "--ignore-index",
        cls,
        "--out",
        tmp_path / "cli.h5",
    )
    assert r.returncode == 0, r.stderr
    xentlab.write_golden(tmp_path / "py.h5", p)
    a, b = _datasets(tmp_path / "cli.h5"), _datasets(tmp_path / "py.h5")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    # An entry that marks ignored rows with -100 keeps its targets: another ignore_index makes
    # them invalid, refused with the command's message.
    r = cli(
        "golden",
        "--dataset",
        "part-ignored",
        "-N",
        "4",
        "-V",
        "10",
        "-D",
        "2",
        "--ignore-index",
        "-1",
        "--out",
        tmp_path / "pi.h5",
    )
    with pytest.raises(ValueError) as e:
        xentlab.problem("part-ignored", N=4, V=10, D=2, ignore_index=-1)
    assert r.returncode == 2 and str(e.value) == _cli_message(r)


def test_float64_H_and_W_are_refused_when_the_problem_is_made(cli, tmp_path):
    """The reference has no exact products of fp64 values: a linear problem in fp64 is refused
    when it is made, with the command's message (a problem file's, or the reference's for a
    catalog problem generated in fp64)."""
    H, W, t = np.ones((4, 3)), np.ones((10, 3)), np.array([0, 1, 2, 3])
    with h5py.File(tmp_path / "f64.h5", "w") as f:
        f["H"], f["W"], f["targets"] = H, W, t
    r = cli("golden", "--dataset", tmp_path / "f64.h5", "--out", tmp_path / "g.h5")
    with pytest.raises(ValueError) as from_file:
        xentlab.problem(str(tmp_path / "f64.h5"))
    with pytest.raises(ValueError) as from_arrays:
        xentlab.Problem.linear(H, W, t)
    assert r.returncode == 2 and str(from_file.value) == _cli_message(r)
    assert _cli_message(r) == f"{tmp_path / 'f64.h5'}: {from_arrays.value}"
    with pytest.raises(ValueError, match=r"^W is float64"):
        xentlab.Problem.linear(H.astype(np.float32), W, t)
    r = cli(
        "golden",
        "--dataset",
        "calibrated",
        "-N",
        "4",
        "-V",
        "10",
        "-D",
        "2",
        "--dtype",
        "fp64",
        "--out",
        tmp_path / "c.h5",
    )
    with pytest.raises(ValueError) as catalog:
        xentlab.problem("calibrated", N=4, V=10, D=2, dtype="fp64")
    assert r.returncode == 2 and str(catalog.value) == _cli_message(r)
    # logits may be fp64: they are given, not products
    assert xentlab.Problem.from_logits(np.zeros((2, 5)), np.array([0, 4])).input_dtype == "fp64"


def test_an_xml_file_that_is_no_report_of_verify_is_kept_without_force(cli, tmp_path, cache_dir):
    """verify replaces its own report of an earlier run, never another XML file (a build file,
    another tool's JUnit report) unless forced: the command's message."""
    g = xentlab.cached_golden("stories260k", cache_dir=cache_dir)
    p = g.problem
    loss, dH, dW = ce_fp32(p.H, p.W, p.targets)
    cand = tmp_path / "cand.h5"
    xentlab.write_candidate(cand, {"reduced_loss": loss})
    for text in (
        '<?xml version="1.0"?>\n<project><modelVersion/></project>\n',
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest"/>'
        "</testsuites>\n",
    ):
        (tmp_path / "other.xml").write_text(text)
        r = cli("verify", g.path, cand, "--junit", tmp_path / "other.xml")
        with pytest.raises(ValueError) as e:
            xentlab.verify(g, cand, junit=tmp_path / "other.xml")
        assert r.returncode == 2 and str(e.value) == _cli_message(r)
        assert "is not a JUnit report of xentlab verify" in str(e.value)
        assert (tmp_path / "other.xml").read_text() == text
    rep = xentlab.verify(g, cand, junit=tmp_path / "other.xml", force=True)
    report = (tmp_path / "other.xml").read_text()
    assert '<testsuite name="xentlab.verify"' in report
    rep.write_junit(tmp_path / "other.xml")  # its own report is replaced without force
    assert (tmp_path / "other.xml").read_text() == report


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: xentlab.problem("calibrated", N="8"), r"^N: expected an integer, got str '8'$"),
        (lambda: xentlab.problem("calibrated", N=8.0), r"^N: expected an integer, got float 8.0$"),
        (
            lambda: xentlab.problem("calibrated", dtype=16),
            r"^dtype: expected a string, got int 16$",
        ),
        (
            lambda: xentlab.problem("calibrated", params={"fraction": "half"}),
            r"^params\['fraction'\]: expected a number",
        ),
        (
            lambda: xentlab.LossSpec(ignore_index=2.5),
            r"^ignore_index: expected an integer, got float 2.5$",
        ),
        (
            lambda: xentlab.LossSpec(label_smoothing="0.1"),
            r"^label_smoothing: expected a number, got str '0.1'$",
        ),
        (
            lambda: xentlab.reference(xentlab.problem("calibrated", N=2, V=10, D=2), tier=5),
            r"^tier: expected a string",
        ),
        (
            lambda: xentlab.write_golden(
                "x.h5", xentlab.problem("calibrated", N=2, V=10, D=2), rows=1.5
            ),
            r"^rows: expected an integer, got float 1.5$",
        ),
        (
            lambda: xentlab.write_candidate("x.h5", [("reduced_loss", 1.0)]),
            r"^outputs: expected a dict",
        ),
        (
            lambda: xentlab.verify("g.h5", "c.h5", policy=32),
            r"^policy: expected a string, got int 32$",
        ),
        (lambda: xentlab.verify("g.h5", "c.h5", k="2"), r"^k: expected a number, got str '2'$"),
        (
            lambda: xentlab.audit(strategies=["naive", 2]),
            r"^strategies\[1\]: expected a name \(a string\), got int 2$",
        ),
        (
            lambda: xentlab.audit(datasets=[5]),
            r"^datasets\[0\]: expected a catalog name, a problem file or a xentlab.Problem",
        ),
    ],
)
def test_arguments_of_the_wrong_type_are_named(call, message):
    """Not nanobind's generic "incompatible function arguments" (which names neither the argument
    nor what it takes), nor a silent int() of 1.5 or float() of a string."""
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: xentlab.problem("calibrated", seed=-1), "seed must be an integer >= 0, got -1"),
        (
            lambda: xentlab.write_golden(
                "x.h5", xentlab.problem("calibrated", N=2, V=10, D=2), sample_seed=-2
            ),
            "sample_seed must be an integer >= 0, got -2",
        ),
    ],
)
def test_negative_seeds_are_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
