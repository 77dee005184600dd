#!/usr/bin/python3
"""Validate Kubernetes manifests offline against the API models of the
official Kubernetes Python client (Debian: python3-kubernetes), strictly:
every field must exist in the model at its place (a misspelt field is an
error, where `kubectl apply` would at best warn), have the model's type, and
the model's required fields must be set.

    validate.py FILE.yaml...       # prints the documents as JSON on success

Exit status 1 and one line per problem on stderr otherwise. Fields newer than
the client's API version are accepted only where listed in NEWER_FIELDS.
"""

import datetime
import json
import re
import sys

import yaml
from kubernetes import client
from kubernetes.client import models

# (model, JSON field) pairs the installed client predates, with the
# Kubernetes release that added them. Their values are checked by hand.
NEWER_FIELDS = {
    ("V1SecurityContext", "appArmorProfile"): "1.30",
    ("V1PodSecurityContext", "appArmorProfile"): "1.30",
}
APPARMOR_TYPES = {"RuntimeDefault", "Localhost", "Unconfined"}

PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float)}


def check(value, typ, path, errors):
    """Check value (decoded YAML) against a client type string."""
    if typ in PRIMITIVES:
        ok = isinstance(value, PRIMITIVES[typ]) and not (typ == "int" and isinstance(value, bool))
        if not ok:
            errors.append("%s: %r is not %s" % (path, value, typ))
        return
    if typ == "object":  # IntOrString, Quantity, free-form
        return
    if typ == "datetime":
        if not isinstance(value, (str, datetime.datetime)):
            errors.append("%s: %r is not a timestamp" % (path, value))
        return
    m = re.fullmatch(r"list\[(.+)\]", typ)
    if m:
        if not isinstance(value, list):
            errors.append("%s: expected a list" % path)
            return
        for i, item in enumerate(value):
            check(item, m.group(1), "%s[%d]" % (path, i), errors)
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", typ)
    if m:
        if not isinstance(value, dict):
            errors.append("%s: expected a mapping" % path)
            return
        for k, v in value.items():
            check(v, m.group(1), "%s.%s" % (path, k), errors)
        return
    model = getattr(models, typ, None)
    if model is None:
        errors.append("%s: unknown model type %s" % (path, typ))
        return
    if not isinstance(value, dict):
        errors.append("%s: expected a mapping (%s)" % (path, typ))
        return
    by_json = {j: a for a, j in model.attribute_map.items()}
    for key, v in value.items():
        newer = NEWER_FIELDS.get((typ, key))
        if newer:
            if not isinstance(v, dict) or v.get("type") not in APPARMOR_TYPES or set(v) - {"type", "localhostProfile"}:
                errors.append("%s.%s: not an AppArmorProfile" % (path, key))
            continue
        if key not in by_json:
            errors.append("%s.%s: no such field in %s" % (path, key, typ))
            continue
        check(v, model.openapi_types[by_json[key]], "%s.%s" % (path, key), errors)


def model_for(doc):
    group_version = doc.get("apiVersion", "")
    version = group_version.split("/")[-1]
    return "%s%s" % (version.capitalize(), doc.get("kind", ""))


def without_newer(value):
    """The document without NEWER_FIELDS, for the client's required checks."""
    if isinstance(value, dict):
        return {k: without_newer(v) for k, v in value.items() if k != "appArmorProfile"}
    if isinstance(value, list):
        return [without_newer(v) for v in value]
    return value


def main(paths):
    errors, docs = [], []
    api = client.ApiClient()
    for path in paths:
        with open(path) as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is None:
                    continue
                where = "%s#%d %s/%s" % (path, i, doc.get("kind", "?"), doc.get("metadata", {}).get("name", "?"))
                typ = model_for(doc)
                if getattr(models, typ, None) is None:
                    errors.append("%s: no model %s for apiVersion %s kind %s" % (where, typ, doc.get("apiVersion"), doc.get("kind")))
                    continue
                check(doc, typ, where, errors)
                try:  # the client's own required-field checks
                    api._ApiClient__deserialize(without_newer(doc), typ)
                except (ValueError, TypeError) as err:
                    errors.append("%s: %s" % (where, err))
                docs.append(doc)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    json.dump(docs, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
