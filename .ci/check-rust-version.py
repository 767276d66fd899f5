#!/usr/bin/env python3
"""Checks that Cargo.toml's `rust-version` is not older than what the dependencies need.

Reads `cargo metadata` (the locked dependency graph) and compares the crate's declared
`rust-version` with the highest `rust-version` among the packages a dependent builds: the
crate's normal and build dependencies, transitively, for every target platform, with every
feature on (an optional dependency such as `metrics` is built by the users who enable it).
Dev-dependencies (test and bench tools) are listed for information only: a user of the
library never builds them.

The crate's own code can need a newer compiler than its dependencies; this check cannot
see that. It passes when the declared version is at least the dependencies' maximum, and
fails, naming the packages, when it is older.

Usage: python3 .ci/check-rust-version.py   (from the repository root; needs cargo)
"""

import json
import subprocess
import sys


def version_key(version):
    """'1.85' or '1.85.0' -> (1, 85, 0), for comparing."""
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = metadata["resolve"]["root"]
    declared = packages[root].get("rust_version")
    if declared is None:
        sys.exit("Cargo.toml declares no rust-version")

    def reachable(from_root_kinds):
        """Package ids reachable from the root through edges of the given kinds (from the
        root) and through normal and build edges below it."""
        seen, stack = set(), [root]
        while stack:
            package = stack.pop()
            for dep in nodes[package]["deps"]:
                kinds = {k["kind"] for k in dep["dep_kinds"]}
                allowed = from_root_kinds if package == root else {None, "build"}
                if kinds & allowed and dep["pkg"] not in seen:
                    seen.add(dep["pkg"])
                    stack.append(dep["pkg"])
        return seen

    def report(ids):
        """The packages that declare a rust-version, newest requirement first."""
        versions = [
            (packages[i]["rust_version"], packages[i]["name"], packages[i]["version"])
            for i in ids
            if packages[i].get("rust_version")
        ]
        return sorted(versions, key=lambda v: version_key(v[0]), reverse=True)

    needed = report(reachable({None, "build"}))
    dev_only = report(reachable({"dev"}) - reachable({None, "build"}))
    print(f"declared rust-version: {declared}")
    if dev_only:
        newest = dev_only[0]
        print(f"dev-dependencies (not checked): up to {newest[0]} ({newest[1]} {newest[2]})")
    if not needed:
        print("no dependency declares a rust-version")
        return
    top = version_key(needed[0][0])
    print(f"dependencies need: {needed[0][0]}")
    if version_key(declared) < top:
        too_new = [v for v in needed if version_key(v[0]) > version_key(declared)]
        for rust_version, name, version in too_new:
            print(f"  {name} {version} needs rust {rust_version}", file=sys.stderr)
        sys.exit(
            f"rust-version {declared} in Cargo.toml is older than the dependencies allow "
            f"({needed[0][0]}): raise it, or pin older dependencies"
        )
    print("ok: the declared rust-version covers every dependency")


if __name__ == "__main__":
    main()
