"""Keepstone inside the agent frameworks: each module adapts a :class:`~keepstone.Memory` to
one framework's own interface (docs/integrations/).

Each module needs its framework's package, an optional extra of ours
(``pip install 'keepstone[anthropic]'``, ``'keepstone[openai-agents]'``,
``'keepstone[langgraph]'``); importing the module without it raises one :class:`ImportError`
that names the extra. Nothing here is imported by the rest of Keepstone, so the core install
pulls none of them. The modules sit above :mod:`keepstone.sdk`, like a face, and call only
:class:`~keepstone.Memory` / :class:`~keepstone.AsyncMemory` (and the tools
:meth:`~keepstone.Memory.tools` gives).
"""
