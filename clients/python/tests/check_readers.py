"""Readers of a labelled memory, checked against a running query service with
tokens minted by PyJWT (not by memweave): every route, every strategy and
every MCP tool answers a principal from its own label sets only, as if the
other documents did not exist. The integration test `permissions` runs this;
exits non-zero on the first failure.

    python check_readers.py keys --dir KEYS
    python check_readers.py check --base http://127.0.0.1:PORT --keys KEYS \
        --expect EXPECT.json

`keys` writes an HS256 secret, an RSA key and the JWK set of its public
half. `check` reads EXPECT.json: the issuer, audience and administrator's
token, and per principal its groups, the documents it sees, the ids and
phrases it must never be shown and the phrases it must find.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

QUESTION = "What is the codename?"


def keys(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hs256.secret").write_text(secrets.token_hex(32) + "\n")
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (directory / "rsa.pem").write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    public.update({"kid": "readers-1", "alg": "RS256", "use": "sig"})
    (directory / "jwks.json").write_text(json.dumps({"keys": [public]}))


class Service:
    def __init__(self, base: str, token: str | None) -> None:
        self.base = base
        self.token = token
        self.seen: list[str] = []

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                status, text = answer.status, answer.read().decode()
        except urllib.error.HTTPError as failure:
            status, text = failure.code, failure.read().decode()
        self.seen.append(text)
        return status, text

    def get(self, path: str, expect: int = 200) -> Any:
        status, text = self.call("GET", path)
        assert status == expect, f"GET {path}: {status} {text[:300]}"
        return json.loads(text) if text.startswith(("{", "[")) else text

    def post(self, path: str, body: Any) -> Any:
        status, text = self.call("POST", path, body)
        assert status == 200, f"POST {path}: {status} {text[:300]}"
        return json.loads(text)


def quoted(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def routes(service: Service, reader: dict[str, Any], strategies: list[str]) -> None:
    listed = service.get("/v1/documents?limit=1000")
    ids = sorted(d["doc_id"] for d in listed["documents"])
    assert ids == sorted(reader["documents"]), f"documents {ids} != {sorted(reader['documents'])}"
    assert listed["total"] == len(reader["documents"]), listed["total"]
    for doc in ids:
        d = quoted(doc)
        for path in [
            f"/v1/documents/{d}",
            f"/v1/documents/{d}/tree",
            f"/v1/documents/{d}/tree?tree=raptor",
            f"/v1/documents/{d}/pages",
            f"/v1/documents/{d}/pages/0",
            f"/v1/documents/{d}/text",
        ]:
            service.get(path)
    # Another's ids are answered as ids nothing has.
    for kind, template in [
        ("documents", "/v1/documents/{}"),
        ("documents", "/v1/documents/{}/tree"),
        ("documents", "/v1/documents/{}/text"),
        ("segments", "/v1/segments/{}"),
        ("nodes", "/v1/nodes/{}"),
        ("entities", "/v1/entities/{}"),
    ]:
        for hidden in reader["hidden"][kind][:3]:
            status, text = service.call("GET", template.format(quoted(hidden)))
            made_up = "x" * len(hidden)
            _, unknown = service.call("GET", template.format(made_up))
            assert status == 404, f"{template} of another's {hidden}: {status}"
            assert text == unknown.replace(made_up, hidden), f"{text} != {unknown}"
            service.seen.pop()
            service.seen.pop()
    for kind, template in [
        ("segments", "/v1/segments/{}"),
        ("nodes", "/v1/nodes/{}"),
        ("entities", "/v1/entities/{}"),
    ]:
        for own in reader["own"][kind][:3]:
            service.get(template.format(quoted(own)))
    for name in reader["names"]:
        found = service.get(f"/v1/entities?name={quoted(name)}")
        for entity in found["entities"]:
            assert entity["entity_id"] not in reader["hidden"]["entities"], entity
    for strategy in strategies:
        answer = service.post("/v1/ask", {"question": QUESTION, "strategy": strategy})
        for passage in answer["supporting"]:
            assert passage["doc_id"] in ids, f"{strategy} cited {passage['doc_id']}"
    for method in ["bm25", "dense"]:
        found = service.post("/v1/search", {"query": QUESTION, "method": method, "top_k": 20})
        for passage in found["passages"]:
            assert passage["doc_id"] in ids, f"{method} found {passage['doc_id']}"
    overview = service.get("/v1/overview")
    assert overview["overview"]["documents"] == len(ids), overview["overview"]
    assert overview["storage"] == [], "a table's bytes are every reader's"
    service.get("/v1/checkpoints")
    metrics = service.get("/metrics")
    figures = [
        float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("memweave_memory_documents ")
    ]
    assert figures == [len(ids)], f"/metrics' documents: {figures}, not {len(ids)}"


async def tools(service: Service, reader: dict[str, Any]) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {service.token}"})
    async with http, streamable_http_client(f"{service.base}/mcp", http_client=http) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            doc = reader["documents"][0]
            calls = [
                ("list_documents", {"limit": 1000}),
                ("search", {"query": QUESTION, "top_k": 20}),
                ("ask", {"question": QUESTION, "strategy": "memwalker"}),
                ("ask", {"question": QUESTION, "strategy": "qrmem"}),
                ("document_tree", {"doc_id": doc}),
                ("page", {"doc_id": doc, "page": 0}),
                ("node", {"node_id": reader["own"]["nodes"][0]}),
                ("entity", {"entity_id": reader["own"]["entities"][0]}),
            ]
            for tool, arguments in calls:
                result = await session.call_tool(tool, arguments)
                assert not result.is_error, f"{tool}: {result.content}"
                service.seen.append(json.dumps(result.structured_content))
            hidden = reader["hidden"]
            for tool, field, kind in [
                ("node", "node_id", "nodes"),
                ("entity", "entity_id", "entities"),
                ("document_tree", "doc_id", "documents"),
            ]:
                # A reader of every set has no other's id to ask for.
                for other in hidden[kind][:1]:
                    result = await session.call_tool(tool, {field: other})
                    assert result.is_error, f"{tool} of another's {other}"


def check(base: str, key_dir: Path, expect: dict[str, Any]) -> None:
    secret = (key_dir / "hs256.secret").read_text().strip().encode()
    private = (key_dir / "rsa.pem").read_bytes()
    now = int(time.time())

    def minted(groups: list[str], key: Any = secret, algorithm: str = "HS256", **changed: Any) -> str:
        claims = {
            "sub": "reader",
            "iss": expect["issuer"],
            "aud": expect["audience"],
            "iat": now,
            "exp": now + 600,
            "groups": groups,
        }
        claims.update(changed)
        headers = {"kid": "readers-1"} if algorithm == "RS256" else None
        return jwt.encode(claims, key, algorithm=algorithm, headers=headers)

    first = next(iter(expect["readers"].values()))
    refused = {
        "no token": None,
        "expired": minted(first["groups"], exp=now - 3600),
        "another audience": minted(first["groups"], aud="someone-else"),
        "another issuer": minted(first["groups"], iss="https://elsewhere.example"),
        "another secret": minted(first["groups"], key=secrets.token_bytes(32)),
        "not a token": "not-a-token",
    }
    for label, token in refused.items():
        status, text = Service(base, token).call("GET", "/v1/documents")
        assert status == 401, f"{label}: {status} {text}"
        print(f"ok  {label}: 401 {text}")

    for name, reader in expect["readers"].items():
        for algorithm in ["HS256", "RS256"]:
            key = secret if algorithm == "HS256" else private
            service = Service(base, minted(reader["groups"], key=key, algorithm=algorithm))
            routes(service, reader, expect["strategies"])
            anyio.run(tools, service, reader)
            said = "\n".join(service.seen)
            for hidden in reader["hidden_phrases"]:
                assert hidden not in said, f"{name} was told {hidden!r}"
            for kind, hidden_ids in reader["hidden"].items():
                for hidden in hidden_ids:
                    assert hidden not in said, f"{name} was shown {kind} {hidden}"
            for phrase in reader["phrases"]:
                assert phrase in said, f"{name} never found {phrase!r}"
            print(f"ok  {name} ({algorithm}): {len(service.seen)} answers, none of another's")

    administrator = Service(base, expect["admin_token"])
    listed = administrator.get("/v1/documents?limit=1000")
    assert listed["total"] == expect["all_documents"], listed["total"]
    print(f"ok  the administrator's token: all {listed['total']} documents")


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("keys")
    made.add_argument("--dir", required=True, type=Path)
    checked = commands.add_parser("check")
    checked.add_argument("--base", required=True)
    checked.add_argument("--keys", required=True, type=Path)
    checked.add_argument("--expect", required=True, type=Path)
    args = parser.parse_args()
    if args.command == "keys":
        keys(args.dir)
    else:
        check(args.base, args.keys, json.loads(args.expect.read_text()))


if __name__ == "__main__":
    main()
