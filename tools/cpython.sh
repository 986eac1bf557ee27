#!/usr/bin/env bash
# The Python the Makefile's venvs run on: CPython 3.13 built with profile-guided optimization
# and link-time optimization (D213), into a cache outside the repo keyed by what it is built
# from and how: built once (about 14 minutes on 2 cores, progress on stderr), found in
# milliseconds afterwards.
# Prints the interpreter's path on stdout.
#
# pyenv's 3.13 on these machines is configured --enable-shared without --enable-optimizations
# or --with-lto; the test suite, the twin and its Lambda workers are pure-Python work, which
# such a build runs slower (BENCHMARKS.md, "The interpreter, built for speed").
#
# The source is CPython's release tarball as Debian's archive carries it (python3.13's
# .orig.tar.xz is the upstream tarball byte for byte: the sha256 below is python.org's, as the official
# python Docker image pins it; that image is built with these same two flags), since
# only package registries are reachable here. When it cannot be fetched or built, the script
# says so on stderr and prints pyenv's `python3.13` instead: the tests run slower, not
# differently.
#
# HYPERGUARD_PYTHON overrides all of it (an interpreter of your own: printed as given).
set -euo pipefail

VERSION=3.13.5
SHA256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
URLS=(
    "http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_${VERSION}.orig.tar.xz"
    "https://www.python.org/ftp/python/${VERSION}/Python-${VERSION}.tar.xz"
)
# CPython's PGO task (Lib/test/libregrtest/pgo.py) without test_generators, one of whose
# tests fails on these machines and, from 3.13 on, fails the build with it.
PGO_TESTS="test_array test_base64 test_binascii test_binop test_bisect test_bytes test_bz2
test_cmath test_codecs test_collections test_complex test_dataclasses test_datetime
test_decimal test_difflib test_float test_fstring test_functools test_hashlib test_heapq
test_int test_itertools test_json test_long test_lzma test_math test_memoryview test_operator
test_ordered_dict test_patma test_pickle test_pprint test_re test_set test_sqlite3
test_statistics test_str test_struct test_tabnanny test_time test_xml_etree test_xml_etree_c"
CONFIGURE=(--enable-optimizations --with-lto)
FALLBACK=python3.13

if [[ -n "${HYPERGUARD_PYTHON:-}" ]]; then
    echo "$HYPERGUARD_PYTHON"
    exit 0
fi

key="$(echo "$VERSION $SHA256 ${CONFIGURE[*]} $PGO_TESTS" | sha256sum | cut -c1-12)"
cache="${HYPERGUARD_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hyperguard/python}"
prefix="$cache/cpython-$VERSION-$key"
if [[ -f "$prefix/.complete" ]]; then
    echo "$prefix/bin/python3.13"
    exit 0
fi

fallback() {
    echo "tools/cpython.sh: $1; using $FALLBACK (slower: D213)" >&2
    echo "$FALLBACK"
    exit 0
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fetched=""
for url in "${URLS[@]}"; do
    echo "tools/cpython.sh: fetching $url" >&2
    if curl -fsSL --connect-timeout 20 --max-time 300 -o "$work/src.tar.xz" "$url" \
        && echo "$SHA256  $work/src.tar.xz" | sha256sum -c --quiet - >/dev/null 2>&1; then
        fetched=1
        break
    fi
done
[[ -n "$fetched" ]] || fallback "CPython $VERSION's source could not be fetched"

echo "tools/cpython.sh: building CPython $VERSION with PGO and LTO into $prefix" \
    "(about 14 minutes on 2 cores; once per machine)" >&2
rm -rf "$prefix"
started=$SECONDS
(while sleep 60; do echo "tools/cpython.sh: building, $((SECONDS - started)) s" >&2; done) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true; rm -rf "$work"' EXIT
if ! (
    cd "$work" && tar xf src.tar.xz && cd "Python-$VERSION" \
        && ./configure --quiet --prefix="$prefix" "${CONFIGURE[@]}" \
        && make -j"$(nproc)" -s PROFILE_TASK="-m test --pgo --timeout=1200 ${PGO_TESTS//$'\n'/ }" \
        && make -s install
) >"$work/build.log" 2>&1; then
    kill "$ticker" 2>/dev/null || true
    tail -n 30 "$work/build.log" >&2
    rm -rf "$prefix"
    fallback "CPython $VERSION did not build (its log's end above)"
fi
kill "$ticker" 2>/dev/null || true
# CPython builds without a module whose headers are missing (libssl-dev, libffi-dev, ...) and
# only warns; pip, boto3 and the tests need these.
if ! "$prefix/bin/python3.13" -c "import ssl, ctypes, sqlite3, zlib, lzma, bz2, uuid" 2>&1 >&2; then
    rm -rf "$prefix"
    fallback "CPython $VERSION built without a module the project needs (its headers missing?)"
fi
touch "$prefix/.complete"
echo "tools/cpython.sh: CPython $VERSION built in $((SECONDS - started)) s" >&2
echo "$prefix/bin/python3.13"
