#!/usr/bin/env python3
"""Run from the repository root: `python3 tests/check-guarantees.py`.

Checks that every `file::name` (or `file::mod::name`) in docs/guarantees.md names a test
function that exists: `fn name` in tests/file.rs (a test binary of its own), or else in
tests/it/file.rs (a module of the one integration-test binary, where the test's name is
`file::name` too), or else in a src/**/file.rs, or else in the tests of a workspace member
under examples/ (examples/*/tests/file.rs)."""
import glob, os, re, sys
doc = open('docs/guarantees.md').read()
refs = sorted(set(re.findall(r'`([a-z_]+(?:::[a-z_0-9]+)+)(?:\(\))?`', doc)))
bad = []
checked = 0
for ref in refs:
    parts = ref.split('::')
    if parts[-1] == '*' or ref == 'file::name':
        continue
    file, name = parts[0], parts[-1]
    members = sorted(glob.glob(f'examples/*/tests/{file}.rs'))
    for path in [f'tests/{file}.rs', f'tests/it/{file}.rs', *sorted(glob.glob(f'src/**/{file}.rs', recursive=True)), *members]:
        if os.path.exists(path):
            src = open(path).read()
            if re.search(r'\bfn ' + re.escape(name) + r'\b', src):
                checked += 1
                break
    else:
        bad.append(ref)
print(f'{checked} references resolve')
for ref in bad:
    print('UNRESOLVED:', ref)
sys.exit(1 if bad else 0)
