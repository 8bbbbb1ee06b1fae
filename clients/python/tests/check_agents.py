"""The memory as agents and Python frameworks reach it, checked with the real
libraries against a running query service: the official MCP SDK over
streamable HTTP and over stdio, the `memweave` client, and the LangChain and
LlamaIndex retrievers. Every tool's result must equal the HTTP API's for the
same request. The integration test `agents` runs this; exits non-zero on the
first difference.

    python check_agents.py --base http://127.0.0.1:PORT --token T \
        --binary memweave-query --tables TABLES --entity ENTITY_ID
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from memweave import Client, MemweaveError
from memweave.langchain import MemweaveRetriever as LangChainRetriever
from memweave.llama_index import MemweaveRetriever as LlamaIndexRetriever

TOOLS = {"ask", "search", "list_documents", "document_tree", "node", "page", "entity"}
STRATEGIES = 10
QUESTION = "What did the author learn from painting?"


def without_timings(value: Any) -> Any:
    """An answer without what no two askings share: latencies."""
    if isinstance(value, dict):
        return {
            k: (0 if k in ("latency_ms", "model_ms") else without_timings(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def same(label: str, got: Any, expected: Any) -> None:
    if without_timings(got) != without_timings(expected):
        raise AssertionError(
            f"{label}: MCP gave\n{json.dumps(got, sort_keys=True)[:2000]}\n"
            f"the HTTP API gave\n{json.dumps(expected, sort_keys=True)[:2000]}"
        )
    print(f"ok  {label}")


def http_error(call) -> str:
    try:
        call()
    except MemweaveError as failure:
        return failure.message
    raise AssertionError("the HTTP API accepted a request it should refuse")


class Calls:
    """Each tool's arguments and the HTTP API's answer to the same request."""

    def __init__(self, client: Client, entity: str):
        documents = client.documents(limit=3)
        assert documents.total >= 3, documents
        doc = documents.documents[0].doc_id
        root = client.tree(doc, depth=0)
        whole = client.tree(doc)
        assert len(root["nodes"]) == 1 < len(whole["nodes"]), "depth 0 is the root alone"
        tree = client.tree(doc, "raptor", depth=1)
        node = root["nodes"][0]["node_id"]
        self.doc = doc
        self.cases: list[tuple[str, str, dict[str, Any], Any]] = []
        for strategy in ["memwalker", "readagent-p", "qrmem", "raptor", "bm25"]:
            arguments = {"question": QUESTION, "strategy": strategy}
            self.cases.append(
                (f"ask {strategy}", "ask", arguments, client.ask_json(QUESTION, strategy))
            )
        self.cases += [
            (
                "ask within documents",
                "ask",
                {"question": QUESTION, "strategy": "dense", "documents": [doc], "budget": 500},
                client.ask_json(QUESTION, "dense", documents=[doc], budget=500),
            ),
            ("search bm25", "search", {"query": "painting", "top_k": 3}, raw_search(client, "bm25")),
            (
                "search dense",
                "search",
                {"query": "painting", "method": "dense", "top_k": 3},
                raw_search(client, "dense"),
            ),
            ("list_documents", "list_documents", {"limit": 2}, raw(client, "/v1/documents?limit=2")),
            ("document_tree", "document_tree", {"doc_id": doc, "depth": 0}, root),
            (
                "document_tree raptor",
                "document_tree",
                {"doc_id": doc, "tree": "raptor", "depth": 1},
                tree,
            ),
            ("node", "node", {"node_id": node}, client.node(node)),
            ("page", "page", {"doc_id": doc, "page": 0}, client.page(doc, 0)),
            ("entity", "entity", {"entity_id": entity, "limit": 5}, client.entity(entity, limit=5)),
        ]
        # Requests the API refuses: the tool error says what the 400 or 404 says.
        self.refused = [
            ("empty question", "ask", {"question": " "}, http_error(lambda: client.ask_json(" "))),
            (
                "unknown document",
                "ask",
                {"question": QUESTION, "documents": ["nope"]},
                http_error(lambda: client.ask_json(QUESTION, documents=["nope"])),
            ),
            (
                "page past the end",
                "page",
                {"doc_id": doc, "page": 100000},
                http_error(lambda: client.page(doc, 100000)),
            ),
            (
                "entity list too long",
                "entity",
                {"entity_id": entity, "limit": 0},
                http_error(lambda: client.entity(entity, limit=0)),
            ),
        ]


def raw(client: Client, path: str) -> Any:
    return client._call("GET", path)


def raw_search(client: Client, method: str) -> Any:
    return client._call("POST", "/v1/search", {"query": "painting", "method": method, "top_k": 3})


async def check_session(session: ClientSession, calls: Calls, transport: str) -> None:
    await session.initialize()
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == TOOLS, sorted(tools)
    writers = [n for n, t in tools.items() if not (t.annotations and t.annotations.read_only_hint)]
    assert not writers, f"tools not marked read-only: {writers}"
    ask = tools["ask"].input_schema
    assert ask["required"] == ["question"], ask
    strategies = ask["properties"]["strategy"]
    if "$ref" in strategies:
        strategies = ask["$defs"][strategies["$ref"].split("/")[-1]]
    assert len(strategies["enum"]) == STRATEGIES, strategies
    for label, tool, arguments, expected in calls.cases:
        result = await session.call_tool(tool, arguments)
        assert not result.is_error, f"{transport} {label}: {result.content}"
        same(f"{transport} {label}", result.structured_content, expected)
    for label, tool, arguments, message in calls.refused:
        result = await session.call_tool(tool, arguments)
        assert result.is_error, f"{transport} {label} was not refused"
        said = " ".join(block.text for block in result.content)
        assert said == message, f"{transport} {label}: {said!r} != {message!r}"
        print(f"ok  {transport} {label} refused: {said}")


async def over_http(base: str, token: str, calls: Calls) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(f"{base}/mcp", http_client=http) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await check_session(session, calls, "streamable HTTP")


async def over_stdio(binary: str, tables: str, calls: Calls) -> None:
    server = StdioServerParameters(command=binary, args=["mcp", "--tables", tables])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await check_session(session, calls, "stdio")


def mcp_needs_the_token(base: str) -> None:
    request = urllib.request.Request(
        f"{base}/mcp",
        data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as failure:
        assert failure.code == 401, failure.code
        print("ok  /mcp without the token: 401")
        return
    raise AssertionError("/mcp answered without the bearer token")


def retrievers(client: Client) -> None:
    for strategy in ["raptor", "qrmem", "memwalker"]:
        expected = client.ask_json(QUESTION, strategy)
        passages = expected["supporting"]
        assert passages, f"{strategy} cited nothing"
        wanted = [
            (
                p["text"],
                {
                    "source": p["source_uri"],
                    "title": p["title"],
                    "doc_id": p["doc_id"],
                    "from_id": p["from_id"],
                    "start_char": p["start_char"],
                    "end_char": p["end_char"],
                    "section_kind": (p["section"] or {}).get("kind"),
                    "section": (p["section"] or {}).get("label"),
                    "strategy": strategy,
                    "epoch": expected["epoch"],
                },
            )
            for p in passages
        ]
        documents = LangChainRetriever(client=client, strategy=strategy).invoke(QUESTION)
        got = [(d.page_content, d.metadata) for d in documents]
        assert got == wanted, f"LangChain {strategy}: {got} != {wanted}"
        print(f"ok  LangChain retriever, {strategy}: {len(got)} documents")
        nodes = LlamaIndexRetriever(client, strategy).retrieve(QUESTION)
        got = [(n.node.get_content(), n.node.metadata) for n in nodes]
        assert got == wanted, f"LlamaIndex {strategy}: {got} != {wanted}"
        print(f"ok  LlamaIndex retriever, {strategy}: {len(got)} nodes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--tables", required=True)
    parser.add_argument("--entity", required=True)
    args = parser.parse_args()
    client = Client(args.base, token=args.token)
    assert client.ready() == 1
    listed = list(client.iter_documents(page_size=2))
    assert len(listed) == client.documents().total
    assert len({d.doc_id for d in listed}) == len(listed)
    print(f"ok  the client lists {len(listed)} documents a page at a time")
    try:
        Client(args.base).ask(QUESTION)
        raise AssertionError("asked without the token")
    except MemweaveError as failure:
        assert failure.status == 401, failure
    calls = Calls(client, args.entity)
    mcp_needs_the_token(args.base)
    anyio.run(over_http, args.base, args.token, calls)
    anyio.run(over_stdio, args.binary, args.tables, calls)
    retrievers(client)
    print("all checks passed")


if __name__ == "__main__":
    main()
