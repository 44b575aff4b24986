#!/usr/bin/env bash
# GPU check of `xentlab bench --json`: the one report the CPU suite cannot produce
# end to end. Run from the repository root on a CUDA machine; results under $OUT.
# It builds xentlab, runs a small bench (every registered CUDA strategy, two recipes) with --csv and
# --json, then checks that the JSON parses, validates against docs/schema/xentlab-report.schema.json
# (where python3 has jsonschema; else it checks the documented top-level keys), and agrees with the
# CSV row by row (strategy, status, median time); also runs test_bench_gpu and the JSON tests.
set -uo pipefail
OUT=${OUT:-$PWD/out-json}
mkdir -p "$OUT"
build=${BUILD_DIR:-build-json-gpu}
{
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DXENTLAB_PYTHON=OFF &&
    cmake --build "$build" -j 16 --target xentlab test_bench test_cli test_bench_gpu
} >"$OUT/build.log" 2>&1 || { echo "build failed (see build.log)"; tail -40 "$OUT/build.log"; exit 1; }
bin="$build/cli/xentlab"
"$bin" bench -N 512 -V 3000 -D 256 --recipes bf16/bf16/fp32/bf16,fp32/fp32/fp32/fp32 --repeats 3 \
  --csv "$OUT/bench.csv" --json "$OUT/bench.json" --markdown "$OUT/bench.md" >"$OUT/bench.txt" 2>&1
echo "bench exit status: $?" | tee -a "$OUT/bench.txt"
python3 - "$OUT/bench.json" "$OUT/bench.csv" docs/schema/xentlab-report.schema.json <<'PY' 2>&1 | tee "$OUT/check.txt"
import csv, json, sys
doc = json.load(open(sys.argv[1]))
rows = list(csv.DictReader(open(sys.argv[2])))
try:
    import jsonschema
    schema = json.load(open(sys.argv[3]))
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    print("schema:", "valid" if not errors else f"{len(errors)} errors: {[e.message[:200] for e in errors[:5]]}")
except ImportError:
    keys = ["format", "schema_version", "command", "provenance", "options", "device", "policy", "rows", "quoted"]
    print("schema: jsonschema missing; top-level keys", "ok" if list(doc) == keys else f"differ: {list(doc)}")
assert doc["command"] == "bench" and len(doc["rows"]) == len(rows), (len(doc["rows"]), len(rows))
for j, c in zip(doc["rows"], rows):
    assert (j["strategy"], j["recipe"], j["status"]) == (c["strategy"], c["recipe"], c["status"]), (j, c)
    if j["time_ms"] is not None:
        assert abs(float(j["time_ms"]["median"]) - float(c["median_ms"])) <= 1e-9 * float(c["median_ms"]) + 1e-12
    print(j["strategy"], j["recipe"], j["status"], j["time_ms"] and j["time_ms"]["median"], j["errors"])
print("device:", doc["device"]["gpu"], "commit:", doc["provenance"]["commit"])
print("bench JSON agrees with the CSV")
PY
"$build/tests/test_bench_gpu" >"$OUT/test_bench_gpu.txt" 2>&1; echo "test_bench_gpu: $?" | tee -a "$OUT/check.txt"
"$build/tests/test_bench" --gtest_filter='BenchJson*' >"$OUT/test_bench_json.txt" 2>&1; echo "test_bench BenchJson*: $?" | tee -a "$OUT/check.txt"
"$build/tests/test_cli" --gtest_filter='JsonProgram*' >"$OUT/test_cli_json.txt" 2>&1; echo "test_cli JsonProgram*: $?" | tee -a "$OUT/check.txt"
