"""The space of a route that may name one or leave it out (the activity feed, the search):
the four query parameters of every spaces route, ``name`` optional, read once for both.

Leaving the space out means "every space the caller may read"; what a route answers then,
and how it refuses the space's other parameters sent without a name, is the route's own.
"""

# No ``from __future__ import annotations``: FastAPI reads the dependency's annotations at
# run time, and ``name``'s refers to the description :func:`maybe_space` is given.
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Query, Request

from keepstone.api.routes.spaces import (
    SEGMENT_SCHEMA,
    SPACE_PARAMS,
    BotParam,
    ProjectParam,
    VisibilityParam,
    check_params,
)
from keepstone.principal import Principal as Who
from keepstone.service.access import space_ref
from keepstone.spaces import SpaceRef


@dataclass(frozen=True, slots=True)
class MaybeSpace:
    """The query parameters that may name a space, and the names of every query parameter
    the request sent."""

    name: str | None
    visibility: str
    project: str | None
    bot: str | None
    sent: tuple[str, ...]

    def check(self, *extra: str) -> None:
        """Refuse a parameter sent that is neither the space's nor one of the route's."""
        check_params(self.sent, (*SPACE_PARAMS, *extra))

    def sent_without_name(self) -> list[str]:
        """The space's parameters the request sent (meaningful when it sent no name)."""
        return [key for key in SPACE_PARAMS if key in self.sent]

    def ref(self, who: Who) -> SpaceRef:
        """The space named (``name`` given), stamped with the caller's team and user."""
        assert self.name is not None
        return space_ref(who, self.name, self.visibility, project=self.project, bot=self.bot)


def maybe_space(name_description: str) -> Any:
    """The dependency that reads a :class:`MaybeSpace`, ``name`` documented as given."""

    async def read(
        request: Request,
        name: Annotated[
            str | None, Query(description=name_description, json_schema_extra=SEGMENT_SCHEMA)
        ] = None,
        visibility: VisibilityParam = "project",
        project: ProjectParam = None,
        bot: BotParam = None,
    ) -> MaybeSpace:
        # async on purpose: no I/O, so no threadpool hop.
        return MaybeSpace(name, visibility, project, bot, tuple(request.query_params))

    return Depends(read)
