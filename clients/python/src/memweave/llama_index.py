"""A LlamaIndex retriever over the memweave query service.

    from memweave import Client
    from memweave.llama_index import MemweaveRetriever

    retriever = MemweaveRetriever(Client("http://127.0.0.1:8080"), strategy="qrmem")
    nodes = retriever.retrieve("Why should startups grow fast?")
"""

from __future__ import annotations

from typing import Any, Optional

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from .client import Client, Strategy, passage_metadata


class MemweaveRetriever(BaseRetriever):
    """The passages an answer with `strategy` rests on, as text nodes whose
    metadata say their source, character range, strategy and epoch. The
    navigators cite passages without a shared score, so nodes have none."""

    def __init__(
        self,
        client: Client,
        strategy: Strategy = "memwalker",
        *,
        documents: Optional[list[str]] = None,
        budget: Optional[int] = None,
        options: Optional[dict[str, int]] = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.client = client
        self.strategy = strategy
        self.documents = documents
        self.budget = budget
        self.options = dict(options or {})

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = self.client.ask(
            query_bundle.query_str,
            self.strategy,
            documents=self.documents,
            budget=self.budget,
            **self.options,
        )
        return [
            NodeWithScore(
                node=TextNode(id_=p.from_id, text=p.text, metadata=passage_metadata(p, answer)),
                score=None,
            )
            for p in answer.supporting
        ]
