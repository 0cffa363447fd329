"""The docs name only what exists: every repository path README.md and docs/*.md name (in code,
prose or links, with the headings links point at), every `--flag` they give one of our command
lines, and every hparam their `--hparams` JSON examples set. Reads source text only (ast and
regular expressions), so it runs in a second without TensorFlow; each failure lists every stale
name with the doc it is in."""

from __future__ import annotations

import ast
import functools
import glob
import pathlib
import re
import shlex
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# The repository's top-level folders: a path in the docs that starts with one of them names a
# repository file. (Paths under a user's DATA_DIR, demo_data/ or models/NAME/ start otherwise.)
TOP_DIRS = (".ci", "benchmarks", "configs", "docs", "electra_tf", "experiments", "pretrain_data",
            "tests")
# Our command lines, whose flags the docs may name: the globs of their scripts.
COMMAND_GLOBS = ("run_pretraining.py", "run_finetuning.py", "run_ensemble.py",
                 "convert_checkpoint.py", "pretrain_data/*.py", "experiments/*.py",
                 "benchmarks/*.py", "docs/figures/*.py")
# File names without a folder that are not ours: google-research/electra's modules and the
# official scorers the docs compare with (they are named as the original's, or a library's).
NOT_OURS = {
    "configure_pretraining.py", "configure_finetuning.py", "flops_computation.py",
    "preprocessing.py", "classification_tasks.py", "qa_tasks.py", "qa_metrics.py",
    "tagging_tasks.py", "mrqa_official_eval.py",
    "model/tokenization.py", "model/modeling.py", "finetune/task.py",
    "keras_hub/src/models/electra/electra_backbone.py",
}
# Flags the docs name that belong to no command of ours: XLA's own (set through TF_XLA_FLAGS /
# XLA_FLAGS), which docs/performance.md names for what it tried, and pytest's, which it names for
# how the suite reports its slowest tests.
NOT_OUR_FLAGS = {"xla_cpu_use_onednn", "xla_cpu_use_xnnpack", "tf_xla_ops_to_cluster",
                 "durations"}

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_REPO_PATH = re.compile(r"(?<![\w/.$<>-])((?:%s)/[^\s`'\"(),;|\]\\]*)"
                        % "|".join(re.escape(d) for d in TOP_DIRS))
_BARE_FILE = re.compile(r"(?<![\w/.$<>-])([A-Za-z_][\w/]*\.(?:py|md|sh|ini))(?![\w/])")


def _name(doc: pathlib.Path) -> str:
    return str(doc.relative_to(REPO)) if doc.is_relative_to(REPO) else str(doc)


def _split(doc: pathlib.Path) -> tuple[list[tuple[str, str]], list[str], str]:
    """(fenced blocks as (language, text), inline code spans, prose) of a markdown file."""
    text = doc.read_text(encoding="utf-8")
    fences = [(m.group(1).strip(), m.group(2)) for m in _FENCE.finditer(text)]
    rest = _FENCE.sub("", text)
    spans = _SPAN.findall(rest)
    return fences, spans, _SPAN.sub(" ", rest)


def _exists(path: str) -> bool:
    """Whether a repository path exists; a glob must match something, and a path with a
    placeholder (<task>, {train,dev}, $VAR, ...) is checked up to its placeholder."""
    path = path.split("#")[0].rstrip(".:")
    parts = []
    for part in path.split("/"):
        if any(c in part for c in "<>{}$") or part in ("...", "…"):
            break
        parts.append(part)
    prefix = "/".join(parts)
    if not prefix:
        return True
    return bool(glob.glob(str(REPO / prefix)))


def _headings(doc: pathlib.Path) -> set[str]:
    """GitHub's anchors for a markdown file's headings."""
    text = _FENCE.sub("", doc.read_text(encoding="utf-8"))
    anchors, seen = set(), {}
    for title in re.findall(r"^#+\s+(.*?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_every_repository_path_the_docs_name_exists():
    missing = []
    for doc in DOCS:
        name = _name(doc)
        fences, spans, prose = _split(doc)
        code = [text for _, text in fences] + spans
        for text in code + [prose]:
            for path in _REPO_PATH.findall(text):
                file, _, anchor = path.rstrip(".:").partition("#")
                if not _exists(file):
                    missing.append(f"{name}: {path}")
                elif anchor and file.endswith(".md") and anchor not in _headings(REPO / file):
                    missing.append(f"{name}: {path} (no such heading)")
        for span in spans:  # a file named without its folder: ours somewhere, or not ours
            for path in _BARE_FILE.findall(span):
                if path not in NOT_OURS and "/" not in path and not (
                        (REPO / path).exists() or list(REPO.glob(f"*/**/{path}"))):
                    missing.append(f"{name}: {path}")
        for target in _LINK.findall(prose):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            resolved = (doc.parent / file).resolve() if file else doc
            if not resolved.exists():
                missing.append(f"{name}: link {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _headings(resolved):
                missing.append(f"{name}: link {target} (no such heading)")
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(
        sorted(set(missing)))


# -- flags -----------------------------------------------------------------------------------


def _module_file(module: str) -> pathlib.Path | None:
    path = REPO / (module.replace(".", "/") + ".py")
    return path if path.exists() else None


@functools.cache
def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _imports(path: pathlib.Path) -> dict[str, pathlib.Path]:
    """The names a module binds to our modules (`import command_line`, `from pretrain_data
    import build_pretraining_dataset as builder`)."""
    bound = {}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (file := _module_file(alias.name)):
                    bound[alias.asname or alias.name] = file
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (file := _module_file(f"{node.module}.{alias.name}")):
                    bound[alias.asname or alias.name] = file
    return bound


def _function(path: pathlib.Path, name: str) -> ast.FunctionDef | None:
    return next((node for node in _tree(path).body
                 if isinstance(node, ast.FunctionDef) and node.name == name), None)


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [s for element in node.elts for s in _strings(element)]
    return []


_CALLED: dict = {}  # (file, function, params turned off) -> what _flags_in found in it


def _flags_in(node: ast.AST, path: pathlib.Path, false_params: frozenset = frozenset(),
              seen: frozenset = frozenset()) -> tuple[set[str], dict[str, str]]:
    """The flags a module or function defines: absl's flags.DEFINE_*("name", ...) (a boolean
    also as --noname), argparse's add_argument("--name", ...), the `for name in (...):
    DEFINE_alias(name.replace("_", "-"), name)` dashed spellings, and those of the functions of
    ours it calls (skipping `if param:` blocks a call turns off with param=False). Returns the
    flags, and the dashed aliases such a loop defines for those of its names that are flags."""
    found: set[str] = set()
    dashed: dict[str, str] = {}
    imports = _imports(path)

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id in false_params:
            for child in n.orelse:
                visit(child)
            return
        if isinstance(n, ast.For) and any(
                isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "DEFINE_alias"
                and isinstance(c.args[0], ast.Call) for c in ast.walk(n)):
            dashed.update((name, name.replace("_", "-")) for name in _strings(n.iter))
        if isinstance(n, ast.Call):
            callee = (n.func.attr if isinstance(n.func, ast.Attribute)
                      else getattr(n.func, "id", ""))
            if callee.startswith("DEFINE_") and n.args and _strings(n.args[0]):
                name = _strings(n.args[0])[0]
                found.add(name)
                if callee in ("DEFINE_bool", "DEFINE_boolean"):
                    found.add("no" + name)
            elif callee == "add_argument":
                found.update(s.lstrip("-") for a in n.args for s in _strings(a)
                             if s.startswith("-"))
            else:  # a function of ours that defines flags
                target = None
                if isinstance(n.func, ast.Name):
                    target = (path, n.func.id)
                elif isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                        and n.func.value.id in imports:
                    target = (imports[n.func.value.id], n.func.attr)
                if target and target not in seen and (fn := _function(*target)):
                    off = frozenset(k.arg for k in n.keywords if isinstance(k.value, ast.Constant)
                                    and k.value.value is False)
                    key = (*target, off)
                    if key not in _CALLED:  # each function once, not once per call path
                        _CALLED[key] = _flags_in(fn, target[0], off, seen | {target})
                    found.update(_CALLED[key][0])
                    dashed.update(_CALLED[key][1])
        for child in ast.iter_child_nodes(n):
            visit(child)

    for child in (node.body if isinstance(node, (ast.Module, ast.FunctionDef)) else [node]):
        visit(child)
    return found, dashed


@functools.cache
def command_flags() -> dict[str, set[str]]:
    """Our command lines (paths from the repository root) -> the flags each defines; --help
    (answered by command_line.run or argparse) for all."""
    import command_line

    commands = {}
    for pattern in COMMAND_GLOBS:
        for path in sorted(REPO.glob(pattern)):
            flags, dashed = _flags_in(_tree(path), path)
            flags |= {alias for name, alias in dashed.items() if name in flags}
            flags |= {spelling[2:] for spelling, name in command_line.NEGATED_SPELLINGS.items()
                      if name in flags}
            if flags:
                commands[str(path.relative_to(REPO))] = flags | {"help"}
    return commands


def _commands(text: str) -> list[list[str]]:
    """Shell commands in a code block or span, as token lists."""
    text = re.sub(r"\\\n", " ", text)
    commands = []
    for line in re.split(r"\n|&&|;|\|(?!\|)", text):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote in a span that shows part of a command
            tokens = line.split()
        if tokens:
            commands.append(tokens)
    return commands


def _named_flags(doc: pathlib.Path) -> list[tuple[str | None, str, str]]:
    """(command or None, flag, the text it is in) for every --flag the doc gives: in a command
    it belongs to that command's script; alone in a code span, to any of ours."""
    fences, spans, _ = _split(doc)
    named = []
    shell = [text for lang, text in fences if lang in ("", "bash", "sh", "shell", "console")]
    for text in shell + spans:
        for tokens in _commands(text):
            script = next((t for t in tokens if t in command_flags()), None)
            start = tokens.index(script) + 1 if script else 0
            if script is None and not re.fullmatch(r"--[\w-]+(=\S*)?( .*)?", " ".join(tokens)):
                continue  # another program's command (pip, pytest, tensorboard, bash)
            for token in tokens[start:]:
                if re.match(r"--[A-Za-z]", token):
                    named.append((script, token[2:].split("=")[0], " ".join(tokens)[:100]))
    return named


def test_every_flag_the_docs_give_a_command_line_is_defined():
    every = set().union(*command_flags().values())
    assert {"data_dir", "hparams", "to", "corpus-dir", "nooverwrite", "budget"} <= every
    assert "corpus_dir" not in command_flags()[
        "pretrain_data/build_openwebtext_pretraining_dataset.py"]
    unknown = []
    for doc in DOCS:
        for script, flag, text in _named_flags(doc):
            defined = command_flags()[script] if script else every
            if flag not in defined and flag not in NOT_OUR_FLAGS:
                unknown.append(f"{_name(doc)}: --{flag} "
                               f"({script or 'no command of ours'}) in `{text}`")
    assert not unknown, "the docs name flags no command line defines:\n" + "\n".join(
        sorted(set(unknown)))


# -- hparams ---------------------------------------------------------------------------------


def _classes(trees: list[ast.Module]) -> dict[str, ast.ClassDef]:
    return {node.name: node for tree in trees for node in tree.body
            if isinstance(node, ast.ClassDef)}


def _is_hparams(cls: ast.ClassDef) -> bool:
    """An hparam dataclass: one that declares HPARAMS_DOC, or a kind of task's TaskHparams."""
    return any(isinstance(s, ast.AnnAssign) and getattr(s.target, "id", "") == "HPARAMS_DOC"
               for s in cls.body) or any(getattr(b, "id", getattr(b, "attr", "")) ==
                                         "TaskHparams" for b in cls.bases)


def _with_bases(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    found, todo = [], [cls]
    while todo:
        found.append(todo.pop())
        todo.extend(classes[name] for b in found[-1].bases
                    if (name := getattr(b, "id", getattr(b, "attr", ""))) in classes)
    return found


def _declared(classes: list[ast.ClassDef]) -> dict[str, ast.AST | None]:
    """The annotated names the classes declare: a ClassVar's name to its value, a field's
    name to None."""
    declared = {}
    for cls in reversed(classes):  # a subclass's declarations over its bases'
        for s in cls.body:
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                annotation = s.annotation.value if isinstance(s.annotation, ast.Subscript) \
                    else s.annotation
                class_var = getattr(annotation, "id", getattr(annotation, "attr", "")) == \
                    "ClassVar"
                declared[s.target.id] = s.value if class_var else None
    return declared


@functools.cache
def _package_classes() -> dict[str, ast.ClassDef]:
    return _classes([_tree(path) for path in (REPO / "electra_tf").rglob("*.py")])


@functools.cache
def hparam_names() -> set[str]:
    """The fields of the hparam dataclasses and their bases, including a TaskHparams a doc's
    own example task declares, the original's spellings (SPELLINGS) and the BERT config keys
    model_hparam_overrides takes."""
    trees = [ast.parse(text) for doc in DOCS for lang, text in _split(doc)[0] if lang == "python"]
    classes = {**_package_classes(), **_classes(trees)}
    names = set()
    for cls in filter(_is_hparams, classes.values()):
        declared = _declared(_with_bases(cls, classes))
        names.update(name for name, class_var in declared.items() if class_var is None)
        names.update(_strings(declared.get("SPELLINGS")))
    shapes = _tree(REPO / "electra_tf" / "model_shape.py")
    names.update(s for node in shapes.body if isinstance(node, ast.Assign) and any(
        getattr(t, "id", "") == "BERT_CONFIG_KEYS" for t in node.targets)
        for s in _strings(node.value))
    return names


def test_every_hparam_has_a_row_in_its_docs_table():
    """An unknown-hparam error sends the user to the doc HPARAMS_DOC names ("every hparam is
    listed in ..."): every field of that class and its bases (a kind of task's TaskHparams go
    to fine-tuning's doc) is named in the first cell of a row of one of that doc's tables.
    model_name and data_dir are flags, and DERIVED fields are computed, not set."""
    classes, missing = _package_classes(), []
    fine_tuning = _declared([classes["FinetuningConfig"]])["HPARAMS_DOC"].value
    for cls in filter(_is_hparams, classes.values()):
        declared = _declared(_with_bases(cls, classes))
        doc = declared["HPARAMS_DOC"].value if "HPARAMS_DOC" in declared else fine_tuning
        rows = [line.split("|")[1] for line in (REPO / doc.split("#")[0])
                .read_text(encoding="utf-8").splitlines() if line.startswith("|")]
        exempt = {"model_name", "data_dir", *_strings(declared.get("DERIVED"))}
        missing += [f"{name} ({cls.name}) in {doc}" for name, class_var in declared.items()
                    if class_var is None and name not in exempt
                    and not any(f"`{name}`" in row for row in rows)]
    assert not missing, "hparams without a row in their doc's tables:\n" + "\n".join(missing)


def _hparam_examples(doc: pathlib.Path) -> list[str]:
    """The hparam JSON a doc shows: the argument of --hparams (or of H='...', which a block
    passes to it) in its commands, and code spans that are `"key": value` fragments."""
    fences, spans, _ = _split(doc)
    examples = []
    for text in [t for _, t in fences] + spans:
        examples += re.findall(r"(?:--hparams[ =]|\bH=)'([^']*)'", text)
    examples += [span for span in spans if re.match(r'\s*\{?\s*"\w+"\s*:', span)]
    return examples


def test_every_hparam_the_docs_set_exists():
    assert {"model_size", "task_names", "learning_rate", "hidden_size", "objective"} <= \
        hparam_names()
    unknown = []
    for doc in DOCS:
        for example in _hparam_examples(doc):
            for key in re.findall(r'"([A-Za-z_]\w*)"\s*:', example):
                if key not in hparam_names():
                    unknown.append(f"{_name(doc)}: {key} in `{example}`")
    assert not unknown, "the docs set hparams that do not exist:\n" + "\n".join(sorted(unknown))


def test_the_checks_catch_a_stale_name(tmp_path, monkeypatch):
    """The checks above fail on a doc that names a missing file, flag, heading or hparam."""
    doc = tmp_path / "stale.md"
    doc.write_text(f"See `electra_tf/no_such_module.py` and "
                   f"[this]({REPO}/README.md#no-such-heading).\n"
                   "```bash\npython run_pretraining.py --data_dir D --no_such_flag \\\n"
                   "    --hparams '{\"no_such_hparam\": 1}'\n```\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "DOCS", [doc])
    for check, expected in [(test_every_repository_path_the_docs_name_exists,
                             ["electra_tf/no_such_module.py", "README.md#no-such-heading"]),
                            (test_every_flag_the_docs_give_a_command_line_is_defined,
                             ["--no_such_flag (run_pretraining.py)"]),
                            (test_every_hparam_the_docs_set_exists, ["no_such_hparam"])]:
        try:
            check()
        except AssertionError as e:
            assert all(s in str(e) for s in expected), str(e)
            assert "--data_dir (" not in str(e)
        else:
            raise AssertionError(f"{check.__name__} passed on a stale doc")
