"""A typed client for the memweave query service's HTTP API (see its /openapi.json).

Only the standard library: the client works wherever Python does, and the
LangChain and LlamaIndex retrievers build on it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Optional

Strategy = Literal[
    "memwalker",
    "readagent-p",
    "readagent-s",
    "qrmem-trial",
    "qrmem-expand",
    "qrmem",
    "ilmtr",
    "raptor",
    "bm25",
    "dense",
]
SearchMethod = Literal["bm25", "dense"]
Tree = Literal["memwalker", "raptor"]


class MemweaveError(Exception):
    """The service refused or failed a request: its HTTP status and its message."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Section:
    """The part of a document a passage starts in, as its source names it."""

    start_char: int
    kind: str
    """"page" (a PDF's page), "heading" (the path of headings above it),
    "message" (a mail's Message-ID) or "row" (a dataset row's id)."""
    label: str


@dataclass(frozen=True)
class Passage:
    """Text an answer rests on: where it is in which document."""

    doc_id: str
    title: str
    source_uri: str
    from_id: str
    start_char: int
    end_char: int
    text: str
    section: Optional[Section] = None

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Passage":
        return cls(
            doc_id=value["doc_id"],
            title=value["title"],
            source_uri=value["source_uri"],
            from_id=value["from_id"],
            start_char=value["start_char"],
            end_char=value["end_char"],
            text=value["text"],
            section=Section(**value["section"]) if value.get("section") else None,
        )


@dataclass(frozen=True)
class Step:
    """One step of a navigation, with the model calls that led to it."""

    step: int
    action: str
    target: str
    level: Optional[int]
    score: float
    reasoning: str
    depth: int
    calls: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Step":
        return cls(
            step=value["step"],
            action=value["action"],
            target=value["target"],
            level=value.get("level"),
            score=value["score"],
            reasoning=value["reasoning"],
            depth=value.get("depth", 0),
            calls=list(value.get("calls", [])),
        )


@dataclass(frozen=True)
class Answer:
    """An answer, the passages it rests on, and how it was found."""

    question: str
    strategy: str
    epoch: int
    answered: bool
    answer: str
    supporting: list[Passage]
    trace: list[Step]
    usage: dict[str, int]

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Answer":
        return cls(
            question=value["question"],
            strategy=value["strategy"],
            epoch=value["epoch"],
            answered=value["answered"],
            answer=value["answer"],
            supporting=[Passage.from_json(p) for p in value["supporting"]],
            trace=[Step.from_json(s) for s in value["trace"]],
            usage=dict(value.get("usage", {})),
        )


@dataclass(frozen=True)
class Hit:
    """A passage a search found, and its score (BM25, or cosine)."""

    passage: Passage
    score: float


@dataclass(frozen=True)
class SearchResult:
    epoch: int
    method: str
    hits: list[Hit]


@dataclass(frozen=True)
class Document:
    doc_id: str
    source_uri: str
    title: str
    version: int
    n_tokens: int
    #: Where its text's parts came from (pages, headings, message, row).
    sections: tuple[Section, ...] = ()

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Document":
        fields = {k: v for k, v in value.items() if k != "sections"}
        return cls(**fields, sections=tuple(Section(**s) for s in value.get("sections", [])))


@dataclass(frozen=True)
class DocumentPage:
    epoch: int
    total: int
    documents: list[Document]
    #: The `after` of the following page; None on the last.
    next: Optional[str]


class Client:
    """The query service at `base_url`; `token` when it needs a bearer token."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        token: Optional[str] = None,
        timeout: float = 120.0,
    ):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as failure:
            text = failure.read().decode(errors="replace")
            try:
                message = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                message = text
            raise MemweaveError(failure.code, message) from None

    @staticmethod
    def _query(**params: Any) -> str:
        given = {k: v for k, v in params.items() if v is not None}
        return "?" + urllib.parse.urlencode(given) if given else ""

    @staticmethod
    def _id(value: str) -> str:
        return urllib.parse.quote(value, safe="")

    def ready(self) -> Optional[int]:
        """The checkpoint epoch served, or None before the first commit."""
        try:
            return self._call("GET", "/readyz")["epoch"]
        except MemweaveError as failure:
            if failure.status == 503:
                return None
            raise

    def ask_json(
        self,
        question: str,
        strategy: Strategy = "memwalker",
        *,
        documents: Optional[list[str]] = None,
        budget: Optional[int] = None,
        **options: int,
    ) -> dict[str, Any]:
        """`POST /v1/ask` as the service answers it. `options`: top_k,
        max_pages, max_rounds, max_tokens, max_steps."""
        body: dict[str, Any] = {"question": question, "strategy": strategy}
        if documents is not None:
            body["documents"] = documents
        if budget is not None:
            body["budget"] = budget
        if options:
            body["options"] = options
        return self._call("POST", "/v1/ask", body)

    def ask(self, question: str, strategy: Strategy = "memwalker", **kwargs: Any) -> Answer:
        """An answer with its supporting passages and trace (see `ask_json`)."""
        return Answer.from_json(self.ask_json(question, strategy, **kwargs))

    def search(
        self,
        query: str,
        method: SearchMethod = "bm25",
        *,
        top_k: Optional[int] = None,
        documents: Optional[list[str]] = None,
    ) -> SearchResult:
        """The passages BM25 (or the dense baseline) ranks highest; no model is asked."""
        body: dict[str, Any] = {"query": query, "method": method}
        if top_k is not None:
            body["top_k"] = top_k
        if documents is not None:
            body["documents"] = documents
        found = self._call("POST", "/v1/search", body)
        hits = [Hit(Passage.from_json(h), h["score"]) for h in found["passages"]]
        return SearchResult(epoch=found["epoch"], method=found["method"], hits=hits)

    def documents(self, *, after: Optional[str] = None, limit: Optional[int] = None) -> DocumentPage:
        page = self._call("GET", "/v1/documents" + self._query(after=after, limit=limit))
        return DocumentPage(
            epoch=page["epoch"],
            total=page["total"],
            documents=[Document.from_json(d) for d in page["documents"]],
            next=page["next"],
        )

    def iter_documents(self, *, page_size: int = 1000) -> Iterator[Document]:
        """Every document, a page at a time."""
        after = None
        while True:
            page = self.documents(after=after, limit=page_size)
            yield from page.documents
            if page.next is None:
                return
            after = page.next

    def tree(self, doc_id: str, tree: Tree = "memwalker", *, depth: Optional[int] = None) -> dict[str, Any]:
        """A document's tree; its top `depth` levels below the root when given."""
        path = f"/v1/documents/{self._id(doc_id)}/tree" + self._query(tree=tree, depth=depth)
        return self._call("GET", path)

    def page(self, doc_id: str, page: int) -> dict[str, Any]:
        """A ReadAgent page (from 0): its text and its gist."""
        return self._call("GET", f"/v1/documents/{self._id(doc_id)}/pages/{int(page)}")

    def node(self, node_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/nodes/{self._id(node_id)}")

    def entity(self, entity_id: str, *, limit: Optional[int] = None) -> dict[str, Any]:
        """An entity with its first relations and source segments, and their totals."""
        return self._call("GET", f"/v1/entities/{self._id(entity_id)}" + self._query(limit=limit))


def passage_metadata(passage: Passage, answer: Answer) -> dict[str, Any]:
    """What the retrievers attach to each passage: where it is, and which
    strategy and checkpoint found it."""
    return {
        "source": passage.source_uri,
        "title": passage.title,
        "doc_id": passage.doc_id,
        "from_id": passage.from_id,
        "start_char": passage.start_char,
        "end_char": passage.end_char,
        "section_kind": passage.section.kind if passage.section else None,
        "section": passage.section.label if passage.section else None,
        "strategy": answer.strategy,
        "epoch": answer.epoch,
    }
