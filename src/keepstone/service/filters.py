"""A search's filters and its empty answer's hint, for the faces (which reach components
only through services): see :mod:`keepstone.search.filters` and
:mod:`keepstone.search.floor`. Light: loads no numpy."""

from collections.abc import Mapping
from typing import Any

from keepstone.search.filters import FILTER_PARAMS as FILTER_PARAMS
from keepstone.search.filters import NO_FILTERS as NO_FILTERS
from keepstone.search.filters import SearchFilters as SearchFilters
from keepstone.search.filters import search_filters as search_filters
from keepstone.search.floor import empty_hint as empty_hint


def search_answer(
    results: list[dict[str, Any]], filters: SearchFilters, pending: int
) -> dict[str, Any]:
    """A document search's answer as every face renders it: its results, how many chunks
    of the searched spaces wait for a vector (``pending``) and, when there are no results,
    the one-line ``hint`` that says why and what to try."""
    answer: dict[str, Any] = {"results": results, "pending": pending}
    if not results:
        answer["hint"] = empty_hint(filtered=filters.narrows)
    return answer


def filters_of(values: Mapping[str, Any]) -> SearchFilters:
    """The filters among ``values`` (a face's parsed arguments by name), checked."""
    return search_filters(**{name: values.get(name) for name in FILTER_PARAMS})
