"""KeepstoneStore against LangGraph's BaseStore contract: the behaviours LangGraph's own store
tests check (put/get/delete, nested namespaces, the namespace rules, list_namespaces with
prefix/suffix/max_depth/limit/offset, search with filter/query/limit/offset, batch order,
the async twins), on Memory.local and on a Memory over the SQL store; the space's
refusals; the label and key spelling; one run over a real ``keepstone serve``."""

from __future__ import annotations

import asyncio
import time
import tomllib
from datetime import UTC

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from keepstone.errors import (
    InvalidDocument,
    InvalidPath,
    InvalidRequest,
    QuotaExceeded,
    SecretDetected,
)
from keepstone.integrations.langgraph import KeepstoneStore
from keepstone.integrations.langgraph_items import (
    MAX_VALUE_DEPTH,
    decode_segment,
    encode_segment,
    item_of_path,
    item_path,
)
from keepstone.paths import validate_doc_path
from keepstone.sdk import AsyncMemory, Memory
from tests.integrations.conftest import ROOT, MemoryFactory, check_extra, refused_import

#: Memory.local (the filesystem store, its index in SQLite) and a Memory over the SQL store
#: on SQLite, in process (tests/sdk/conftest.py's "sqlite").
local = pytest.mark.parametrize("memory_factory", ["local", "sqlite"], indirect=True)


@pytest.fixture
def store(memory_factory: MemoryFactory) -> KeepstoneStore:
    return KeepstoneStore(memory_factory(project="web"))


# --- Items -------------------------------------------------------------------------------


@local
def test_put_get_update_delete_and_the_document_each_item_is(store: KeepstoneStore) -> None:
    assert store.get(("users", "42"), "prefs") is None
    store.put(("users", "42"), "prefs", {"color": "blue", "tags": ["a", "b"], "n": 1.5})
    item = store.get(("users", "42"), "prefs")
    assert item is not None
    assert (item.namespace, item.key) == (("users", "42"), "prefs")
    assert item.value == {"color": "blue", "tags": ["a", "b"], "n": 1.5}
    assert item.created_at == item.updated_at and item.created_at.tzinfo is UTC
    doc = store.memory.read("users/42/prefs.md").content
    assert doc.startswith("```json\n{\n") and doc.endswith("\n}\n```\n") and '"blue"' in doc

    time.sleep(0.01)
    store.put(("users", "42"), "prefs", {"color": "red"})
    updated = store.get(("users", "42"), "prefs")
    assert updated is not None and updated.value == {"color": "red"}
    assert updated.created_at == item.created_at < updated.updated_at

    store.delete(("users", "42"), "prefs")
    assert store.get(("users", "42"), "prefs") is None
    store.delete(("users", "42"), "prefs")  # deleting what is gone is done
    store.put(("users", "42"), "prefs", {"color": "green"})
    again = store.get(("users", "42"), "prefs")
    assert again is not None and again.created_at > updated.updated_at  # created anew
    assert [v.deleted for v in store.memory.versions("users/42/prefs.md")] == [
        False,
        True,
        False,
        False,
    ]


@local
def test_nested_namespaces_are_directories_and_a_prefix_stops_at_a_label(
    store: KeepstoneStore,
) -> None:
    for ns in [("a",), ("a", "b"), ("a", "b", "c"), ("a", "bc")]:
        store.put(ns, "k", {"ns": list(ns)})
    assert sorted(d.path for d in store.memory.list()) == [
        "a/b/c/k.md",
        "a/b/k.md",
        "a/bc/k.md",
        "a/k.md",
    ]
    assert {i.namespace for i in store.search(("a", "b"))} == {("a", "b"), ("a", "b", "c")}
    assert len(store.search(("a",))) == 4
    assert len(store.search(())) == 4
    assert store.search(("A",)) == []  # labels are case-sensitive
    assert store.get(("a", "b"), "k").value == {"ns": ["a", "b"]}  # type: ignore[union-attr]


@local
def test_langgraphs_namespace_rules(store: KeepstoneStore) -> None:
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
    for bad in [("a.b",), ("a", ""), ("nul\x00",)]:
        with pytest.raises(InvalidNamespaceError):
            store.get(bad, "k")
        with pytest.raises(InvalidNamespaceError):
            store.search(bad)
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(bad, "k", doc)])  # past the public methods too
    with pytest.raises(InvalidNamespaceError):
        store.list_namespaces(prefix=("a.b",))
    with pytest.raises(InvalidNamespaceError, match="cannot be empty"):
        store.batch([PutOp((), "k", doc)])  # the space's root documents are not items
    # "langgraph" is refused as a root by put only, as in LangGraph's stores.
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.get(("langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    assert store.search(("foo", "langgraph", "foo"), query="bar")[0].value == doc
    assert store.memory.list("") == store.memory.list()  # nothing else was written
    assert len(store.memory.list()) == 2


# --- list_namespaces ----------------------------------------------------------------------

NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]


@local
def test_list_namespaces_prefix_suffix_wildcards_depth_and_pages(store: KeepstoneStore) -> None:
    assert store.list_namespaces() == []
    for i, ns in enumerate(NAMESPACES):
        store.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})
    store.memory.write("MEMORY.md", "# Not an item\n")  # at the root
    store.memory.write("notes.v2/todo.md", "- not an item\n")  # a label with '.'
    ls = store.list_namespaces
    assert ls() == sorted(NAMESPACES)
    assert ls(prefix=("a", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert ls(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert ls(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert ls(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert ls(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert ls(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert ls(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert ls(max_depth=1) == [("a",), ("admin",), ("b",), ("users",)]
    assert ls(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert ls(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert ls(prefix=("nonexistent",)) == []
    assert ls(prefix=("users", "123")) == [("users", "123")]


# --- search -------------------------------------------------------------------------------


@local
def test_search_filters_like_langgraph(store: KeepstoneStore) -> None:
    docs = {
        "doc1": {"color": "red", "score": 4.5, "user": {"level": "admin"}, "tags": ["x"]},
        "doc2": {"color": "red", "score": 3.0, "user": {"level": "guest"}, "tags": ["y"]},
        "doc3": {"color": "green", "score": 4.0, "name": "b"},
        "doc4": {"color": "blue", "score": 3.5, "name": "a", "flag": True, "a.b": 1},
    }
    for key, value in docs.items():
        store.put(("test",), key, value)

    def keys(**kw: object) -> list[str]:
        return sorted(i.key for i in store.search(("test",), **kw))  # type: ignore[arg-type]

    assert keys(filter={"color": "red"}) == ["doc1", "doc2"]
    assert keys(filter={"color": {"$eq": "red"}, "score": {"$gt": 4}}) == ["doc1"]
    assert keys(filter={"color": {"$ne": "red"}}) == ["doc3", "doc4"]
    assert keys(filter={"score": {"$gte": 3.5, "$lt": 4.5}}) == ["doc3", "doc4"]
    assert keys(filter={"score": {"$lte": 3.0}}) == ["doc2"]
    assert keys(filter={"name": {"$lt": "b"}}) == ["doc4"]  # strings order too
    assert keys(filter={"name": {"$gt": 1}}) == []  # a string against a number: no order
    assert keys(filter={"missing": {"$gt": 0}}) == []
    assert keys(filter={"user": {"level": "admin"}}) == ["doc1"]  # nested objects
    assert keys(filter={"user.level": "guest"}) == ["doc2"]  # a dotted path
    assert keys(filter={"a.b": 1}) == ["doc4"]  # a key with a '.' itself first
    assert keys(filter={"tags": ["y"]}) == ["doc2"]
    assert keys(filter={"flag": True}) == ["doc4"]
    assert keys(filter={"flag": {"$gt": 0}}) == []  # a boolean is not a number
    with pytest.raises(InvalidRequest, match=r"'\$in' is not one LangGraph defines"):
        store.search(("test",), filter={"color": {"$in": ["red"]}})


@local
def test_search_pages_newest_first_and_passes_documents_that_are_no_items(
    store: KeepstoneStore,
) -> None:
    for i in range(6):
        store.put(("pages",), f"k{i}", {"i": i, "even": i % 2 == 0})
        time.sleep(0.002)
    store.memory.write("pages/readme.md", "# Written by hand\n")
    store.memory.write("pages/broken.md", "```json\n{not json\n```\n")
    assert [i.key for i in store.search(("pages",))] == [f"k{i}" for i in range(5, -1, -1)]
    assert [i.key for i in store.search(("pages",), limit=2)] == ["k5", "k4"]
    assert [i.key for i in store.search(("pages",), limit=2, offset=4)] == ["k1", "k0"]
    assert store.search(("pages",), offset=6) == []
    assert store.search(("pages",), limit=0) == []
    evens = store.search(("pages",), filter={"even": True}, limit=2, offset=1)
    assert [i.key for i in evens] == ["k2", "k0"]
    assert all(i.score is None for i in store.search(("pages",)))
    with pytest.raises(InvalidDocument, match="'pages/readme.md' is not a LangGraph item"):
        store.get(("pages",), "readme")


@local
def test_a_query_ranks_by_the_spaces_search_within_the_prefix(store: KeepstoneStore) -> None:
    store.put(("mem", "u1"), "deploy", {"text": "we deploy on fridays with blue green"})
    store.put(("mem", "u1"), "lunch", {"text": "lunch is at noon"})
    store.put(("mem", "u1"), "coffee", {"text": "coffee machine on floor two"})
    store.put(("mem", "u2"), "deploy", {"text": "deploy fridays"})
    found = store.search(("mem", "u1"), query="deploy fridays")
    assert [i.key for i in found][0] == "deploy"
    assert found[0].namespace == ("mem", "u1") and found[0].score is not None
    assert found[0].score > 0
    assert {i.key for i in found[1:]} == {"lunch", "coffee"}  # never hidden, not scored
    assert all(i.score is None for i in found[1:])
    assert [i.key for i in store.search(("mem", "u1"), query="deploy fridays", limit=1)] == [
        "deploy"
    ]
    both = store.search(("mem",), query="deploy fridays")
    assert {(i.namespace, i.key) for i in both[:2]} == {
        (("mem", "u1"), "deploy"),
        (("mem", "u2"), "deploy"),
    }
    assert all(i.score is not None for i in both[:2]) and len(both) == 4
    filtered = store.search(("mem",), query="deploy", filter={"text": "deploy fridays"})
    assert [(i.namespace, i.key) for i in filtered] == [(("mem", "u2"), "deploy")]


@local
def test_a_blank_query_is_no_query(store: KeepstoneStore) -> None:
    """As in LangGraph's own stores: a graph that passes the user's message through as the
    query does not fail on a blank one."""
    store.put(("t",), "old", {"x": 1})
    time.sleep(0.002)
    store.put(("t",), "new", {"x": 2})
    for blank in ["", "  ", "\t\n"]:
        found = store.search(("t",), query=blank)
        assert [(i.key, i.score) for i in found] == [("new", None), ("old", None)], blank


# --- batch and async ----------------------------------------------------------------------


@local
def test_batch_runs_each_op_in_order(store: KeepstoneStore) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    results = store.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value2"}),
            SearchOp(("test",), filter={"data": "value2"}),
            ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("bar",)),)),
            GetOp(("test",), "key3"),
            PutOp(("test", "foo"), "key1", None),
            GetOp(("test", "foo"), "key1"),
        ]
    )
    assert len(results) == 7
    assert results[0].value == {"data": "value1"}  # type: ignore[union-attr]
    assert results[1] is None and results[5] is None
    assert [i.key for i in results[2]] == ["key2"]  # type: ignore[union-attr]
    assert results[3] == [("test", "bar")]
    assert results[4] is None and results[6] is None
    with pytest.raises(TypeError, match="give a LangGraph op"):
        store.batch(["not an op"])  # type: ignore[list-item]


@local
def test_a_key_that_is_not_a_string_is_read_as_basestore_reads_it(store: KeepstoneStore) -> None:
    """``str(key)``, as BaseStore's get, put and delete make it, for ops given to batch
    directly too; a filter key that is not a string names no field (None), as in
    InMemoryStore."""
    store.put(("t",), 5, {"x": 1})  # type: ignore[arg-type]
    assert store.batch([PutOp(("t",), 6, {"x": 2}), GetOp(("t",), 5)])[1].value == {"x": 1}  # type: ignore[arg-type, union-attr]
    assert store.get(("t",), "6").value == {"x": 2}  # type: ignore[union-attr]
    assert store.batch([GetOp(("t",), None)]) == [None]  # type: ignore[arg-type]
    store.batch([PutOp(("t",), 6, None)])  # type: ignore[arg-type]
    assert [i.key for i in store.search(("t",))] == ["5"]
    assert store.search(("t",), filter={1: 3}) == []  # type: ignore[dict-item]
    assert [i.key for i in store.search(("t",), filter={1: None})] == ["5"]  # type: ignore[dict-item]


@local
def test_the_async_twins(store: KeepstoneStore) -> None:
    async def main() -> None:
        await asyncio.gather(*(store.aput(("a", str(i)), "k", {"i": i}) for i in range(4)))
        got = await store.aget(("a", "2"), "k")
        assert got is not None and got.value == {"i": 2}
        assert len(await store.asearch(("a",), filter={"i": {"$gte": 1}})) == 3
        assert await store.alist_namespaces(prefix=("a",), limit=2) == [("a", "0"), ("a", "1")]
        await store.adelete(("a", "2"), "k")
        results = await store.abatch([GetOp(("a", "2"), "k"), GetOp(("a", "3"), "k")])
        assert results[0] is None and results[1].value == {"i": 3}  # type: ignore[union-attr]

    asyncio.run(main())


# --- Refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize("memory_factory", ["local"], indirect=True)  # a quota of the tree
def test_the_spaces_refusals_are_raised_and_nothing_is_stored(
    memory_factory: MemoryFactory,
) -> None:
    store = KeepstoneStore(memory_factory(project="web", team_quota=1000))
    with pytest.raises(QuotaExceeded):
        store.put(("big",), "k", {"text": "b" * 2000})
    with pytest.raises(SecretDetected) as refused:
        store.put(("keys",), "aws", {"key": "AKIAABCDEFGHIJKLMNOP"})
    assert "AKIAABCDEFGHIJKLMNOP" not in refused.value.message
    with pytest.raises(InvalidPath, match=r"namespace \('d', 'd',.* segments deep"):
        store.put(("d",) * 16, "k", {})
    with pytest.raises(InvalidPath, match="bytes long"):
        store.put(("n",), "k" * 600, {})
    with pytest.raises(InvalidRequest, match="must be JSON"):
        store.put(("v",), "k", {"when": object()})
    with pytest.raises(InvalidRequest, match="must be JSON"):
        store.put(("v",), "k", {"x": float("nan")})
    with pytest.raises(InvalidRequest, match="must be a dict"):
        store.batch([PutOp(("v",), "k", ["a list"])])  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="TTL is not supported"):
        store.put(("t",), "k", {}, ttl=5)
    with pytest.raises(NotImplementedError, match="TTL is not supported"):
        store.batch([PutOp(("t",), "k", {}, ttl=5.0)])
    assert store.memory.list() == []
    with pytest.raises(TypeError, match="for an AsyncMemory give its .sync"):
        KeepstoneStore(AsyncMemory(store.memory))  # type: ignore[arg-type]


@local
def test_a_value_json_would_not_give_back_is_refused(store: KeepstoneStore) -> None:
    """BaseStore.put's value "must contain string keys": at any depth, one that is not a
    string is refused rather than rewritten (1 and "1" would keep one value, True become
    "true"). A tuple, which JSON has not, comes back as a list."""
    for value in [
        {1: "a", "1": "b"},
        {True: "x"},
        {"n": [{"ok": {None: 1}}]},
        {"t": ({2.5: "x"},)},
    ]:
        with pytest.raises(InvalidRequest, match=r"dicts with string keys\): the key .* is not"):
            store.put(("v",), "k", value)  # type: ignore[dict-item]
    assert store.memory.list() == []
    store.put(("v",), "t", {"t": (1, (2, "b"))})
    assert store.get(("v",), "t").value == {"t": [1, [2, "b"]]}  # type: ignore[union-attr]


@local
def test_a_value_nested_too_deep_is_refused(store: KeepstoneStore) -> None:
    def nested(levels: int) -> dict[str, object]:
        value: dict[str, object] = {"leaf": [1]}  # two levels
        for _ in range(levels - 2):
            value = {"a": value}
        return value

    store.put(("v",), "deepest", nested(MAX_VALUE_DEPTH))
    assert store.get(("v",), "deepest").value == nested(MAX_VALUE_DEPTH)  # type: ignore[union-attr]
    for levels in (MAX_VALUE_DEPTH + 1, 5000):
        with pytest.raises(InvalidRequest, match=f"at most {MAX_VALUE_DEPTH} levels deep"):
            store.put(("v",), "deep", nested(levels))
    held: list[object] = []
    held.append(held)
    with pytest.raises(InvalidRequest, match="holds itself"):
        store.put(("v",), "loop", {"l": held})
    assert [d.path for d in store.memory.list()] == ["v/deepest.md"]


@local
def test_a_name_beyond_a_paths_limits_holds_nothing(store: KeepstoneStore) -> None:
    """Only put refuses such a name: nothing can be stored there, so a read finds nothing,
    a delete has nothing to do and a search no item (BaseStore's "not found" answers)."""
    store.put(("t",), "k", {"x": 1})
    too_deep = tuple("abcdefghijklmnop")
    for namespace, key in [(("t",), "k" * 600), (too_deep, "k"), (("x" * 600,), "k")]:
        assert store.get(namespace, key) is None
        store.delete(namespace, key)
        assert store.batch([GetOp(namespace, key), PutOp(namespace, key, None)]) == [None, None]
        with pytest.raises(InvalidPath, match="cannot be stored"):
            store.put(namespace, key, {"x": 1})
    for prefix in [too_deep, ("x" * 600,), ("t", "x" * 510)]:
        assert store.search(prefix) == []
        assert store.search(prefix, query="k") == []
    assert [d.path for d in store.memory.list()] == ["t/k.md"]


# --- Labels and keys ----------------------------------------------------------------------

ODD = ["a/b", "100%", "", "C:drive", "e\u0301", "\u202eevil", "tab\there", "~home", "x.md", ".."]


@local
def test_labels_and_keys_outside_the_path_alphabet_round_trip(store: KeepstoneStore) -> None:
    for i, key in enumerate(ODD):
        label = key.replace(".", "") or "empty"  # labels may not hold '.' nor be empty
        store.put(("odd", label), key, {"i": i})
    for i, key in enumerate(ODD):
        label = key.replace(".", "") or "empty"
        got = store.get(("odd", label), key)
        assert got is not None and (got.namespace, got.key, got.value) == (
            ("odd", label),
            key,
            {"i": i},
        )
    assert {i.key for i in store.search(("odd",), limit=20)} == set(ODD)
    assert [ns[1] for ns in store.list_namespaces(prefix=("odd",))] == sorted(
        {key.replace(".", "") or "empty" for key in ODD}
    )
    assert item_path(("a/b",), "100%") == "a%2Fb/100%25.md"
    assert item_path(("x",), "") == "x/%.md"
    # Directories no LangGraph label spells: empty, with '.' or NUL, a stray or lower-case escape.
    for path in ["%/k.md", "a.b/k.md", "a%00/k.md", "100%/k.md", "a%2f/k.md", "k.md"]:
        assert item_of_path(path) is None, path


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_a_segment_spelling_round_trips_and_is_a_valid_path(text: str) -> None:
    segment = encode_segment(text)
    assert decode_segment(segment) == text
    assert "/" not in segment
    if len(segment.encode("utf-8", "surrogatepass")) < 400:
        assert validate_doc_path(segment + ".md") == segment + ".md"


@settings(max_examples=200, deadline=None)
@given(
    namespace=st.lists(
        st.text(min_size=1).filter(lambda s: "." not in s and "\x00" not in s),
        min_size=1,
        max_size=4,
    ),
    key=st.text(),
)
def test_an_item_path_round_trips(namespace: list[str], key: str) -> None:
    try:
        path = item_path(tuple(namespace), key)
    except InvalidPath:
        return  # too long for a path: refused, never mangled
    assert item_of_path(path) == (tuple(namespace), key)


@settings(max_examples=300, deadline=None)
@given(segment=st.text())
def test_a_segment_no_key_spells_is_no_item(segment: str) -> None:
    text = decode_segment(segment)
    if text is not None:
        assert encode_segment(text) == segment  # one spelling per key, both ways


# --- The extra ----------------------------------------------------------------------------


def test_without_langgraph_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = refused_import(monkeypatch, "langgraph", "keepstone.integrations.langgraph")
    assert "pip install 'keepstone[langgraph]'" in str(refused)


def test_the_core_install_pulls_none_of_langgraph() -> None:
    check_extra("langgraph", ["langgraph-checkpoint>=2.1"], "langgraph")
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "langgraph" in dev["optional-dependencies"]["dev"][0]  # so CI runs these tests


# --- On a server --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "memory_factory", [pytest.param("server", marks=pytest.mark.slow)], indirect=True
)
def test_on_a_real_server(memory_factory: MemoryFactory) -> None:
    memory: Memory = memory_factory(project="web")
    store = KeepstoneStore(memory)
    store.put(("users", "a/b"), "prefs", {"color": "blue", "n": 2})
    store.put(("users", "c"), "prefs", {"color": "red", "n": 5})
    got = store.get(("users", "a/b"), "prefs")
    assert got is not None and got.value == {"color": "blue", "n": 2}
    assert got.created_at == got.updated_at
    assert store.list_namespaces(prefix=("users",)) == [("users", "a/b"), ("users", "c")]
    assert [i.key for i in store.search(("users",), filter={"n": {"$gt": 3}})] == ["prefs"]
    ranked = store.search(("users",), query="blue")
    assert ranked[0].namespace == ("users", "a/b") and ranked[0].score is not None
    with pytest.raises(SecretDetected):
        store.put(("users", "c"), "key", {"token": "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"})
    store.delete(("users", "a/b"), "prefs")
    assert store.get(("users", "a/b"), "prefs") is None
    assert [d.path for d in memory.list()] == ["users/c/prefs.md"]
