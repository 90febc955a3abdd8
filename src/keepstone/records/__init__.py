"""Team memory records (SPEC §6): short summaries of finished work for one team.

The component: the :class:`~keepstone.records.store.RecordStore` interface and its SQL
adapter (:mod:`keepstone.records.sql`; the background indexer's claims and the search
counters are :mod:`.sql_index`'s), tables and migrations (:mod:`.schema`), the fenced
rendering of a record's text (:mod:`.render`),
request bodies (:mod:`.models`), the per-team search rate limit (:mod:`.ratelimit`)
and search-quality measurement (:mod:`.quality`). It decides no access: the
use-cases — save, search, list, delete, settings, purge — are
:class:`keepstone.service.records.RecordService`'s, which every face (and the host
application's own server code) calls::

    from keepstone.service.records import build_record_service
    records = build_record_service(engine, identity, limiter)
    records.save_as_server(team_id, "Fixed the flaky deploy ...", repo_id=repo)
"""
