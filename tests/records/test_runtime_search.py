"""The composition root builds records search like document search: on first use, with the
one embedder and the one vector cache (``KEEPSTONE_VECTOR_CACHE_MB``) both share."""

from __future__ import annotations

from pathlib import Path

import pytest

from keepstone.config import Config
from keepstone.errors import InvalidRequest
from keepstone.runtime import open_runtime


def test_records_and_documents_share_the_embedder_and_the_cache(tmp_path: Path) -> None:
    config = Config.from_env(
        {
            "KEEPSTONE_HOME": str(tmp_path),
            "KEEPSTONE_EMBEDDER": "none",
            "KEEPSTONE_VECTOR_CACHE_MB": "3",
        }
    )
    runtime = open_runtime(config)
    try:
        records = runtime.records.record_search()
        documents = runtime.spaces.document_search()
        assert records is runtime.records.record_search()  # built once
        assert records.cache is documents.cache
        assert records.cache.max_bytes == 3 * 2**20
        assert records.embedder is None and documents.embedder is None  # keyword only
    finally:
        runtime.close()


@pytest.mark.parametrize("value", ["-1", "lots", "1.5"])
def test_a_bad_cache_size_is_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidRequest, match="KEEPSTONE_VECTOR_CACHE_MB"):
        Config.from_env({"KEEPSTONE_VECTOR_CACHE_MB": value})
