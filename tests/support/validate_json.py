"""Validates JSON files against a JSON Schema (draft 2020-12), for the C++ tests of --json.

    python validate_json.py SCHEMA FILE...

Exit status: 0 every file is valid, 1 one is not (each error printed with its path in the
document), 77 the jsonschema package is missing (the caller skips, naming why)."""

import json
import sys

try:
    import jsonschema
except ImportError:
    print("the Python package jsonschema is not installed", file=sys.stderr)
    sys.exit(77)


def main(schema_path, files):
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        errors = list(validator.iter_errors(doc))
        # The schema's oneOf names no key when it fails: the errors of the command's own branch do.
        branch = f"{doc.get('command')}_report" if isinstance(doc, dict) else None
        if errors and branch in schema.get("$defs", {}):
            own = {k: v for k, v in schema.items() if k != "oneOf"}
            own["$ref"] = f"#/$defs/{branch}"
            errors = list(jsonschema.Draft202012Validator(own).iter_errors(doc)) or errors
        for error in errors:
            bad += 1
            where = "/".join(str(p) for p in error.absolute_path)
            print(f"{path}: /{where}: {error.message[:300]}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
