#!/usr/bin/env python3
"""Validate every object of a CRD's kind in the given YAML files against the CRD's schema.

kubernetes-validate knows only built-in kinds; this checks KServices (for example those under
examples/) against the Knative Service CRD's openAPIV3Schema. Files that do not exist, and
documents of other kinds, are skipped (and counted). Exit 1 on any violation.

Without the CRD file nothing is checked: a banner on stderr says so and how to get the file, and
with --skip-note NOTE it is also written to NOTE (for `make test` to repeat at its end). Under CI
(CI=true) a missing CRD file is a failure, not a skip.
Usage: validate_crd.py [--skip-note NOTE] CRD.yaml FILE.yaml...
"""
import glob
import os
import sys

import jsonschema
import yaml


def openapi_to_jsonschema(node):
    """OpenAPI v3 `nullable: true` -> JSON Schema's type list; drop x-kubernetes-* keys."""
    if isinstance(node, dict):
        out = {k: openapi_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
        if out.pop("nullable", False) and "type" in out:
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(node, list):
        return [openapi_to_jsonschema(v) for v in node]
    return node


CRD_SOURCE = "https://raw.githubusercontent.com/knative/serving/main/config/core/300-resources/service.yaml"


def missing(crd_path, skip_note):
    """The CRD file is not there: fail under CI, else skip and say so loudly."""
    under_ci = os.environ.get("CI", "").lower() in ("true", "1")
    verdict = "FAILED" if under_ci else "SKIPPED"
    banner = "\n".join([
        "=" * 78,
        f"{verdict}: the KServices under examples/ were not checked against Knative's CRD schema:",
        f"  {crd_path} does not exist.",
        "  Get it with",
        f"    mkdir -p {os.path.dirname(crd_path) or '.'} && curl -fsSL -o {crd_path} \\",
        f"      {CRD_SOURCE}",
        "  or point make at a copy: make test KNATIVE_CRD=path/to/service.yaml",
        "=" * 78,
        "",
    ])
    sys.stderr.write(banner)
    if under_ci:
        return 1
    if skip_note:
        with open(skip_note, "w") as f:
            f.write(banner)
    return 0


def main(crd_path, paths, skip_note=None):
    try:
        with open(crd_path) as f:
            crd = yaml.safe_load(f)
    except FileNotFoundError:
        return missing(crd_path, skip_note)
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    schemas = {
        f"{group}/{v['name']}": openapi_to_jsonschema(v["schema"]["openAPIV3Schema"])
        for v in crd["spec"]["versions"]
    }
    checked = skipped = failed = 0
    files = [p for pattern in paths for p in (glob.glob(pattern) or [pattern])]
    for path in files:
        try:
            with open(path) as f:
                docs = [d for d in yaml.safe_load_all(f) if d]
        except FileNotFoundError:
            continue
        for doc in docs:
            schema = schemas.get(doc.get("apiVersion"))
            if doc.get("kind") != kind or schema is None:
                skipped += 1
                continue
            errors = list(jsonschema.Draft7Validator(schema).iter_errors(doc))
            for e in errors:
                print(f"ERROR {path}: {kind} {doc.get('metadata', {}).get('name')}: "
                      f"{'/'.join(map(str, e.absolute_path))}: {e.message}")
            failed += bool(errors)
            checked += 1
    print(f"validate_crd: {checked} {kind} object(s) checked against {crd_path}, "
          f"{failed} invalid, {skipped} other document(s) skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    note = None
    if args[:1] == ["--skip-note"]:
        note, args = args[1], args[2:]
    sys.exit(main(args[0], args[1:], note))
