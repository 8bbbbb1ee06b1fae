"""memweave: LLM memory over whole archives, from Python.

`Client` speaks the query service's HTTP API; `memweave.langchain` and
`memweave.llama_index` wrap it as retrievers for those frameworks.
"""

from .client import (
    Answer,
    Client,
    Document,
    DocumentPage,
    Hit,
    MemweaveError,
    Passage,
    SearchResult,
    Section,
    Step,
)

__all__ = [
    "Answer",
    "Client",
    "Document",
    "DocumentPage",
    "Hit",
    "MemweaveError",
    "Passage",
    "SearchResult",
    "Section",
    "Step",
]
