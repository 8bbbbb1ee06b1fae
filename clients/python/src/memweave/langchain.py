"""A LangChain retriever over the memweave query service.

    from memweave import Client
    from memweave.langchain import MemweaveRetriever

    retriever = MemweaveRetriever(client=Client("http://127.0.0.1:8080"), strategy="raptor")
    docs = retriever.invoke("What did the author learn from painting?")
"""

from __future__ import annotations

from typing import Any, Optional

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from .client import Client, Strategy, passage_metadata


class MemweaveRetriever(BaseRetriever):
    """The passages an answer with `strategy` rests on, as documents whose
    metadata say their source, character range, strategy and epoch."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Client
    strategy: Strategy = "memwalker"
    #: Restrict the search to these document ids.
    documents: Optional[list[str]] = None
    #: Tokens of context the retrieval strategies gather.
    budget: Optional[int] = None
    #: Knobs of the strategy: top_k, max_pages, max_rounds, max_tokens, max_steps.
    options: dict[str, int] = {}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        answer = self.client.ask(
            query,
            self.strategy,
            documents=self.documents,
            budget=self.budget,
            **self.options,
        )
        return [
            Document(page_content=p.text, metadata=passage_metadata(p, answer), id=p.from_id)
            for p in answer.supporting
        ]
