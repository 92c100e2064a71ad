"""The corpus tools: `search` (BM25 over the documents, SQLite FTS5) and `lookup` (one document by id).

The corpus is a JSONL file of {"id": str, "title": str, "text": str} documents (--corpus), read and
checked whole before step 0 (a bad line stops the run, named by file and line) and indexed in memory
with SQLite's FTS5 extension, which ranks by BM25 (the title counts twice as much as the text). A query
is reduced to its words, each quoted, joined with OR: the model's text never reaches FTS5's query
syntax, so no query is an error and none can read beyond the index. A search stops at its deadline
(SQLite's progress handler interrupts it). Results are cut to a few documents and a few hundred
characters each, so a tool result cannot flood the context.
Standard library only: this file is inlined into the generated training loop.
"""

import json
import re
import sqlite3
import threading
import time

_CORPUS_RESULTS = 3  # documents a search returns
_CORPUS_RESULT_CHARS = 400  # characters of each document's text a search shows
_CORPUS_LOOKUP_CHARS = 2000  # characters of a document lookup shows
_CORPUS_QUERY_WORDS = 32  # words of a query that are searched for
_CORPUS_WORD_RE = re.compile(r"\w+")


class CorpusError(ValueError):
    """A corpus file that cannot be read or has a bad line; the message names the file and line."""


class Corpus:
    """The documents of a JSONL corpus, indexed for BM25 search; safe to use from several threads."""

    def __init__(self, path: str):
        self.path = path
        self.docs: dict[str, tuple[str, str]] = {}  # id -> (title, text)
        self.lock = threading.Lock()
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            self.db.execute("CREATE VIRTUAL TABLE docs USING fts5(title, text, tokenize='porter unicode61')")
        except sqlite3.OperationalError as exc:
            raise CorpusError(f"this Python's SQLite has no FTS5, which search needs: {exc}") from None
        rows = []
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise CorpusError(f"{path}: cannot read: {exc.strerror}") from None
        for line_no, raw in enumerate(data.split(b"\n"), 1):
            where = f"{path}:{line_no}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(f"{where}: not UTF-8 text (column {exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                raise CorpusError(f'{where}: not a JSON object {{"id", "title", "text"}}') from None
            if not isinstance(doc, dict) or not all(
                isinstance(doc.get(k), str) for k in ("id", "title", "text")
            ):
                raise CorpusError(f'{where}: a document needs "id", "title" and "text", all strings')
            if not doc["id"].strip() or doc["id"] in self.docs:
                raise CorpusError(f"{where}: id {doc['id']!r} is empty or used twice")
            self.docs[doc["id"]] = (doc["title"], doc["text"])
            rows.append((len(rows) + 1, doc["title"], doc["text"]))
        if not rows:
            raise CorpusError(f"{path}: no documents; expected one JSON object per line")
        self.ids = list(self.docs)  # rowid - 1 -> id
        self.db.executemany("INSERT INTO docs(rowid, title, text) VALUES (?, ?, ?)", rows)

    def search(self, query: str, timeout_s: float) -> str:
        """The best documents for `query` by BM25, as `[id] title` and the start of the text."""
        words = list(dict.fromkeys(_CORPUS_WORD_RE.findall(query.lower())))[:_CORPUS_QUERY_WORDS]
        if not words:
            return "error: the query has no words to search for"
        match = " OR ".join(f'"{word}"' for word in words)
        deadline = time.monotonic() + timeout_s
        with self.lock:
            self.db.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
            try:
                hits = self.db.execute(
                    "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs, 2.0, 1.0) LIMIT ?",
                    (match, _CORPUS_RESULTS),
                ).fetchall()
            except sqlite3.OperationalError as exc:
                if "interrupt" in str(exc):
                    return f"error: the search took longer than {timeout_s:g} s"
                raise
            finally:
                self.db.set_progress_handler(None, 0)
        if not hits:
            return f"no document matches {query.strip()[:200]!r}"
        shown = []
        for (rowid,) in hits:
            doc_id = self.ids[rowid - 1]
            title, text = self.docs[doc_id]
            cut = text if len(text) <= _CORPUS_RESULT_CHARS else text[:_CORPUS_RESULT_CHARS] + "..."
            shown.append(f"[{doc_id}] {title}\n{cut}")
        return "\n\n".join(shown)

    def lookup(self, doc_id: str) -> str:
        """The document with this id, as `[id] title` and its text."""
        doc = self.docs.get(doc_id.strip())
        if doc is None:
            return f"error: no document has the id {doc_id.strip()[:200]!r}; search shows ids in brackets"
        title, text = doc
        cut = text if len(text) <= _CORPUS_LOOKUP_CHARS else text[:_CORPUS_LOOKUP_CHARS] + "..."
        return f"[{doc_id.strip()}] {title}\n{cut}"


_CORPORA: dict[str, Corpus] = {}
_CORPORA_LOCK = threading.Lock()


def load_corpus(path: str) -> Corpus:
    """The corpus at `path`, read and indexed once per run."""
    with _CORPORA_LOCK:
        if path not in _CORPORA:
            _CORPORA[path] = Corpus(path)
        return _CORPORA[path]
