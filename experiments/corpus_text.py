"""Plain English prose from documentation sources: the conversions experiments/fetch_corpora.py
applies to the packages it fetches.

The output layout is the one pretrain_data/build_pretraining_dataset.py reads: one paragraph a
line, a blank line after each document. Sources:

  HTML  (Sphinx and DocBook pages)  html_paragraphs(parse_html(text))
  POD   (Perl's manual pages)       pod_paragraphs(text)
  roff  (pod2man's man pages)       man_paragraphs(text)
  Brown's tagged files              untagged_sentences(text)
  Wikipedia's wikitext              wikipedia_corpus(pages, strip_markup)

Every rule here is part of the corpora's definition: experiments/corpora.sha256 pins their
bytes, so a change to any rule shows up there as a differing file. The HTML tree is built the
way BeautifulSoup's "html.parser" tree builder builds it (tags are never implicitly closed, an
end tag closes up to its most recent open namesake and is ignored without one), because that is
the tree the published corpora were cut from.
"""

from __future__ import annotations

import glob
import gzip
import html
import html.entities
import html.parser
import os
import re
import unicodedata
from typing import Callable, Iterable, Iterator, Optional

# ---------------------------------------------------------------------------------------------
# Which paragraphs count as prose
# ---------------------------------------------------------------------------------------------
FUNCTION_WORDS = frozenset("""a an the of to in on at by for from with without into onto over
under about as and or but nor not no if then than so that this these those there here is are was
were be been being am has have had do does did can could may might must shall should will would
it its it's they them their we our you your he she his her which who whom whose what when where
while how why all any each every some such only also more most other same own both either
neither one""".split())
QUOTES_AND_PUNCTUATION = "()[]\"'.,;:!?\u201c\u201d\u2018\u2019"
ENDS_LIKE_A_SENTENCE = re.compile(r"""[.!?:][)"'\]\u201d\u2019]*$""")
# A word, optionally wrapped in brackets or quotes and followed by punctuation: identifiers
# with digits, underscores, dots or slashes inside do not match.
ORDINARY_WORD = re.compile(
    r"""^[("'\[\u201c\u2018]*[A-Za-z][A-Za-z'\u2019-]*[)"'\]\u201d\u2019]*[.,;:!?]*"""
    r"""[)"'\]\u201d\u2019]*$""")
INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"))


def normalize(text: str) -> str:
    """NFC, without soft hyphens and zero-width characters, whitespace collapsed to one space."""
    return " ".join(unicodedata.normalize("NFC", text).translate(INVISIBLE).split())


def is_prose(paragraph: str) -> bool:
    """English prose, not code or a list of names: at least 6 words; at least 75% of its
    non-space characters letters, at most 3% of the letters outside ASCII; at least 70% of
    the words ordinary words; function words at least 10% of the words (and at least one);
    and a paragraph under 12 words must end like a sentence."""
    words = paragraph.split()
    if len(words) < 6:
        return False
    characters = paragraph.replace(" ", "")
    letters = [c for c in characters if c.isalpha()]
    if len(letters) < 0.75 * len(characters):
        return False
    if sum(ord(c) >= 128 for c in letters) > 0.03 * len(letters):
        return False
    if sum(1 for w in words if ORDINARY_WORD.match(w)) < 0.7 * len(words):
        return False
    function_words = sum(1 for w in words
                         if w.strip(QUOTES_AND_PUNCTUATION).lower() in FUNCTION_WORDS)
    if function_words < max(1, 0.1 * len(words)):
        return False
    return len(words) >= 12 or bool(ENDS_LIKE_A_SENTENCE.search(paragraph))


def read_text(path: str) -> str:
    """A file as UTF-8 text (gzipped when its name ends in .gz), undecodable bytes replaced,
    line ends made "\\n"."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------
class Element:
    """An HTML element: its name, attributes, and children (Elements and text strings)."""

    __slots__ = ("name", "attrs", "children", "parent")

    def __init__(self, name: str, attrs: dict[str, str], parent: Optional["Element"]):
        self.name = name
        self.attrs = attrs
        self.children: list[Element | str] = []
        self.parent = parent

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def descendants(self) -> Iterator["Element"]:
        """Every element below this one, in document order."""
        stack = [c for c in reversed(self.children) if isinstance(c, Element)]
        while stack:
            element = stack.pop()
            yield element
            stack.extend(c for c in reversed(element.children) if isinstance(c, Element))

    def find(self, predicate: Callable[["Element"], bool]) -> Optional["Element"]:
        return next((e for e in self.descendants() if predicate(e)), None)

    def text(self) -> str:
        parts: list[str] = []
        stack: list[Element | str] = list(reversed(self.children))
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                parts.append(node)
            else:
                stack.extend(reversed(node.children))
        return "".join(parts)

    def remove(self) -> None:
        if self.parent is not None:
            self.parent.children.remove(self)
            self.parent = None

    def replace_with_children(self, before: str = "") -> None:
        """Put this element's children (after the text `before`) where it stands."""
        siblings = self.parent.children
        at = siblings.index(self)
        for child in self.children:
            if isinstance(child, Element):
                child.parent = self.parent
        siblings[at:at + 1] = ([before] if before else []) + self.children
        self.parent = None

    def attached_to(self, root: "Element") -> bool:
        node: Optional[Element] = self
        while node is not None and node is not root:
            node = node.parent
        return node is root


VOID_ELEMENTS = frozenset("""area base br col embed hr img input keygen link menuitem meta param
source track wbr basefont bgsound command frame image isindex nextid spacer""".split())
# Text inside these is script, style sheet, template or ruby annotation, never prose.
NON_TEXT_CONTAINERS = frozenset(("script", "style", "template", "rt", "rp"))


def _numeric_reference(digits: str) -> str:
    """A numeric character reference's text, as HTML5 resolves it (0x80-0x9f as Windows-1252)."""
    number = int(digits[1:], 16) if digits[:1] in "xX" else int(digits)
    if number == 0 or number > 0x10FFFF or 0xD800 <= number <= 0xDFFF:
        return "\ufffd"
    if 0x80 <= number <= 0x9F:
        try:
            return bytes([number]).decode("cp1252")
        except UnicodeDecodeError:
            pass
    return chr(number)


class _TreeBuilder(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.root = Element("[document]", {}, None)
        self.open = [self.root]
        self.non_text_depth = 0

    def _add(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> Element:
        attributes: dict[str, str] = {}
        for key, value in attrs:
            attributes[key] = value or ""
        element = Element(tag, attributes, self.open[-1])
        self.open[-1].children.append(element)
        return element

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        element = self._add(tag, attrs)
        if tag not in VOID_ELEMENTS:
            self.open.append(element)
            self.non_text_depth += tag in NON_TEXT_CONTAINERS

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        self._add(tag, attrs)  # <x/> is closed at once, whatever x is

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].name == tag:
                for element in self.open[depth:]:
                    self.non_text_depth -= element.name in NON_TEXT_CONTAINERS
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        if self.non_text_depth:
            return
        children = self.open[-1].children
        if children and isinstance(children[-1], str):
            children[-1] += data
        else:
            children.append(data)

    def handle_charref(self, name: str) -> None:
        self.handle_data(_numeric_reference(name))

    def handle_entityref(self, name: str) -> None:
        entities = html.entities.html5
        # An unknown name stays literal text, without its semicolon.
        self.handle_data(entities.get(name + ";") or entities.get(name) or "&" + name)


def parse_html(text: str) -> Element:
    """The document's element tree (comments, declarations and non-text containers dropped)."""
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


class Selector:
    """One simple CSS selector: `tag`, `.class`, `#id`, combined (`div.topic.contents`), or
    `[class*=text]`."""

    _PART = re.compile(r"([.#]?)([\w-]+)|\[class\*=([\w-]+)\]")

    def __init__(self, css: str):
        self.tag: Optional[str] = None
        self.classes: set[str] = set()
        self.id: Optional[str] = None
        self.class_contains: Optional[str] = None
        for m in self._PART.finditer(css):
            kind, name, contained = m.groups()
            if contained:
                self.class_contains = contained
            elif kind == ".":
                self.classes.add(name)
            elif kind == "#":
                self.id = name
            else:
                self.tag = name

    def matches(self, element: Element) -> bool:
        if self.tag and element.name != self.tag:
            return False
        if self.id and element.attrs.get("id") != self.id:
            return False
        classes = element.classes
        if not self.classes.issubset(classes):
            return False
        return not self.class_contains or self.class_contains in " ".join(classes)


BLOCK_ELEMENTS = frozenset("""address article aside blockquote body caption center dd div dl dt
fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr html li main nav ol p pre
section table tbody td tfoot th thead tr ul br""".split())
# Never prose: code, tables, headings, term labels, navigation, tables of contents, figures,
# synopses; the Sphinx and DocBook classes that mark them.
DROPPED = tuple(Selector(css) for css in (
    "script", "style", "pre", "table", "h1", "h2", "h3", "h4", "h5", "h6", "dt",
    "nav", "img", "svg", "math", "form", "caption", "figcaption",
    "a.headerlink", "a.footnote-reference", "p.admonition-title", "p.rubric",
    "div.toctree-wrapper", "div.contents", "nav.contents", "div.topic.contents",
    "div.highlight", "[class*=highlight-]", "div.doctest", "span.math", "div.math",
    "div.sphinxsidebar", "div.related", "div.footer", "div.rst-footer-buttons",
    "div.navheader", "div.navfooter", "ul.docnav", "div.toc", "div.list-of-tables",
    "div.list-of-figures", "div.list-of-examples", "div.titlepage", ".title",
    "div.refsynopsisdiv", ".synopsis", ".programlisting", ".screen", ".literallayout",
    "div.mediaobject", "div.figure", "div.example", "div.informalexample",
    "div.table", "div.informaltable", "div.cmdsynopsis", "div.funcsynopsis",
    "div.calloutlist", "div.indexdiv", "div.index", "div#banner", "p#title",
    "div#site_footer", "div.versioninfo"))
ADMONITIONS = frozenset(("note", "tip", "warning", "caution", "important"))
SECTION_MARKS = ("\u00a7", "\u00b6")  # the "link to this section" anchors


def _open_admonition_tables(root: Element) -> None:
    """DocBook lays a note or warning out as a one-cell table: make its table plain blocks (its
    icon and header cell dropped) so that the table rule does not drop its text."""
    for div in [e for e in root.descendants()
                if e.name == "div" and ADMONITIONS.intersection(e.classes)]:
        for table in [c for c in div.children if isinstance(c, Element) and c.name == "table"]:
            for element in list(table.descendants()):
                if element.name in ("th", "img"):
                    element.remove()
            for element in table.descendants():
                if element.name in ("tbody", "tr", "td"):
                    element.name = "div"
            table.name = "div"


def html_paragraphs(root: Element) -> list[str]:
    """The normalized text of each block below root, with the dropped elements, footnote
    markers and section-mark anchors left out and superscripts written as ^x."""
    _open_admonition_tables(root)
    for sup in [e for e in root.descendants() if e.name == "sup"]:
        if not sup.attached_to(root):
            continue
        is_footnote_marker = sup.text().strip().startswith("[") or sup.find(
            lambda e: e.name == "a" and "footnote" in e.classes) is not None
        if is_footnote_marker:
            sup.remove()
        else:
            sup.replace_with_children(before="^")
    for anchor in [e for e in root.descendants() if e.name == "a"]:
        if anchor.text().strip() in SECTION_MARKS:
            anchor.remove()

    paragraphs: list[str] = []
    pending: list[str] = []

    def end_block() -> None:
        text = normalize("".join(pending))
        if text:
            paragraphs.append(text)
        pending.clear()

    def walk(element: Element) -> None:
        for child in element.children:
            if isinstance(child, str):
                pending.append(child)
            elif any(s.matches(child) for s in DROPPED):
                continue
            elif child.name in BLOCK_ELEMENTS:
                end_block()
                walk(child)
                end_block()
            else:
                walk(child)

    walk(root)
    end_block()
    return paragraphs


# ---------------------------------------------------------------------------------------------
# POD
# ---------------------------------------------------------------------------------------------
POD_ESCAPES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": '"', "amp": "&",
               "apos": "'"}
_FORMATTING_CODE = re.compile(r"([A-Z])<")
_URL = re.compile(r"\w+:[^:\s]\S*$")


def _pod_escape(name: str) -> str:
    if name in POD_ESCAPES:
        return POD_ESCAPES[name]
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", name):
        return chr(int(name, 16))
    if re.fullmatch(r"0[0-7]+", name):
        return chr(int(name, 8))
    if re.fullmatch(r"\d+", name):
        return chr(int(name))
    return html.unescape(f"&{name};")


def _pod_code(code: str, inner: str) -> str:
    """The plain text of one formatting code: X<> and Z<> vanish, E<> is a character, L<> its
    link text (or "section in page"), every other code its text."""
    if code in "XZ":
        return ""
    if code == "E":
        return _pod_escape(inner)
    inner = render_pod(inner)
    if code != "L":
        return inner
    if "|" in inner:
        return inner.split("|", 1)[0]
    if _URL.match(inner) or "/" not in inner:
        return inner
    page, section = inner.split("/", 1)
    section = section.strip('"')
    return f"{section} in {page}" if page else section


def render_pod(text: str) -> str:
    """POD text with its formatting codes (B<>, C<< >>, L<>, E<>, ...) turned into plain text."""
    out: list[str] = []
    at = 0
    while True:
        m = _FORMATTING_CODE.search(text, at)
        if m is None:
            out.append(text[at:])
            return "".join(out)
        out.append(text[at:m.start()])
        code, start = m.group(1), m.end()
        brackets = start
        while brackets < len(text) and text[brackets] == "<":
            brackets += 1
        if brackets > start and brackets < len(text) and text[brackets] in " \t\n":
            # C<< text >>: ends at the first space followed by as many >.
            closing = " " + ">" * (brackets - start + 1)
            end = text.find(closing, brackets)
            if end < 0:
                out.append(text[m.start():])
                return "".join(out)
            inner, at = text[brackets:end].strip(), end + len(closing)
        else:
            # C<text>: ends at the > that balances it; another code's < opens a level.
            depth, end = 1, start
            while end < len(text):
                if text[end] == ">":
                    depth -= 1
                    if depth == 0:
                        break
                elif text[end] == "<" and end > 0 and text[end - 1].isupper():
                    depth += 1
                end += 1
            inner, at = text[start:end], end + 1
        out.append(_pod_code(code, inner))


def pod_paragraphs(text: str) -> list[str]:
    """The ordinary paragraphs of a POD file, rendered: commands (headings, items, ...),
    verbatim (indented) paragraphs, =begin..=end blocks and text outside POD are left out."""
    blocks: list[list[str]] = [[]]
    for line in text.split("\n"):
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    paragraphs: list[str] = []
    in_pod, skipping = False, None
    for block in filter(None, blocks):
        first = block[0]
        if re.match(r"=[a-zA-Z]", first):
            command, *args = first.split()
            in_pod = command != "=cut"
            if skipping:
                if command == "=end" and args[:1] == [skipping]:
                    skipping = None
            elif command == "=begin":
                skipping = (args[:1] or [None])[0]
            continue
        if skipping or not in_pod or first[:1] in (" ", "\t"):
            continue
        rendered = normalize(render_pod(" ".join(block)))
        if rendered:
            paragraphs.append(rendered)
    return paragraphs


# ---------------------------------------------------------------------------------------------
# man pages written by pod2man
# ---------------------------------------------------------------------------------------------
ROFF_STRINGS = {"C`": "", "C'": "", 'L"': '"', 'R"': '"', "Aq": "'", "--": "--", "C+": "C++",
                "PI": "pi", "Tm": "(TM)"}
ROFF_CHARACTERS = {"aq": "'", "em": "--", "en": "-", "bu": "*", "lq": '"', "rq": '"',
                   "oq": "'", "cq": "'", "dq": '"', "co": "(C)", "mi": "-", "hy": "-",
                   "ga": "`", "ha": "^", "ti": "~", "rs": "\\", "pl": "+", "eq": "=",
                   "tm": "(TM)", "mu": "x"}
ROFF_ESCAPES = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "0": " ", ".": ".", "'": "'",
                "`": "`"}
_ROFF_ESCAPE = re.compile(r"""\\(f(?:\(..|\[[^\]]*\]|.)|s[-+]?\d|\*\(..|\*.|\(..|.)""")
# Requests that end a paragraph (any of a control line's first three words).
ROFF_BREAKS = frozenset(("PP", "Sp", "IP", "LP", "P", "TP", "SH", "SS", "sp", "br", "RS", "RE"))


def _roff_escape(m: re.Match) -> str:
    escape = m.group(1)
    if escape[0] in "fs":  # font and size changes
        return ""
    if escape.startswith("*("):
        return ROFF_STRINGS.get(escape[2:], "")
    if escape.startswith("*"):  # one-letter strings: pod2man's accents
        return ""
    if escape.startswith("("):
        return ROFF_CHARACTERS.get(escape[1:], "")
    return ROFF_ESCAPES.get(escape, "")


def man_paragraphs(text: str) -> list[str]:
    """The text paragraphs of a pod2man man page from its first section on; verbatim blocks
    (.Vb/.Ve) and control lines (.IX, item labels, ...) are left out."""
    paragraphs: list[str] = []
    pending: list[str] = []

    def end_paragraph() -> None:
        joined = normalize(" ".join(pending))
        if joined:
            paragraphs.append(joined)
        pending.clear()

    started = verbatim = False
    for line in text.split("\n"):
        if line.startswith((".SH", ".SS")):
            started = True
            end_paragraph()
        elif not started:
            continue
        elif verbatim:
            verbatim = not line.startswith(".Ve")
        elif line.startswith(".Vb"):
            end_paragraph()
            verbatim = True
        elif line.startswith((".", "'")):
            if ROFF_BREAKS.intersection(line[1:].split()[:3]):
                end_paragraph()
        elif not line.strip():
            end_paragraph()
        else:
            pending.append(_ROFF_ESCAPE.sub(_roff_escape, line))
    end_paragraph()
    return paragraphs


# ---------------------------------------------------------------------------------------------
# The Debian documentation packages
# ---------------------------------------------------------------------------------------------
Documents = Iterator[list[str]]  # each document's paragraphs


def _files(base: str, pattern: str, keep: Callable[[str], bool]) -> list[str]:
    """The files under base matching pattern whose path relative to base passes keep, sorted."""
    return [path for path in sorted(glob.glob(os.path.join(base, pattern), recursive=True))
            if keep(os.path.relpath(path, base))]


def _html_documents(files: Iterable[str],
                    content: Callable[[Element], Optional[Element]]) -> Documents:
    for path in files:
        root = content(parse_html(read_text(path)))
        if root is not None:  # a redirect or frame page: nothing to read
            yield html_paragraphs(root)


def _div_with(attribute: str, value: str) -> Callable[[Element], Optional[Element]]:
    return lambda tree: tree.find(lambda e: e.name == "div" and e.attrs.get(attribute) == value)


def _body(tree: Element) -> Optional[Element]:
    return tree.find(lambda e: e.name == "body")


_ISSUE_NUMBER = re.compile(r"^(?:bpo|gh|gh-issue|issue)-?\s?#?\d+:\s+")


def python_documents(package: str) -> Documents:
    """Every page of the Python documentation but the indexes, search and licence pages, then
    the changelog, one document per release (without the issue numbers)."""
    base = os.path.join(package, "usr/share/doc/python3.11/html")
    skip = re.compile(r"^(genindex.*|py-modindex|search|contents|index|copyright|license"
                      r"|download)\.html$")
    pages = _files(base, "**/*.html", lambda rel: not rel.startswith(("_", "includes/"))
                   and not skip.match(rel))
    main = _div_with("role", "main")
    yield from _html_documents(pages, main)
    changelog = main(parse_html(read_text(os.path.join(base, "whatsnew/changelog.html.gz"))))
    top = changelog.find(lambda e: e.name == "section")
    for release in [c for c in top.children if isinstance(c, Element) and c.name == "section"]:
        yield [_ISSUE_NUMBER.sub("", p) for p in html_paragraphs(release)]


def linux_documents(package: str) -> Documents:
    """Every page of the kernel's documentation but the indexes and the translations."""
    base = os.path.join(package, "usr/share/doc/linux-doc-6.1/html")
    skip = re.compile(r"^(genindex|search|py-modindex)\.html$")
    pages = _files(base, "**/*.html", lambda rel: not rel.startswith(("_", "translations/"))
                   and not skip.match(rel))
    return _html_documents(pages, _div_with("itemprop", "articleBody"))


def postgresql_documents(package: str) -> Documents:
    base = os.path.join(package, "usr/share/doc/postgresql-doc-15/html")
    skip = re.compile(r"^(index|bookindex|biblio|legalnotice)\.html$")
    return _html_documents(_files(base, "*.html", lambda rel: not skip.match(rel)), _body)


def perl_documents(package: str) -> Documents:
    """The perl*.pod pages (but the table of contents and the Unicode property list), then the
    core modules' man pages, which perl-doc ships only as pod2man output."""
    base = os.path.join(package, "usr/share/perl/5.36.0/pod")
    for path in _files(base, "*.pod", lambda rel: rel not in ("perltoc.pod", "perluniprops.pod")):
        yield pod_paragraphs(read_text(path))
    man = os.path.join(package, "usr/share/man/man3")
    for path in _files(man, "*.3perl.gz", lambda rel: True):
        yield man_paragraphs(read_text(path))


def handbook_documents(package: str) -> Documents:
    base = os.path.join(package, "usr/share/doc/debian-handbook/html/en-US")
    skip = re.compile(r"^(index|ix\d*)\.html$")
    return _html_documents(_files(base, "*.html", lambda rel: not skip.match(rel)), _body)


def reference_documents(package: str) -> Documents:
    base = os.path.join(package, "usr/share/debian-reference")
    return _html_documents(_files(base, "*.en.html", lambda rel: rel != "index.en.html"), _body)


DOCUMENTS: dict[str, Callable[[str], Documents]] = {
    "python3.11-doc": python_documents,
    "linux-doc-6.1": linux_documents,
    "postgresql-doc-15": postgresql_documents,
    "perl-doc": perl_documents,
    "debian-handbook": handbook_documents,
    "debian-reference-en": reference_documents,
}


def prose_corpus(documents: Iterable[list[str]], seen: set[str]) -> str:
    """The corpus text of documents: each document's prose paragraphs not in seen (which it
    extends), one a line, and a blank line after each document that keeps any."""
    out: list[str] = []
    for paragraphs in documents:
        kept = []
        for paragraph in paragraphs:
            if paragraph not in seen and is_prose(paragraph):
                seen.add(paragraph)
                kept.append(paragraph)
        if kept:
            out.append("\n".join(kept) + "\n\n")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Brown
# ---------------------------------------------------------------------------------------------
def untagged_sentences(tagged: str) -> list[str]:
    """The sentences (non-blank lines) of a tagged Brown file without their tags: each
    space-separated `word/tag` item becomes the word before its last `/`."""
    return [" ".join(item.rpartition("/")[0] for item in line.lstrip().split(" "))
            for line in tagged.split("\n") if line.strip()]


# ---------------------------------------------------------------------------------------------
# Wikipedia
# ---------------------------------------------------------------------------------------------
WIKI_MIN_LINE_WORDS = 8  # shorter lines are captions, table cells and list labels
WIKI_MIN_ARTICLE_WORDS = 50  # what is left of a disambiguation page is shorter
_WIKI_EMPHASIS = re.compile(r"'{2,}")  # ''italic'', '''bold'''


def wikipedia_corpus(pages: Iterable[tuple[str, str]],
                     strip_markup: Callable[[str], str]) -> str:
    """The corpus text of (title, wikitext) pages: each article as its title line and the
    lines of its text (after strip_markup, which turns wikitext into plain lines) that have at
    least WIKI_MIN_LINE_WORDS words and are not headings (=), bullets (*) or indented (:),
    emphasis quotes removed; articles with fewer than WIKI_MIN_ARTICLE_WORDS such words are
    left out."""
    out = []
    for title, wikitext in pages:
        lines = []
        for line in strip_markup(wikitext).split("\n"):
            line = line.strip()
            if line.startswith(("=", "*", ":")) or len(line.split()) < WIKI_MIN_LINE_WORDS:
                continue
            lines.append(_WIKI_EMPHASIS.sub("", line))
        if sum(len(line.split()) for line in lines) >= WIKI_MIN_ARTICLE_WORDS:
            out.append(title + "\n" + "".join(line + "\n" for line in lines) + "\n")
    return "".join(out)


def gensim_wikipedia_sample() -> str:
    """wikipedia_corpus() of the English Wikipedia excerpt in gensim's test data, with gensim's
    own wikitext filter (gensim must be importable: fetch_corpora.py installs it into a
    throwaway environment)."""
    import bz2

    from gensim.corpora import wikicorpus
    from gensim.test.utils import datapath

    path = datapath("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    with bz2.open(path) as f:
        pages = [(title, text) for title, text, _ in wikicorpus.extract_pages(f)]
    return wikipedia_corpus(pages, wikicorpus.filter_wiki)
