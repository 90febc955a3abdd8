"""The use-cases: the only thing the faces (api, cli, mcp, tools, automemory) call.

One module per capability — :mod:`~keepstone.service.spaces` (knowledge spaces),
:mod:`~keepstone.service.records` (team memory records), :mod:`~keepstone.service.admin`
(administration) and :mod:`~keepstone.service.audit` (the platform audit log) — over one
access model, :mod:`~keepstone.service.access`, which decides every rule of SPEC §4-§7.
Services take typed arguments (the caller's :class:`~keepstone.principal.Principal` first
for anything that changes data) and return dataclasses; faces render them.
"""
