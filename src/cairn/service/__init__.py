"""The use-cases: the only thing the faces (api, cli, mcp, tools, automemory) call.

One module per capability — :mod:`~cairn.service.spaces` (knowledge spaces),
:mod:`~cairn.service.records` (team memory records), :mod:`~cairn.service.admin`
(administration) and :mod:`~cairn.service.audit` (the platform audit log) — over one
access model, :mod:`~cairn.service.access`, which decides every rule of SPEC §4-§7.
Services take typed arguments (the caller's :class:`~cairn.principal.Principal` first
for anything that changes data) and return dataclasses; faces render them.
"""
